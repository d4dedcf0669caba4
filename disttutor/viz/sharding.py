"""Chapter 11's pictures: measured per-rank memory of each sharding strategy, and who holds what on a 2D mesh.

Plain functions of the ranks' reported data returning matplotlib figures (no widgets).
"""
from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np

PARTS = ("params", "grads", "optimizer")
COLORS = {"params": "#4C72B0", "grads": "#DD8452", "optimizer": "#55A868"}
LABELS = {"ddp": "DDP", "zero1": "ZeRO-1\nscratch", "fsdp_scratch": "FSDP\nscratch",
          "fsdp_scratch_bf16": "FSDP scratch\nbf16", "fsdp2": "FSDP2"}


def worst_rank(results: list[dict[str, Any]], strategy: str) -> dict[str, int]:
    """The largest per-rank total (the rank that runs out of memory first) and its parts."""
    rows = [r["strategies"][strategy]["measured"] for r in results]
    return max(rows, key=lambda m: sum(m[p] for p in PARTS))


def memory_rows(by_world: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (world size, strategy): the worst rank's measured bytes and the calculator's."""
    out = []
    for n, results in by_world.items():
        for s in results[0]["strategies"]:
            m, p = worst_rank(results, s), results[0]["strategies"][s]["predicted"]
            out.append({"ranks": n, "strategy": s, **{f"{k}": m[k] for k in PARTS},
                        **{f"{k}_pred": int(p[k]) for k in PARTS}})
    return out


def memory_figure(by_world: dict[int, list[dict[str, Any]]]):
    """Stacked bars (measured, worst rank) with the calculator's prediction as a black tick per bar."""
    fig, axes = plt.subplots(1, len(by_world), figsize=(5.5 * len(by_world), 3.6), sharey=True, squeeze=False)
    for ax, (n, results) in zip(axes[0], by_world.items()):
        names = list(results[0]["strategies"])
        xs = np.arange(len(names))
        bottom = np.zeros(len(names))
        for part in PARTS:
            vals = np.array([worst_rank(results, s)[part] / 1024 for s in names])
            ax.bar(xs, vals, bottom=bottom, color=COLORS[part], label=part)
            bottom += vals
        pred = [sum(results[0]["strategies"][s]["predicted"][p] for p in PARTS) / 1024 for s in names]
        ax.scatter(xs, pred, marker="_", s=600, color="black", zorder=3, label="calculator (chapter 1)")
        ax.set_xticks(xs, [LABELS.get(s, s) for s in names], fontsize=8)
        ax.set_title(f"{n} ranks: memory of the fullest rank")
        ax.set_ylabel("KiB")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def mesh_figure(results: list[dict[str, Any]]):
    """Left: the 2x2 mesh (dp, tp). Right: each element of mlp[0].weight coloured by the rank storing it."""
    shape = results[0]["mesh_2d"]["weight_shape"]
    owner = np.full(shape[0] * shape[1], -1)
    for rank, r in enumerate(results):  # results[r] is rank r's report
        owner[r["mesh_2d"]["held"]] = rank
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.8), gridspec_kw={"width_ratios": [1, 1.3]})
    cmap = plt.get_cmap("tab10")
    for rank, r in enumerate(results):
        dp, tp = r["mesh_2d"]["coordinate"]
        a.add_patch(plt.Rectangle((tp, 1 - dp), 0.9, 0.9, color=cmap(rank), alpha=0.8))
        a.text(tp + 0.45, 1 - dp + 0.45, f"rank {rank}\ndp={dp}, tp={tp}", ha="center", va="center")
    a.set_xlim(-0.1, 2)
    a.set_ylim(-0.1, 2)
    a.set_axis_off()
    a.set_title("device mesh (dp=2, tp=2)\nTP within a row, FSDP down a column")
    b.imshow(owner.reshape(shape), cmap=cmap, vmin=0, vmax=9, aspect="auto", interpolation="nearest")
    b.set_title(f"mlp[0].weight {shape[0]}x{shape[1]}: colour = rank storing it")
    b.set_xlabel("input feature")
    b.set_ylabel("output feature (row)")
    fig.tight_layout()
    return fig


OP_COLORS = {"all_gather": "#4C72B0", "reduce_scatter": "#C44E52"}


def _unit_name(unit: str) -> str:
    return "root" if unit in (None, "root") else f"block {unit.split('.')[-1]}"


def fsdp_timeline_figure(results: list[dict[str, Any]], conditions=("prefetch off", "prefetch on")):
    """Per rank and condition: each unit's compute (grey, labelled "fwd"/"bwd" and its block) above the
    collectives as the backend ran them (all-gather blue "AG", reduce-scatter red "RS", labelled with
    their unit). Labels stand upright beside their bars, which are too short to hold them.
    Data: :func:`disttutor.sharding.comm_trace.collectives` of one profiled step per rank."""
    rows = [(c, r) for c in conditions for r in range(len(results))]
    fig, axes = plt.subplots(len(rows), 1, figsize=(11, 2.3 * len(rows) + 0.8), sharex=True, squeeze=False)
    for ax, (cond, rank) in zip(axes[:, 0], rows):
        tr = results[rank]["comm"][cond]
        for phase, shade in (("forward", "#f2f2f2"), ("backward", "#e4ecf7"), ("optimizer", "#f7efe4")):
            for s, d in tr["regions"].get(phase, []):
                ax.axvspan(s, s + d, color=shade, zorder=0)
                ax.text(s + 0.2, -1.95, phase, fontsize=8, va="bottom", color="#555555")
        for c in tr["compute"]:
            ax.broken_barh([(c["start"], max(c["ms"], 0.05))], (1.1, 0.8), color="#8c8c8c")
            ax.text(c["start"] + c["ms"] / 2, 1.95, f"{c['phase'][:3].replace('bac', 'bwd').replace('for', 'fwd')} "
                    f"{_unit_name(c['unit'])}", fontsize=7.5, va="bottom", ha="center", rotation=90)
        for c in tr["calls"]:
            if c["moved"] is None:
                continue
            ax.broken_barh([(c["moved"], max(c["ms"], 0.05))], (0.1, 0.8), color=OP_COLORS[c["op"]])
            ax.text(c["moved"] + c["ms"] / 2, 0.05, f"{'AG' if c['op'] == 'all_gather' else 'RS'} "
                    f"{_unit_name(c['unit'])}", fontsize=7.5, va="top", ha="center", rotation=90)
        ax.set_yticks([0.5, 1.5], ["collectives", "compute"], fontsize=8)
        ax.set_ylim(-2.0, 3.4)
        ax.set_ylabel(f"{cond}\nrank {rank}", rotation=0, ha="right", va="center", fontsize=9)
    axes[-1, 0].set_xlabel("ms from the step's start (one profiled step)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=v) for v in OP_COLORS.values()] + [
        plt.Rectangle((0, 0), 1, 1, color="#8c8c8c")]
    fig.legend(handles, ["AG = all-gather", "RS = reduce-scatter", "unit compute (fwd, bwd)"], loc="upper right",
               ncol=3, fontsize=8)
    fig.suptitle("FSDP2: one step's collectives per unit, as the backend ran them (measured)", fontsize=10, x=0.02, ha="left")
    fig.tight_layout()
    return fig
