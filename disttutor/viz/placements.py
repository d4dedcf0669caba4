"""DTensor placements as pictures, from what the ranks report they hold (chapter 12).

The ranks distribute tensors whose elements are their own global indices and report
``to_local()`` (:mod:`disttutor.tensor_parallel.placements`); here each element of the logical
tensor is drawn coloured by the rank(s) that store it, labelled with those ranks. Plain functions
from data to matplotlib figures, no torch.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["holders", "draw_holders", "one_dim_figure", "two_dim_figure"]


def holders(held: Sequence[Sequence[int]], n: int) -> list[tuple[int, ...]]:
    """For each of ``n`` elements, the ranks that store it (``held[r]``: rank r's global indices)."""
    out: list[list[int]] = [[] for _ in range(n)]
    for r, items in enumerate(held):
        for i in items:
            out[i].append(r)
    return [tuple(h) for h in out]


def draw_holders(ax, who: list[tuple[int, ...]], shape: tuple[int, int], title: str, world: int) -> None:
    """One panel: cell colour = the rank storing it (grey = several ranks), text = which ranks ("all")."""
    cmap = plt.get_cmap("tab10")
    rows, cols = shape
    img = np.ones((rows, cols, 3))
    for i, h in enumerate(who):
        img[i // cols, i % cols] = cmap(h[0])[:3] if len(h) == 1 else (0.8, 0.8, 0.8)
    ax.imshow(img, interpolation="nearest")
    small = 6 if cols > 4 else 9
    for i, h in enumerate(who):
        label = "all" if len(h) == world else ",".join(map(str, h))
        ax.text(i % cols, i // cols, label, ha="center", va="center", fontsize=small)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)


def one_dim_figure(results: list[dict[str, Any]]):
    """A 1-D mesh of n ranks: Shard(0), Shard(1), Replicate() -- who stores what -- and Partial()'s addends."""
    one = [r["placements"]["one_dim"] for r in results]
    names = [k for k in one[0] if k != "Partial()"]
    n = len(results)
    fig, axes = plt.subplots(2, max(len(names), n + 1), figsize=(2.2 * max(len(names), n + 1), 4.8))
    for ax, name in zip(axes[0], names):
        draw_holders(ax, holders([o[name]["held"] for o in one], 16), (4, 4), f"{name}: who stores each element", n)
    for ax in axes[0][len(names):]:
        ax.set_axis_off()
    for r, ax in enumerate(axes[1][:n]):  # Partial: every rank a full-shaped addend
        vals = np.array(one[r]["Partial()"]["local"]).reshape(4, 4)
        ax.imshow(np.full((4, 4, 3), plt.get_cmap("tab10")(r)[:3]) * 0.5 + 0.5)
        for i in range(16):
            ax.text(i % 4, i // 4, f"{vals.flat[i]:g}", ha="center", va="center", fontsize=9)
        ax.set_xticks([]), ax.set_yticks([])
        ax.set_title(f"Partial(): rank {r}'s addend" if r == 0 else f"+ rank {r}", fontsize=9)
    total = np.array(one[0]["Partial()"]["sum"]).reshape(4, 4)
    ax = axes[1][n]
    ax.imshow(np.ones((4, 4, 3)))
    for i in range(16):
        ax.text(i % 4, i // 4, f"{total.flat[i]:g}", ha="center", va="center", fontsize=9)
    ax.set_xticks([]), ax.set_yticks([])
    ax.set_title("= full_tensor() (an all-reduce)", fontsize=9)
    for ax in axes[1][n + 1:]:
        ax.set_axis_off()
    fig.suptitle(f"a 4x4 tensor on a 1-D mesh of {n} ranks (elements numbered 0..15 row by row)", fontsize=10)
    fig.tight_layout()
    return fig


def two_dim_figure(results: list[dict[str, Any]]):
    """A (dp=2, tp=2) mesh: placements composed per mesh dimension, and FSDP2-over-TP's _StridedShard."""
    two = [r["placements"]["two_dim"] for r in results]
    coords = [tuple(r["placements"]["coordinate"]) for r in results]
    names = list(two[0])
    fig, axes = plt.subplots(1, len(names) + 1, figsize=(2.9 * (len(names) + 1), 3.4))
    cmap = plt.get_cmap("tab10")
    mesh = axes[0]
    for rank, (dp, tp) in enumerate(coords):
        mesh.add_patch(plt.Rectangle((tp, 1 - dp), 0.9, 0.9, color=cmap(rank), alpha=0.8))
        mesh.text(tp + 0.45, 1 - dp + 0.45, f"rank {rank}\ndp={dp}\ntp={tp}", ha="center", va="center", fontsize=8)
    mesh.set_xlim(-0.1, 2), mesh.set_ylim(-0.1, 2), mesh.set_axis_off()
    mesh.set_title("mesh (dp, tp)", fontsize=9)
    for ax, name in zip(axes[1:], names):
        title = name if name != "FSDP2 over TP" else "FSDP2 over TP:\n" + two[0][name]["placements"][1:-1].replace("), ", "),\n")
        draw_holders(ax, holders([t[name]["held"] for t in two], 64), (8, 8), title, len(results))
    fig.suptitle("an 8x8 tensor on a 2x2 mesh: placements are listed per mesh dimension (dp, tp)", fontsize=10)
    fig.tight_layout()
    return fig
