"""One data-parallel step drawn: split the batch, forward and backward locally, all-reduce, same update.

Introduced in chapter 3 (data parallelism by hand). An idealised picture, no measurement, drawn from
the configuration of the chapter's ``dp_traffic`` run (its batch and its ``d_in -> hidden -> classes``
MLP) so the samples and bytes it prints are the run's. With ``n`` ranks and ``S`` bytes of fp32
gradients, every rank sends ``2 (n-1)/n S`` in the ring all-reduce (reduce-scatter, then all-gather).
Kernel side; no torch.
"""
from __future__ import annotations

from typing import Any

SHARD_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")
ELEM = 4  # fp32 gradients, as in the run


def step_numbers(cfg: Any, n: int) -> dict[str, Any]:
    """The numbers the picture prints: shards, gradient bytes ``S`` and ring bytes per rank.

    ``cfg`` has ``batch``, ``d_in``, ``hidden`` and ``classes`` (the run's ``TrafficConfig``)."""
    if n < 1 or cfg.batch % n:
        raise ValueError(f"batch {cfg.batch} must split into {n} equal shards")
    params = cfg.d_in * cfg.hidden + cfg.hidden + cfg.hidden * cfg.classes + cfg.classes  # two Linear layers
    b = cfg.batch // n
    return {"n": n, "shard": b, "shards": [(r * b, (r + 1) * b - 1) for r in range(n)], "params": params,
            "S": params * ELEM, "ring_sent": 2 * (n - 1) / n * params * ELEM}


def _box(ax, x, y, w, h, text, color, alpha=0.25):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02", fc=color, ec=color, alpha=alpha))
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02", fc="none", ec=color, lw=1.2))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=8.5)


def _arrow(ax, x0, x1, y):
    ax.annotate("", (x1, y), (x0, y), arrowprops={"arrowstyle": "->", "color": "0.3", "lw": 1.2})


def dp_step_schematic(cfg: Any, n: int):
    """Rows are ranks. Left to right: the batch cut into ``n`` equal shards, each rank's forward and
    backward on its shard (the mean gradient over its samples), one ring all-reduce across all rows
    (sum, then divide by ``n``), and the same update on every rank. Returns the figure."""
    import matplotlib.pyplot as plt

    k = step_numbers(cfg, n)
    fig, ax = plt.subplots(figsize=(11, 0.8 * n + 1.5))
    ax.set(xlim=(-0.1, 10.7), ylim=(-0.2, n + 0.9))
    ax.axis("off")
    cols = [(0.0, 1.9, "1. split the batch"), (2.4, 2.6, "2. forward + backward"),
            (5.5, 2.5, "3. all-reduce the gradients"), (8.5, 2.1, "4. update")]
    for x, w, head in cols:
        ax.text(x + w / 2, n + 0.55, head, ha="center", va="center", fontsize=9.5, weight="bold")
    for r in range(n):
        y = n - 1 - r + 0.12  # rank 0 on top
        lo, hi = k["shards"][r]
        color = SHARD_COLORS[r % len(SHARD_COLORS)]
        _box(ax, 0.0, y, 1.9, 0.76, f"rank {r}: samples\n{lo}–{hi}", color)
        _box(ax, 2.4, y, 2.6, 0.76, f"loss = mean over {k['shard']} samples\ngradient: {k['S']:,} bytes", color)
        _box(ax, 8.5, y, 2.1, 0.76, "w ← w − lr × mean gradient\n(the same w on every rank)", "0.45", alpha=0.12)
        _arrow(ax, 1.95, 2.35, y + 0.38)
        _arrow(ax, 5.05, 5.45, y + 0.38)
        _arrow(ax, 8.05, 8.45, y + 0.38)
    _box(ax, 5.5, 0.12, 2.5, n - 0.24,
         f"sum the {n} gradients,\nthen divide by {n}\n\neach rank sends\n2(n−1)/n × S\n≈ {k['ring_sent']:,.0f} bytes\n"
         "and receives as much", "#64B5CD", alpha=0.2)
    ax.set_title(f"One data-parallel step on {n} ranks: a global batch of {cfg.batch} samples, "
                 f"a {cfg.d_in}-{cfg.hidden}-{cfg.classes} MLP ({k['params']:,} parameters)", fontsize=10)
    fig.tight_layout()
    return fig
