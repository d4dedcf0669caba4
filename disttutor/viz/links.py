"""Figures of runs on an emulated link (chapters 2 and 8): every title says which link it was.

Plain functions from the report of :mod:`disttutor.programs.emulated_link` to a matplotlib axes.
"""
from __future__ import annotations

import matplotlib.pyplot as plt


def plot_overlap(o: dict, caption: str, ax=None):
    """Step time with overlap and without, against compute alone, communication alone, max and sum."""
    ax = ax or plt.subplots(figsize=(7.5, 3), layout="constrained")[1]
    c, m = 1e3 * o["compute_s"], 1e3 * o["comm_s"]
    bars = {"compute alone\n(no_sync)": c, "communication\nalone": m,
            "step with overlap\n(link_hook)": 1e3 * o["overlap_s"], "step without overlap\n(deferred_hook)": 1e3 * o["deferred_s"]}
    ax.bar(list(bars), list(bars.values()), color=["C0", "C1", "C2", "C3"])
    ax.axhline(max(c, m), color="k", ls="--", lw=1, label=f"max(compute, communication) = {max(c, m):.0f} ms")
    ax.axhline(c + m, color="k", ls=":", lw=1, label=f"compute + communication = {c + m:.0f} ms")
    ax.set_ylabel("ms per step (median, slowest rank)")
    ax.set_title(f"DDP buckets, measured; {caption}", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    return ax


def backward_ready(t: dict) -> float:
    """When the backward's compute ended in an instrumented step: the last bucket handed over (or, with
    no communication, when ``backward()`` returned)."""
    return max((b["launched"] for b in t["buckets"]), default=t["backward_end"])


def plot_overlap_timeline(o: dict, caption: str, ax=None):
    """One instrumented step with overlap and one without: the rank's compute and the link's transfers, in ms."""
    ax = ax or plt.subplots(figsize=(7.5, 2.8), layout="constrained")[1]
    rows = [("with overlap", o["timeline"]["overlap"]), ("without overlap", o["timeline"]["deferred"])]
    for k, (name, t) in enumerate(rows):
        y = 3 * (len(rows) - 1 - k)
        fwd, bwd = 1e3 * t["forward_end"], 1e3 * backward_ready(t)
        ax.broken_barh([(0, fwd)], (y + 1.1, 0.8), color="C0", label="forward" if k == 0 else None)
        ax.broken_barh([(fwd, bwd - fwd)], (y + 1.1, 0.8), color="C9", label="backward" if k == 0 else None)
        spans = [(1e3 * b["start"], 1e3 * (b["due"] - b["start"])) for b in t["buckets"]]
        ax.broken_barh(spans, (y + 0.3, 0.6), facecolors=["C1", "C3"], edgecolor="w",
                       label="a bucket on the emulated link" if k == 0 else None)
        # The real gloo all-reduce (which gives the data): from hand-over to done, a thin bar below.
        real = [(1e3 * b["launched"], 1e3 * (b["real_done"] - b["launched"])) for b in t["buckets"] if "real_done" in b]
        ax.broken_barh(real, (y + 0.05, 0.15), color="k", alpha=0.5,
                       label="the real loopback all-reduce" if k == 0 else None)
        ax.plot([1e3 * t["step_end"]] * 2, [y, y + 2], color="k", lw=1.5)
        ax.text(1e3 * t["step_end"], y + 1.5, f" step ends\n {1e3 * t['step_end']:.0f} ms", fontsize=8, va="center")
    ax.set_yticks([3 * (len(rows) - 1 - k) + d for k in range(len(rows)) for d in (1.5, 0.5)],
                  [f"{name}: {part}" for name, _ in rows for part in ("rank", "link")], fontsize=8)
    ax.set_xlabel("ms from the step's start (rank 0; the median of 3 instrumented steps)")
    ax.set_title(f"where a step's time goes; {caption}", fontsize=9)
    ax.set_xlim(0, 1.15e3 * max(t["step_end"] for _, t in rows))
    ax.set_ylim(-0.2, 3 * len(rows) + 0.8)
    ax.legend(fontsize=7, loc="upper left", ncol=4, frameon=False)
    return ax


def plot_compression(rows: dict, caption: str, ax=None):
    """Step time per hook, with the bytes each hook put on the link per step."""
    ax = ax or plt.subplots(figsize=(7.5, 3), layout="constrained")[1]
    names = list(rows)
    ax.bar(names, [1e3 * rows[n]["step_s"] for n in names], color="C0")
    for i, n in enumerate(names):
        ax.text(i, 1e3 * rows[n]["step_s"], f"{rows[n]['bytes_per_step'] / 2**20:.3g} MiB/step",
                ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("ms per step (median, slowest rank)")
    ax.set_title(f"compression hooks, measured; {caption}", fontsize=9)
    return ax


def plot_ring_vs_naive(rows: list[dict], caption: str, ax=None):
    """Measured time of the naive and ring all-reduce per rank count, with the link model's time."""
    ax = ax or plt.subplots(figsize=(7.5, 3), layout="constrained")[1]
    x = list(range(len(rows)))
    for k, (algo, color) in enumerate((("naive", "C3"), ("ring", "C2"))):
        pos = [i + (k - 0.5) * 0.38 for i in x]
        ax.bar(pos, [1e3 * r[f"{algo}_s"] for r in rows], width=0.36, color=color, label=f"{algo}, measured")
        ax.scatter(pos, [1e3 * r[f"{algo}_model_s"] for r in rows], marker="_", s=400, color="k", zorder=3,
                   label="the link's model" if k == 0 else None)
    ax.set_xticks(x, [f"{r['world']} ranks, {r['bytes'] / 2**20:g} MiB" for r in rows])
    ax.set_ylabel("ms per all-reduce (median, slowest rank)")
    ax.set_title(f"from-scratch all-reduces, measured; {caption}", fontsize=9)
    ax.legend(fontsize=8)
    return ax
