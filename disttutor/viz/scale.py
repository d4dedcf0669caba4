"""Chapter 13's figures and the planner widget.

Introduced in chapter 13. Plain functions from data to a matplotlib figure (the notebook's static
figures and the tests use them); :func:`planner_widget` only wires ipywidgets to
:func:`planner_view`. The maths lives in :mod:`disttutor.scale`.
"""
from __future__ import annotations

from disttutor.scale import costmodel, failures, hardware, planner, shapes

PARTS = {"compute": "#4C72B0", "bubble": "#BBBBBB", "tp": "#DD8452", "cp": "#8172B2", "pp": "#937860",
         "dp": "#C44E52"}
# The planner's controls: keyword of :func:`planner_view` -> the label a learner reads (the web
# edition's live widget finds its controls in a notebook's saved widget state by these labels).
CONTROLS = {"model": "model", "n_gpus": "GPUs", "hw": "hardware", "seq": "sequence", "global_batch": "global batch"}
STEP_XLABEL = "seconds per step (derived)"
NO_FIT = "no layout fits in memory: more GPUs, a shorter sequence or a smaller batch"
OP_COLORS = {"all_reduce": "#4C72B0", "all_gather": "#55A868", "reduce_scatter": "#C44E52", "send_recv": "#8172B2"}


def plot_fit(rows: list[dict], links: dict, n: int):
    """Measured median times (points) and the fitted ``alpha + factor * S / B`` (lines), log-log."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4))
    for op, link in links.items():
        pts = sorted((r["bytes"], r["time_s"]) for r in rows if r["op"] == op)
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] * 1e3 for p in pts], "o", color=OP_COLORS[op], label=f"{op} (measured)")
        grid = [xs[0] * (xs[-1] / xs[0]) ** (i / 40) for i in range(41)]
        ax.plot(grid, [costmodel.collective_time(op, s, n, link) * 1e3 for s in grid], "-", color=OP_COLORS[op],
                alpha=0.6)
    ax.set(xscale="log", yscale="log", xlabel="bytes S per call", ylabel="ms (median, slowest rank)",
           title=f"alpha + factor(n) * S / B fitted per collective, {n} gloo ranks (lines)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def step_split(preds: list[planner.Prediction]) -> list[tuple[str, str, list[float]]]:
    """The bars' parts, in drawing order: ``(label, colour, seconds per layout)``; parts all zero left out."""
    out = []
    for part, color in PARTS.items():
        vals = [p.compute_s if part == "compute" else p.bubble_s if part == "bubble" else p.comm_s[part]
                for p in preds]
        if any(vals):
            out.append((part if part in ("compute", "bubble") else f"{part.upper()} comm (exposed)", color, vals))
    return out


def bar_note(p: planner.Prediction) -> str:
    return f"  {p.tokens_per_s_per_gpu:,.0f} tok/s/GPU, MFU {p.mfu:.0%}"


def plot_step_split(preds: list[planner.Prediction], title: str = ""):
    """Horizontal stacked bars: each layout's step split into compute, bubble, exposed TP/CP/PP/DP."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 0.45 * len(preds) + 1.4))
    names = [p.layout.name() for p in preds]
    left = [0.0] * len(preds)
    for label, color, vals in step_split(preds):
        ax.barh(names, vals, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, vals)]
    for i, p in enumerate(preds):
        ax.text(left[i], i, bar_note(p), va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel=STEP_XLABEL, title=title, xlim=(0, max(left) * 1.45))
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def planner_view(model: str = "Llama 3 70B", n_gpus: int = 512, hw: str = "H100", seq: int = 8192,
                 global_batch: int = 512, efficiency: float = 1.0, top: int = 6):
    """What the widget shows for one choice of its controls: ``(rows, fig)``."""
    ranked, rows, title = planner_rows(model, n_gpus, hw, seq, global_batch, efficiency, top)
    fig = plot_step_split(ranked, title) if ranked else None
    return rows, fig


def planner_rows(model: str = "Llama 3 70B", n_gpus: int = 512, hw: str = "H100", seq: int = 8192,
                 global_batch: int = 512, efficiency: float = 1.0, top: int = 6):
    """The widget's numbers without a figure (the web edition calls it): ``(predictions, rows, title)``."""
    if model not in shapes.SHAPES:
        raise ValueError(f"unknown model {model!r}; choose one of {list(shapes.SHAPES)}")
    if hw not in hardware.PRESETS:
        raise ValueError(f"unknown hardware {hw!r}; choose one of {list(hardware.PRESETS)}")
    ranked = planner.rank_layouts(shapes.SHAPES[model], n_gpus, hardware.PRESETS[hw], seq, global_batch,
                                  efficiency, top=top)
    rows = [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in p.row().items()} for p in ranked]
    title = f"{model} on {n_gpus} x {hw}, seq {seq}, global batch {global_batch} (efficiency {efficiency:.2f})"
    return ranked, rows, title


def planner_widget(efficiency: float = 1.0):
    """The ipywidgets planner: model, GPUs, hardware, sequence, global batch."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from disttutor.launcher.results import format_table

    controls = dict(
        model=w.Dropdown(options=list(shapes.SHAPES), value="Llama 3 70B", description=CONTROLS["model"]),
        n_gpus=w.SelectionSlider(options=[8, 64, 128, 256, 512, 1024, 2048, 8192], value=512,
                                 description=CONTROLS["n_gpus"]),
        hw=w.ToggleButtons(options=list(hardware.PRESETS), value="H100", description=CONTROLS["hw"]),
        seq=w.SelectionSlider(options=[2048, 4096, 8192, 32768, 131072], value=8192, description=CONTROLS["seq"]),
        global_batch=w.SelectionSlider(options=[64, 128, 256, 512, 1024, 2048], value=512,
                                       description=CONTROLS["global_batch"]),
    )
    out = w.Output()
    box = w.VBox([w.HBox([controls["model"], controls["hw"]]), w.HBox([controls["n_gpus"], controls["seq"]]),
                  controls["global_batch"], out])

    def redraw(_=None):
        box.rows = None
        with out:
            out.clear_output(wait=True)
            rows, fig = planner_view(**{k: c.value for k, c in controls.items()}, efficiency=efficiency)
            if fig is None:
                print(NO_FIT)
            else:
                display(fig)
                plt.close(fig)
                print(format_table(rows))
        box.rows = rows

    for c in controls.values():
        c.observe(redraw, names="value")
    redraw()
    return box


def plot_checkpoint_interval(checkpoint_s: float, mtbf_s: float, restart_s: float = 0.0, label: str = ""):
    """Useful fraction of wall time against the checkpoint interval; Young-Daly's optimum marked."""
    import matplotlib.pyplot as plt

    tau = failures.young_daly(checkpoint_s, mtbf_s)
    xs = [tau * 10 ** (-1.5 + 3 * i / 120) for i in range(121)]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot([x / 60 for x in xs], [failures.efficiency(x, checkpoint_s, mtbf_s, restart_s) for x in xs])
    eff = failures.efficiency(tau, checkpoint_s, mtbf_s, restart_s)
    ax.axvline(tau / 60, ls="--", color="gray")
    ax.annotate(f"τ = √(2δM) = {tau / 60:.0f} min: {eff:.1%} useful", (tau / 60, eff), xytext=(8, -28),
                textcoords="offset points", fontsize=9)
    ax.set(xscale="log", xlabel="minutes between checkpoints", ylabel="useful fraction (derived)",
           title=label or f"δ = {checkpoint_s:.0f} s, job MTBF = {mtbf_s / 3600:.1f} h", ylim=(0, 1))
    fig.tight_layout()
    return fig
