"""Collectives drawn from what the ranks reported: whose chunk went where, before -> after (chapter 2).

Nothing here is drawn by hand. :func:`provenance` reads each value a rank
holds after a collective and finds where it came from in the tensors the
ranks held before: a *copy* (broadcast, scatter, gather, all-gather,
all-to-all, send) is one element of one rank's input, found by its value
(chapter 2's inputs ``10r + 1, 10r + 2, ...`` are all different); a
*reduction* (reduce, all-reduce, reduce-scatter) is the sum over ranks of
one element position, found by checking the sums. :func:`collective_figure`
colours every cell by the rank it came from (a sum: a stripe of every rank
that contributed) and draws an arrow per moved chunk.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import ConnectionPatch, Rectangle

REDUCTIONS = ("reduce", "all_reduce", "reduce_scatter")
RANK_COLORS = ("#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#fc9272", "#c7c7c7", "#f2b6d2", "#d9d98c")


def provenance(op: str, befores: list[list | None], afters: list[list | None]) -> list[list | None]:
    """Per rank, per element of ``after``: ``("copy", rank, index)``, ``("sum", index)`` or ``None`` (unknown).

    A rank whose ``after`` is ``None`` (unspecified, or it receives nothing) gets ``None``.
    """
    out: list[list | None] = []
    if op in REDUCTIONS:
        known = [b for b in befores if b is not None]
        width = min(len(b) for b in known)
        sums = [sum(b[j] for b in known) for j in range(width)]
        for a in afters:
            out.append(None if a is None else [("sum", sums.index(v)) if v in sums else None for v in a])
        return out
    where = {v: (r, j) for r, b in enumerate(befores) if b is not None for j, v in enumerate(b)}
    for a in afters:
        out.append(None if a is None else [("copy", *where[v]) if v in where else None for v in a])
    return out


def _fmt(v: float) -> str:
    return f"{v:g}"


def _draw_rows(ax, rows: list[list | None], colors: list[list], n_ranks: int, width: int, chunk: int,
               empty: str) -> list[list]:
    """One row of cells per rank; returns the cells' rectangles (for the arrows)."""
    cells: list[list] = []
    for r in range(n_ranks):
        row = rows[r]
        cells.append([])
        ax.text(-0.3, r + 0.5, f"rank {r}", ha="right", va="center", fontsize=9)
        if row is None:
            ax.text(max(width, 4) / 2, r + 0.5, empty, ha="center", va="center", fontsize=8, color="#888888",
                    style="italic")
            continue
        for j, v in enumerate(row):
            fill = colors[r][j]
            if isinstance(fill, tuple):  # a sum: one stripe per contributing rank
                k = len(fill)
                for q, c in enumerate(fill):
                    ax.add_patch(Rectangle((j, r + 0.1 + 0.8 * q / k), 1, 0.8 / k, color=c, linewidth=0))
                rect = Rectangle((j, r + 0.1), 1, 0.8, fill=False, edgecolor="white", linewidth=1)
            else:
                rect = Rectangle((j, r + 0.1), 1, 0.8, facecolor=fill, edgecolor="white", linewidth=1)
            ax.add_patch(rect)
            cells[r].append(rect)
            ax.text(j + 0.5, r + 0.5, _fmt(v), ha="center", va="center", fontsize=8)
        for c in range(0, len(row) + 1, chunk):  # chunk boundaries: what moves together
            ax.plot([c, c], [r + 0.05, r + 0.95], color="#444444", linewidth=1.2)
    ax.set_xlim(-0.1, max(width, 4) + 0.1)  # at least 4 cells wide: room for the notes of empty rows
    ax.set_ylim(n_ranks, 0)
    ax.axis("off")
    return cells


def collective_figure(op: str, befores: list[list | None], afters: list[list | None], chunk: int,
                      code: str = ""):
    """Before (left) and after (right) of one collective, every cell coloured by the rank it came from."""
    n = len(befores)
    prov = provenance(op, befores, afters)
    width = max(len(x) for x in befores + afters if x is not None)
    before_colors = [[RANK_COLORS[r % len(RANK_COLORS)]] * (len(b) if b else 0) for r, b in enumerate(befores)]
    contrib = tuple(RANK_COLORS[r % len(RANK_COLORS)] for r, b in enumerate(befores) if b is not None)
    after_colors = [[("#ffffff" if p is None else contrib if p[0] == "sum" else RANK_COLORS[p[1] % len(RANK_COLORS)])
                     for p in (row or [])] for row in prov]
    fig, (a, b) = plt.subplots(1, 2, figsize=(2.6 + 0.9 * max(width, 4), 0.45 * n + 1.3), constrained_layout=True)
    src = _draw_rows(a, befores, before_colors, n, width, chunk, "(input not used)")
    dst = _draw_rows(b, afters, after_colors, n, width, chunk, "(unspecified / receives nothing)")
    a.set_title("before", fontsize=10)
    b.set_title("after", fontsize=10)
    # One arrow per moved chunk of a copy, from the source chunk to the destination -- when there are
    # few (broadcast, scatter, gather); with n x n moves (all-gather, all-to-all) the colours say it.
    moves = [(r, j, row[j]) for r, row in enumerate(prov) if row is not None and op not in REDUCTIONS
             for j in range(0, len(row), chunk) if row[j] is not None and row[j][1:] != (r, j)]
    for r, j, p in (moves if len(moves) <= n else []):
        s_cell, d_cell = src[p[1]][p[2]], dst[r][j]
        fig.add_artist(ConnectionPatch(
            xyA=(s_cell.get_x() + chunk, s_cell.get_y() + 0.4), coordsA=a.transData,
            xyB=(d_cell.get_x(), d_cell.get_y() + 0.4), coordsB=b.transData,
            arrowstyle="-|>", color="#555555", alpha=0.7, linewidth=1.0))
    fig.suptitle(code or op, fontsize=10, family="monospace")
    if op in REDUCTIONS:  # a figure-level label: constrained layout makes room for it
        fig.supxlabel("striped: the sum of that element over every rank (one stripe per rank)", fontsize=8,
                      color="#555555")
    return fig


def describe_moves(op: str, befores: list[list | None], afters: list[list | None], chunk: int) -> list[str]:
    """The picture in words, one line per rank: where each chunk of its ``after`` came from."""
    lines = []
    for r, row in enumerate(provenance(op, befores, afters)):
        if row is None:
            lines.append(f"rank {r}: -")
            continue
        parts = []
        for j in range(0, len(row), chunk):
            p = row[j]
            if p is None:
                parts.append("?")
            elif p[0] == "sum":
                parts.append(f"sum of chunk {p[1] // chunk}")
            else:
                parts.append(f"rank {p[1]}'s chunk {p[2] // chunk}")
        lines.append(f"rank {r}: " + ", ".join(parts))
    return lines
