"""Naive model parallelism against micro-batches: an idealised timeline (chapter 6's schematic).

Introduced in chapter 6. ``p`` equal stages; the whole batch's forward takes ``fwd_s`` and its
backward ``bwd_s`` on every stage; sends take no time. With ``m`` micro-batches (GPipe: every
forward, then every backward) each piece takes ``1/m`` of that, the last stage starts ``p - 1``
pieces late, and a step lasts ``(m + p - 1)(fwd_s + bwd_s) / m``: each stage is busy
``m / (m + p - 1)`` of it (``1/p`` for ``m = 1``, plain model parallelism). The bytes that cross
the stage boundaries per step (activations forward, their gradients back) do not depend on ``m``.

A plain function from the run's numbers to a matplotlib figure (no noise, nothing measured here):
the chapter passes its run's stages, batch, width and mean stage times.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

COLORS = {"fwd": "tab:blue", "bwd": "tab:orange", "idle": "0.9"}


def schedule(stages: int, micro_batches: int, fwd_s: float, bwd_s: float) -> list[list[tuple[str, int, float, float]]]:
    """Per stage, the idealised spans ``(kind, micro_batch, start_s, end_s)`` of one step (fill, then drain).

    Forward of micro-batch ``j`` on stage ``i`` starts at ``(i + j) f``; the backwards start once the last
    stage has done every forward, ``(m + p - 1) f``, and run up the stages: stage ``i``'s backward of ``j``
    starts ``(p - 1 - i + j) b`` later (``f = fwd_s / m``, ``b = bwd_s / m``).
    """
    if stages < 1 or micro_batches < 1:
        raise ValueError(f"stages and micro_batches must be >= 1, got {stages} and {micro_batches}")
    if fwd_s <= 0 or bwd_s <= 0:
        raise ValueError(f"fwd_s and bwd_s must be > 0 seconds, got {fwd_s} and {bwd_s}")
    p, m = stages, micro_batches
    f, b = fwd_s / m, bwd_s / m
    drain = (m + p - 1) * f
    out = []
    for i in range(p):
        spans = [("fwd", j, (i + j) * f, (i + j + 1) * f) for j in range(m)]
        spans += [("bwd", j, drain + (p - 1 - i + j) * b, drain + (p - i + j) * b) for j in range(m)]
        out.append(spans)
    return out


def step_s(stages: int, micro_batches: int, fwd_s: float, bwd_s: float) -> float:
    """One step's length: ``(m + p - 1)(fwd_s + bwd_s) / m``."""
    return (micro_batches + stages - 1) * (fwd_s + bwd_s) / micro_batches


def utilisation(stages: int, micro_batches: int) -> float:
    """The share of a step each stage computes: ``m / (m + p - 1)`` (``1/p`` without micro-batches)."""
    return micro_batches / (micro_batches + stages - 1)


def boundary_bytes(stages: int, batch: int, width: int, bytes_per_element: int = 4) -> int:
    """Bytes crossing all stage boundaries in one step: ``2 (p - 1) * batch * width * bytes`` (activation
    forward and its gradient back, at each of the ``p - 1`` boundaries; the same for any ``m``)."""
    return 2 * (stages - 1) * batch * width * bytes_per_element


def stage_times(results: Sequence[Mapping]) -> tuple[float, float]:
    """The run's mean forward and backward seconds per stage and step (``model_parallel``'s reports)."""
    fwd = [sum(e - s for k, s, e in r["timeline"] if k == "fwd") / r["timed_steps"] for r in results]
    bwd = [sum(e - s for k, s, e in r["timeline"] if k == "bwd") / r["timed_steps"] for r in results]
    return sum(fwd) / len(fwd), sum(bwd) / len(bwd)


def _draw(ax, stages: int, m: int, fwd_s: float, bwd_s: float) -> None:
    total, span = step_s(stages, m, fwd_s, bwd_s), step_s(stages, 1, fwd_s, bwd_s)  # span: the axis' width
    for i, spans in enumerate(schedule(stages, m, fwd_s, bwd_s)):
        ax.broken_barh([(0.0, 1e3 * total)], (i - 0.4, 0.8), color=COLORS["idle"])  # the step; blank = idle
        for kind, j, s, e in spans:
            ax.broken_barh([(1e3 * s, 1e3 * (e - s))], (i - 0.4, 0.8), color=COLORS[kind], edgecolor="white")
            name = ("forward" if kind == "fwd" else "backward") if m == 1 else f"{kind} {j + 1}"
            if (e - s) / span > 0.035:  # a label only where it fits
                ax.text(1e3 * (s + e) / 2, i, name, ha="center", va="center", fontsize=8 if m == 1 else 7,
                        color="white")
    ax.set_yticks(range(stages), [f"stage {i} (rank {i})" for i in range(stages)])
    ax.set_ylim(stages - 0.5, -0.5)
    u = utilisation(stages, m)
    if m == 1:
        what = f"no micro-batches (the run): each stage busy 1/p = 1/{stages} = {u:.0%} of the {total * 1e3:.1f} ms step"
    else:
        what = (f"{m} micro-batches: each stage busy m/(m+p-1) = {m}/{m + stages - 1} = {u:.0%} "
                f"of the {total * 1e3:.1f} ms step")
    ax.set_title(what, fontsize=10)


def plot_microbatch_schematic(stages: int, micro_batches: int, batch: int, width: int, fwd_s: float, bwd_s: float,
                              bytes_per_element: int = 4):
    """Two idealised timelines of one training step on ``stages`` equal stages: the whole batch at once
    (plain model parallelism, top) and cut into ``micro_batches`` pieces (bottom), on one time axis (ms).

    ``fwd_s``/``bwd_s``: one stage's forward/backward of the whole batch (the run's means); ``batch`` and
    ``width`` size the activation that crosses each boundary (``bytes_per_element``: 4 for float32).
    Returns the figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if micro_batches < 2:
        raise ValueError(f"micro_batches must be >= 2 to compare with plain model parallelism, got {micro_batches}")
    fig, axes = plt.subplots(2, 1, figsize=(10, 1.5 + 1.1 * stages), sharex=True)
    for ax, m in zip(axes, (1, micro_batches)):
        _draw(ax, stages, m, fwd_s, bwd_s)
    axes[-1].set_xlabel("time within one training step (ms); idealised: equal stages, sends take no time")
    axes[0].set_xlim(0, 1.08e3 * step_s(stages, 1, fwd_s, bwd_s))
    nbytes = boundary_bytes(stages, batch, width, bytes_per_element)
    fig.suptitle(f"{stages} stages, batch {batch} x width {width}: {nbytes:,} bytes cross the boundaries per step, "
                 "with or without micro-batches", fontsize=10)
    fig.legend(handles=[Patch(color=COLORS[k], label=n) for k, n in
                        (("fwd", "forward"), ("bwd", "backward"), ("idle", "idle (waiting)"))],
               loc="lower center", ncol=3, frameon=False, fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig
