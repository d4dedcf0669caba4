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
