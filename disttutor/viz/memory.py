"""The interactive memory calculator of chapter 1: a plot, and a widget around it.

Introduced in chapter 1. :func:`plot_strategies` is a plain function (data +
matplotlib figure) used by the notebook's static figure, by the widget and
by the tests; :func:`calculator` only wires ipywidgets to it. The formulas
live in :mod:`disttutor.sharding.memory`.
"""
from __future__ import annotations

from typing import Any

from disttutor.sharding import memory as mem

COLORS = {"weights": "#4C72B0", "gradients": "#DD8452", "optimizer": "#55A868", "activations": "#C44E52"}
YLABEL = "GiB per device"
DEVICE_GIB = 80.0  # the line at one device's memory: a large data-centre GPU
# The calculator's controls: keyword of :func:`calculator_view` -> the label a learner reads (the web
# edition's live widget finds its controls in a notebook's saved widget state by these labels).
CONTROLS = {"preset": "model", "batch": "global batch", "seq": "sequence", "precision": "precision",
            "optimizer": "optimizer", "n": "devices"}


def breakdown_rows(cfg: mem.TrainingSetup, n: int) -> list[dict[str, Any]]:
    """One row per strategy: GiB per device for each part and the total."""
    rows = []
    for name, setup in mem.strategies(cfg, n).items():
        b = mem.per_device(setup)
        rows.append({"strategy": name, **{k: round(v / mem.GIB, 3) for k, v in b.items()}})
    return rows


def total_labels(rows: list[dict[str, Any]]) -> list[str]:
    """The label over each strategy's bar: its stacked height in GiB."""
    return [f"{sum(r[p] for p in mem.PARTS):.1f}" for r in rows]


def title(cfg: mem.TrainingSetup, n: int) -> str:
    return (f"{cfg.params / 1e9:.2f}B params, {cfg.precision}, {cfg.optimizer}, "
            f"global batch {cfg.batch} x seq {cfg.seq}, on {n} devices")


def plot_strategies(cfg: mem.TrainingSetup, n: int = 8, device_gib: float = DEVICE_GIB, ax=None):
    """Stacked bars: GiB per device for each strategy; returns ``(rows, fig)``.

    ``device_gib`` draws a line at one device's memory (80 GiB: a large
    data-centre GPU) so you can see which strategies fit.
    """
    import matplotlib.pyplot as plt

    rows = breakdown_rows(cfg, n)
    if ax is None:
        fig, ax = plt.subplots(figsize=(9, 4.2))
    else:
        fig = ax.figure
    names = [r["strategy"] for r in rows]
    bottom = [0.0] * len(rows)
    for part in mem.PARTS:
        vals = [r[part] for r in rows]
        ax.bar(names, vals, bottom=bottom, label=part, color=COLORS[part])
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, (tot, label) in enumerate(zip(bottom, total_labels(rows))):
        ax.text(i, tot, label, ha="center", va="bottom", fontsize=8)
    ax.axhline(device_gib, color="k", ls="--", lw=1)
    ax.text(len(rows) - 0.5, device_gib, f"{device_gib:g} GiB device", ha="right", va="bottom", fontsize=8)
    ax.set_ylabel(YLABEL)
    ax.set_title(title(cfg, n))
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return rows, fig


def calculator_view(preset: str = "GPT-2 small (12 x 768)", batch: int = 8, seq: int = 1024,
                    precision: str = "mixed", optimizer: str = "adam", n: int = 8, device_gib: float = DEVICE_GIB):
    """What the widget shows for one choice of its controls: ``(rows, fig)``.

    A plain function so it can be tested and called without a display.
    """
    return plot_strategies(setup(preset, batch, seq, precision, optimizer), n=n, device_gib=device_gib)


def setup(preset: str, batch: int, seq: int, precision: str, optimizer: str) -> mem.TrainingSetup:
    """The training set-up the calculator's controls describe (no matplotlib: the web edition calls it)."""
    if preset not in mem.PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {list(mem.PRESETS)}")
    layers, hidden, heads = mem.PRESETS[preset]
    return mem.TrainingSetup(layers=layers, hidden=hidden, heads=heads, seq=seq, batch=batch,
                             precision=precision, optimizer=optimizer)


def calculator():
    """The ipywidgets calculator: change the model, batch, sequence, precision, optimizer, devices."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    controls = dict(
        preset=w.Dropdown(options=list(mem.PRESETS), value="GPT 7B-like (32 x 4096)", description=CONTROLS["preset"]),
        batch=w.SelectionSlider(options=[8, 16, 32, 64, 128, 256], value=32, description=CONTROLS["batch"]),
        seq=w.SelectionSlider(options=[256, 512, 1024, 2048, 4096], value=1024, description=CONTROLS["seq"]),
        precision=w.ToggleButtons(options=list(mem.PRECISIONS), value="mixed", description=CONTROLS["precision"]),
        optimizer=w.ToggleButtons(options=list(mem.OPTIMIZERS), value="adam", description=CONTROLS["optimizer"]),
        n=w.SelectionSlider(options=[2, 4, 8, 16, 32, 64], value=8, description=CONTROLS["n"]),
    )
    out, table = w.Output(), w.Output()
    box = w.VBox([w.HBox([controls["preset"], controls["n"]]), w.HBox([controls["batch"], controls["seq"]]),
                  controls["precision"], controls["optimizer"], out, table])

    def redraw(_=None):
        kw = {k: c.value for k, c in controls.items()}
        box.rows = None  # set first: a failed draw leaves no stale numbers behind
        with out:
            out.clear_output(wait=True)
            rows, fig = calculator_view(**kw)
            display(fig)
            plt.close(fig)  # the Output holds the image; don't keep figures alive
        box.rows = rows  # what is on screen, as data (tests read it; no display needed)
        with table:
            table.clear_output(wait=True)
            from disttutor.launcher.results import format_table
            print(format_table(rows))

    for c in controls.values():
        c.observe(redraw, names="value")
    redraw()
    return box
