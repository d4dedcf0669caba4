"""The layout of a multi-node job: nodes, processes and their ranks (chapter 5).

:func:`draw_layout` draws the environment variables that each rank of a
``disttutor.programs.whoami`` launch reported (``RANK``, ``LOCAL_RANK``,
``GROUP_RANK``, ``LOCAL_WORLD_SIZE``). A plain function returning a
matplotlib figure, no torch.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt


def draw_layout(envs: Sequence[Mapping[str, str]], ax=None):
    """Boxes for nodes (GROUP_RANK) holding boxes for processes (RANK / LOCAL_RANK).

    ``envs`` is one mapping of environment variables per rank (values as strings, as torchrun
    sets them). Draws on ``ax`` if given, else on a new figure; returns the figure.
    """
    nodes = sorted({int(e["GROUP_RANK"]) for e in envs})
    lws = int(envs[0]["LOCAL_WORLD_SIZE"])
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.5, 2.8))
    fig = ax.figure
    for g in nodes:
        x0 = g * (lws * 1.6 + 0.8)
        ax.add_patch(plt.Rectangle((x0, 0), lws * 1.6 + 0.2, 2.2, fill=True, fc="#eef3fb", ec="#4a6fa5", lw=1.5))
        ax.text(x0 + 0.1, 2.1, f"node GROUP_RANK={g}\n(one torchrun agent)", fontsize=9, va="top")
        for e in (e for e in envs if int(e["GROUP_RANK"]) == g):
            lr = int(e["LOCAL_RANK"])
            ax.add_patch(plt.Rectangle((x0 + 0.2 + lr * 1.6, 0.25), 1.4, 1.2, fc="#fff", ec="#333"))
            ax.text(x0 + 0.9 + lr * 1.6, 0.85, f"RANK {e['RANK']}\nLOCAL_RANK {lr}\n(device {lr})",
                    ha="center", va="center", fontsize=9)
    ax.annotate("", xy=(lws * 1.6 + 0.95, 1.0), xytext=(lws * 1.6 + 0.05, 1.0),
                arrowprops=dict(arrowstyle="<->", color="#c0392b", lw=2))
    ax.text(lws * 1.6 + 0.5, 1.15, "all-reduce\nacross nodes", ha="center", fontsize=8, color="#c0392b")
    ax.set_xlim(-0.1, len(nodes) * (lws * 1.6 + 0.8))
    ax.set_ylim(-0.1, 2.3)
    ax.axis("off")
    ax.set_title(f"WORLD_SIZE={len(envs)}: {len(nodes)} nodes x LOCAL_WORLD_SIZE={lws}", fontsize=10)
    return fig
