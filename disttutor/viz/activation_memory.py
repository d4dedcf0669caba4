"""Activation memory of a pipeline schedule, in bytes: GPipe against 1F1B (chapter 7).

A forward of one micro-batch through a stage leaves ``a`` bytes that autograd saves for the backward
(every Linear's input, the stage's output); its backward frees them. So the bytes a rank holds rise
with each forward and fall with each backward, and the schedule's *order* sets the peak: GPipe runs all
m forwards first (m·a on every rank), 1F1B starts backwards after p − r forwards (at most (p − r)·a).

:func:`schematic` draws that idealised curve over a simulated step (:func:`disttutor.pipeline.schedules.simulate`)
from the run's own p, m and sizes; :func:`peaks_figure` puts a run's measured peaks beside the
derived ones. Computing functions need no matplotlib (imported inside the drawing functions).
"""
from __future__ import annotations

from disttutor.pipeline.schedules import PipeSpec, simulate

KIB = 1024
SCHEDULES = ("gpipe", "1f1b")
NAMES = {"gpipe": "GPipe", "1f1b": "1F1B"}


def stage_activation_bytes(rows: int, width: int, layers_per_stage: int, dtype_bytes: int = 4) -> int:
    """Bytes one micro-batch leaves on a stage of ``layers_per_stage`` x (Linear(width, width), ReLU):
    each Linear's input (``layers_per_stage`` tensors) and the last ReLU's output, ``rows x width`` each.
    (A ReLU's output is also the next Linear's input: one tensor, counted once.)"""
    return (layers_per_stage + 1) * rows * width * dtype_bytes


def derived_peaks(schedule: str, p: int, m: int, a: int, target: int = 0) -> list[int]:
    """Peak bytes held per rank: GPipe m micro-batches, 1F1B min(m, p - r); the last rank also keeps
    each held micro-batch's loss target (``target`` bytes)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    held = [m if schedule == "gpipe" else min(m, p - r) for r in range(p)]
    return [k * (a + (target if r == p - 1 else 0)) for r, k in enumerate(held)]


def held_over_time(spec: PipeSpec, a: int, target: int = 0) -> list[tuple[list[float], list[float]]]:
    """Per rank, ``(times, bytes)`` of the idealised curve: a forward slot adds its micro-batch's bytes
    as it runs, a backward slot frees them as it runs (time in forward slots, from the simulation)."""
    slots = simulate(spec).slots
    out = []
    for r in range(spec.p):
        per_mb = a + (target if r == spec.p - 1 else 0)
        ts, bs, held = [0.0], [0.0], 0.0
        for s in sorted((s for s in slots if s.rank == r), key=lambda s: s.start):
            ts += [s.start, s.end]
            bs += [held, held + (per_mb if s.kind == "F" else -per_mb)]
            held = bs[-1]
        out.append((ts, bs))
    return out


def schematic(p: int, m: int, a: int, target: int = 0):
    """Two panels, GPipe and 1F1B on ``p`` ranks and ``m`` micro-batches: the bytes each rank holds
    over one step, with each rank's derived peak marked."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True, constrained_layout=True)
    colors = plt.get_cmap("viridis")([r / max(1, p - 1) * 0.85 for r in range(p)])
    for ax, schedule in zip(axes, SCHEDULES):
        spec = PipeSpec(schedule, p, m)
        for r, (ts, bs) in enumerate(held_over_time(spec, a, target)):
            ax.plot(ts, [b / KIB for b in bs], color=colors[r], lw=1.6, label=f"rank {r}")
        peaks = derived_peaks(schedule, p, m, a, target)
        rule = "m·a" if schedule == "gpipe" else "(p − r)·a"
        ax.set_title(f"{NAMES[schedule]}: p = {p}, m = {m}; peak {rule}\n"
                     f"rank 0 peaks at {peaks[0] / KIB:g} KiB", fontsize=10)
        ax.set_xlabel("time in forward slots (a backward = 2 slots)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"activation KiB held (a = {a / KIB:g} KiB\na micro-batch on a stage)")
    axes[1].legend(fontsize=8, frameon=False, loc="upper right")
    return fig


def peaks_figure(measured: dict[str, list[int]], derived: dict[str, list[int]]):
    """Measured peak bytes per rank (bars) for each schedule, the derived peak as a black tick."""
    import matplotlib.pyplot as plt

    p = len(next(iter(measured.values())))
    fig, ax = plt.subplots(figsize=(7, 3.4), constrained_layout=True)
    width = 0.8 / len(measured)
    for k, (schedule, peaks) in enumerate(measured.items()):
        xs = [r + (k - (len(measured) - 1) / 2) * width for r in range(p)]
        ax.bar(xs, [b / KIB for b in peaks], width * 0.95, label=f"{NAMES[schedule]} measured",
               color=("#9ecae1", "#3182bd")[k % 2])
        ax.scatter(xs, [b / KIB for b in derived[schedule]], marker="_", s=400, color="black", zorder=3,
                   label="derived" if k == 0 else None)
    ax.set_xticks(range(p), [f"rank {r}" for r in range(p)])
    ax.set_ylabel("peak activation KiB held")
    ax.set_title("bytes autograd saved for backward, at their peak, per rank", fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    return fig
