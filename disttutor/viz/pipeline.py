"""Pipeline Gantt charts: the schedule on paper, a real run's measured slots, and a widget (chapter 7).

Static first: :func:`theory_figure` and :func:`measured_figure` are plain
functions returning a matplotlib figure (headless runs and tests use them);
:func:`bubble_widget` only wraps :func:`theory_figure` in controls.
"""
from __future__ import annotations

from disttutor.pipeline.schedules import (SCHEDULES, ZB_SCHEDULES, PipeSpec, Slot, bubble_stats, formula, formula_text,
                                          simulate)

# Forward light, backward dark; for interleaved, the rank's second chunk in another hue.
_COLORS = {("F", 0): "#9ecae1", ("B", 0): "#3182bd", ("F", 1): "#fdd0a2", ("B", 1): "#e6550d",
           ("F", 2): "#c7e9c0", ("B", 2): "#31a354", ("F", 3): "#dadaeb", ("B", 3): "#756bb1"}
# Zero bubble: the input-gradient I in the chunk's backward colour, the weight-gradient W in a grey-green
# that reads as "work that could wait" (it is what fills the bubble).
_COLORS.update({("I", c): _COLORS[("B", c)] for c in range(4)})
_COLORS.update({("W", 0): "#74c476", ("W", 1): "#a1d99b", ("W", 2): "#238b45", ("W", 3): "#bcbddc"})
NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved 1F1B",
         "interleaved_zb": "interleaved zero bubble", "zbv": "zero bubble V"}
IDLE = "#eeeeee"  # idle time: the bubble
# The widget's controls: field of :class:`PipeSpec` -> the label a learner reads (the web edition's live
# widget finds its controls in a notebook's saved widget state by these labels). Matplotlib is imported
# inside the drawing functions: :func:`describe`, :func:`widget_spec`, :func:`title` and
# :func:`slot_color` run without it (in the web edition's browser too).
CONTROLS = {"schedule": "schedule", "p": "stages p", "m": "micro-batches m", "v": "stages/rank v"}


def slot_color(s: Slot, p: int) -> str:
    """A slot's colour: its kind, and for interleaved schedules the rank's chunk it belongs to."""
    return _COLORS[(s.kind, (s.stage // p) % 4)]


def draw_gantt(ax, slots: list[Slot], p: int, title: str = "", unit: str = "time", label_mb: bool = True) -> dict:
    """Draw ``slots`` as one row per rank (rank 0 on top), idle time shaded; returns :func:`bubble_stats`."""
    stats = bubble_stats(slots, p)
    t0 = min(s.start for s in slots)
    span = stats["makespan"]
    for r in range(p):
        # Idle first, as the row's background: whatever the slots do not cover is bubble.
        ax.barh(r, span, left=0, height=0.8, color=IDLE, hatch="///", edgecolor="#cccccc", linewidth=0)
    for s in slots:
        ax.barh(s.rank, s.end - s.start, left=s.start - t0, height=0.8,
                color=slot_color(s, p), edgecolor="white", linewidth=0.6)
        if label_mb and (s.end - s.start) > span / 60:
            ax.text(s.start - t0 + (s.end - s.start) / 2, s.rank, str(s.mb), ha="center", va="center",
                    fontsize=7, color="white" if s.kind in ("B", "I") else "black")
    ax.set_yticks(range(p), [f"rank {r}" for r in range(p)])
    ax.set_ylim(p - 0.5, -0.5)
    ax.set_xlim(0, span)
    ax.set_xlabel(unit)
    ax.set_title(title, fontsize=10)
    return stats


def legend_entries(v: int, split: bool = False) -> list[tuple[str, str]]:
    """The legend's ``(label, colour)`` pairs: forward, backward (or I and W) per chunk, then idle."""
    out = []
    for c in range(v):
        suffix = f" (chunk {c})" if v > 1 else ""
        out += [("forward" + suffix, _COLORS[("F", c % 4)]),
                (("input-grad I" if split else "backward") + suffix, _COLORS[("B", c % 4)])]
        if split:
            out.append(("weight-grad W" + suffix, _COLORS[("W", c % 4)]))
    return out + [("idle (bubble)", IDLE)]


def _legend(ax, v: int, split: bool = False) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=c, hatch="///", edgecolor="#cccccc", label=lb) if c == IDLE else
               Patch(color=c, label=lb) for lb, c in legend_entries(v, split)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def describe(spec: PipeSpec) -> dict:
    """What the widget shows, as data: bubble from the drawing, the formula, peak in-flight activations."""
    tl = simulate(spec)
    if spec.schedule in ZB_SCHEDULES:  # no closed form: the drawing is the answer
        return {"bubble_drawn": tl.bubble_fraction, "bubble_formula": None, "formula": "none (read the drawing)",
                "peak_in_flight": tl.peak_in_flight, "makespan": tl.makespan, "drawn": tl}
    return {"bubble_drawn": tl.bubble_fraction, "bubble_formula": formula(spec), "formula": formula_text(spec),
            "peak_in_flight": tl.peak_in_flight, "makespan": tl.makespan, "drawn": tl}


PEAK_FMT = "%g"  # the peak in-flight bars' labels
GANTT_UNIT = "time (one forward of a whole rank's layers = 1)"


def title(spec: PipeSpec, info: dict) -> str:
    """The simulated schedule's title: name, p, m, the bubble on the drawing and the formula."""
    name = NAMES[spec.schedule] + (f", v={spec.v}" if spec.v > 1 else "")
    return (f"{name}: p={spec.p}, m={spec.m}\nbubble measured on the drawing {info['bubble_drawn']:.3f}"
            f"  |  formula {info['formula']}")


def widget_spec(schedule: str, p: int, m: int, v: int) -> PipeSpec:
    """The spec the widget's controls describe (v counts only for interleaved); ValueError if none."""
    return PipeSpec(schedule, p, m, v if schedule == "interleaved" else 1)


def theory_figure(spec: PipeSpec, info: dict | None = None):
    """Gantt chart of ``spec`` plus a bar chart of peak in-flight activations per rank."""
    import matplotlib.pyplot as plt

    info = info or describe(spec)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 0.55 * spec.p + 1.8), width_ratios=[4, 1],
                                  constrained_layout=True)
    draw_gantt(ax, info["drawn"].slots, spec.p, title=title(spec, info), unit=GANTT_UNIT)
    _legend(ax, spec.v, split=spec.schedule in ZB_SCHEDULES)
    bars = ax2.barh(range(spec.p), info["peak_in_flight"], color="#636363")
    ax2.bar_label(bars, fmt=PEAK_FMT, fontsize=8, padding=2)
    ax2.set_yticks(range(spec.p), [f"rank {r}" for r in range(spec.p)])
    ax2.set_ylim(spec.p - 0.5, -0.5)
    ax2.set_xlim(0, max(spec.m, max(info["peak_in_flight"])) * 1.25)
    ax2.set_xlabel("micro-batches")
    ax2.set_title("peak activations held", fontsize=10)
    return fig


