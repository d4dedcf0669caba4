"""Ownership pictures: which rank holds or processes which item (chapter 1).

Chapter 1 runs one small MLP four ways (data, tensor, layer, pipeline
parallelism) and every rank reports what it holds; :func:`ownership_picture`
draws those reports as a ranks x items grid. A plain function returning a
matplotlib figure, no torch: tests call it with hand-made lists.
"""
from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np


def ownership_grid(held: Sequence[Sequence[int]], n_items: int) -> np.ndarray:
    """``len(held) x n_items`` array: ``r`` where rank ``r`` holds that item, NaN elsewhere."""
    grid = np.full((len(held), n_items), np.nan)
    for r, items in enumerate(held):
        grid[r, list(items)] = r
    return grid


def ownership_picture(mode: str, held: Sequence[Sequence[int]], n_items: int, what: str, title: str, ax=None):
    """Ranks x items: a coloured cell where rank ``r`` holds/processes item ``i`` (``i in held[r]``).

    ``mode`` and ``title`` make the axes title (``"mode: title"``), ``what`` the x label.
    Draws on ``ax`` if given, else on a new figure; returns the figure.
    """
    if ax is None:
        fig, ax = plt.subplots(figsize=(9, 1.6))
        own = True
    else:
        fig, own = ax.figure, False
    world = len(held)
    ax.imshow(ownership_grid(held, n_items), cmap="tab10", vmin=0, vmax=9, aspect="auto")
    ax.set_yticks(range(world), [f"rank {r}" for r in range(world)])
    ax.set_xlabel(what)
    ax.set_title(f"{mode}: {title}", fontsize=10)
    if own:
        fig.tight_layout()
    return fig