def measured_figure(spec: PipeSpec, measured: list[Slot], note: str = ""):
    """The schedule on paper (left) beside a real run's measured slots (right), both with their bubble."""
    import matplotlib.pyplot as plt

    info = describe(spec)
    stats = bubble_stats(measured, spec.p)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 0.55 * spec.p + 1.8), constrained_layout=True)
    draw_gantt(a, info["drawn"].slots, spec.p, unit="time (forward = 1)",
               title=f"theory ({spec.schedule}, p={spec.p}, m={spec.m}): bubble {info['bubble_drawn']:.3f}")
    ms = [Slot(s.rank, s.kind, s.mb, s.stage, s.start * 1e3, s.end * 1e3) for s in measured]
    draw_gantt(b, ms, spec.p, unit="milliseconds since the step began",
               title=f"measured{(' ' + note) if note else ''}: bubble {stats['bubble']:.3f}")
    _legend(b, spec.v, split=spec.schedule in ZB_SCHEDULES)
    return fig


def bubble_widget(spec: PipeSpec | None = None):
    """Controls for schedule, p, m, v -> :func:`theory_figure`. Call from a notebook cell."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    spec = spec or PipeSpec()
    sched = w.Dropdown(options=SCHEDULES, value=spec.schedule, description=CONTROLS["schedule"])
    p = w.IntSlider(value=spec.p, min=1, max=8, description=CONTROLS["p"])
    m = w.IntSlider(value=spec.m, min=1, max=32, description=CONTROLS["m"])
    v = w.IntSlider(value=spec.v, min=1, max=4, description=CONTROLS["v"])
    out = w.Output()

    def redraw(*_):
        out.clear_output(wait=True)
        with out:
            try:
                s = widget_spec(sched.value, p.value, m.value, v.value)
            except ValueError as e:  # e.g. interleaved with m not a multiple of p: say so, draw nothing
                print(f"not drawable: {e}")
                return
            fig = theory_figure(s)
            display(fig)
            plt.close(fig)  # displayed as an image; keep no live figure per slider move

    for c in (sched, p, m, v):
        c.observe(redraw, names="value")
    redraw()
    ui = w.VBox([w.HBox([sched, v]), w.HBox([p, m]), out])
    display(ui)
    return ui


def model_figure(rows: list[dict], note: str = ""):
    """Measured bubble vs the formula vs theory + measured overhead, against m, one panel per schedule.

    ``rows``: :func:`disttutor.pipeline.bubble_model.explain` results (one per schedule and m).
    """
    import matplotlib.pyplot as plt

    schedules = list(dict.fromkeys(r["schedule"] for r in rows))
    fig, axes = plt.subplots(1, len(schedules), figsize=(5.5 * len(schedules), 3.6), sharey=True,
                             constrained_layout=True, squeeze=False)
    name = NAMES
    for ax, sched in zip(axes[0], schedules):
        mine = sorted((r for r in rows if r["schedule"] == sched), key=lambda r: r["m"])
        ms = [r["m"] for r in mine]
        ax.plot(ms, [r["theory"] for r in mine], "o--", color="#999999", label="formula (p-1)/(m+p-1)")
        ax.plot(ms, [r["slot_times_only"] for r in mine], "s:", color="#6baed6", label="+ measured slot times")
        ax.plot(ms, [r["model"] for r in mine], "D-", color="#3182bd", label="+ measured gaps (model)")
        ax.plot(ms, [r["measured"] for r in mine], "*", color="#e6550d", markersize=13, label="measured")
        for r in mine:
            ax.annotate(f"{100 * r['rel_error']:+.0f}%", (r["m"], r["model"]), textcoords="offset points",
                        xytext=(6, -12), fontsize=8, color="#3182bd")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ms, [str(m) for m in ms])
        ax.set_xlabel("micro-batches m")
        ax.set_ylim(0, 1)
        ax.set_title(f"{name.get(sched, sched)}, p={mine[0]['p']}{(' ' + note) if note else ''}", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("bubble (idle fraction)")
    axes[0][-1].legend(fontsize=8, loc="upper right")
    return fig


def schedules_figure(rows: list[tuple[PipeSpec, list[Slot]]], note: str = ""):
    """One row per schedule: the simulated schedule (left) beside the same schedule measured (right).

    ``rows``: ``(spec, measured slots)``; every measured panel shares one time axis, so a shorter bar
    row is a faster step.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(rows), 2, figsize=(13, (0.5 * rows[0][0].p + 1.1) * len(rows)),
                             constrained_layout=True, squeeze=False)
    t_max = max(max(s.end for s in ms) - min(s.start for s in ms) for _, ms in rows) * 1e3
    for (spec, measured), (a, b) in zip(rows, axes):
        info = describe(spec)
        name = NAMES[spec.schedule] + (f", v={spec.v}" if spec.v > 1 else "")
        draw_gantt(a, info["drawn"].slots, spec.p, unit="", label_mb=True,
                   title=f"simulated {name}: bubble {info['bubble_drawn']:.3f}")
        ms = [Slot(s.rank, s.kind, s.mb, s.stage, s.start * 1e3, s.end * 1e3) for s in measured]
        st = draw_gantt(b, ms, spec.p, unit="", label_mb=False,
                        title=f"measured{(' ' + note) if note else ''}: bubble {bubble_stats(measured, spec.p)['bubble']:.3f}")
        b.set_xlim(0, t_max)
        b.barh(range(spec.p), [t_max - st["makespan"]] * spec.p, left=st["makespan"], height=0.8, color="white")
        _legend(b, spec.v, split=spec.schedule in ZB_SCHEDULES)
    axes[-1][0].set_xlabel("time (one forward of a whole rank's layers = 1)")
    axes[-1][1].set_xlabel("milliseconds since the step began")
    return fig


def balance_figure(runs: list[tuple[str, list[Slot], int]], note: str = ""):
    """Measured timelines of differently split pipelines on one time axis, with each rank's idle share."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 2, figsize=(12, 1.6 * len(runs) + 0.6), width_ratios=[4, 1],
                             constrained_layout=True, squeeze=False)
    t_max = max(max(s.end for s in sl) - min(s.start for s in sl) for _, sl, _ in runs) * 1e3
    for (label, slots, p), (a, b) in zip(runs, axes):
        ms = [Slot(s.rank, s.kind, s.mb, s.stage, s.start * 1e3, s.end * 1e3) for s in slots]
        st = draw_gantt(a, ms, p, unit="milliseconds since the step began", label_mb=False,
                        title=f"{label}{(' ' + note) if note else ''}: step {st_ms(slots):.0f} ms, "
                              f"bubble {bubble_stats(slots, p)['bubble']:.3f}")
        a.set_xlim(0, t_max)
        bars = b.barh(range(p), st["per_rank"], color="#bdbdbd")
        b.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
        b.set_yticks(range(p), [f"rank {r}" for r in range(p)])
        b.set_ylim(p - 0.5, -0.5)
        b.set_xlim(0, 1.2)
        b.set_title("idle share per rank", fontsize=10)
    _legend(axes[0][0], 1)
    return fig


def st_ms(slots: list[Slot]) -> float:
    """A measured run's window (first slot's start to last slot's end) in milliseconds."""
    return (max(s.end for s in slots) - min(s.start for s in slots)) * 1e3
