"""The launch topology of a multi-node job, drawn from its parameters, not from a run (chapter 5).

Introduced in chapter 5. One torchrun agent per node joins the rendezvous, learns its node's
``GROUP_RANK`` and starts ``nproc_per_node`` processes; torchrun numbers them node by node,
``RANK = GROUP_RANK * nproc_per_node + LOCAL_RANK``. Under the boxes, the hops of a ring all-reduce in
``RANK`` order: one per node crosses the network (the slowest link), the rest stay inside a node.

:func:`process_layout` and :func:`ring_hops` compute; :func:`draw_launch_topology` draws them
(chapter 5's measured picture, :func:`disttutor.viz.cluster.draw_layout`, draws what the ranks
reported). Kernel side; no torch.
"""
from __future__ import annotations

CROSS, INSIDE = "#c0392b", "#7f8c8d"   # hop colours: between nodes, inside a node
BOX_W, BOX_H, GAP, NODE_GAP = 2.0, 1.5, 0.3, 1.0


def _check(nnodes: int, nproc_per_node: int) -> None:
    for name, v in (("nnodes", nnodes), ("nproc_per_node", nproc_per_node)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")


def process_layout(nnodes: int, nproc_per_node: int) -> list[dict[str, int]]:
    """Each process's identity as torchrun sets it, in RANK order (node by node)."""
    _check(nnodes, nproc_per_node)
    world = nnodes * nproc_per_node
    return [{"RANK": g * nproc_per_node + lr, "LOCAL_RANK": lr, "GROUP_RANK": g, "WORLD_SIZE": world,
             "LOCAL_WORLD_SIZE": nproc_per_node} for g in range(nnodes) for lr in range(nproc_per_node)]


def ring_hops(nnodes: int, nproc_per_node: int) -> list[tuple[int, int, bool]]:
    """(from RANK, to RANK, crosses between nodes) for a ring in RANK order: ``nnodes`` hops cross (if > 1)."""
    rows = process_layout(nnodes, nproc_per_node)
    n = len(rows)
    if n < 2:
        return []
    return [(r["RANK"], rows[(i + 1) % n]["RANK"], r["GROUP_RANK"] != rows[(i + 1) % n]["GROUP_RANK"])
            for i, r in enumerate(rows)]


def _x(g: int, lr: int, p: int) -> float:
    """Left edge of process (node g, local rank lr)."""
    return g * (p * (BOX_W + GAP) + GAP + NODE_GAP) + GAP + lr * (BOX_W + GAP)


def draw_launch_topology(nnodes: int, nproc_per_node: int, rendezvous: str = "c10d", ax=None):
    """Nodes (one torchrun agent each), the rendezvous they meet at, every process's identity, and the
    ring's hops in RANK order. Draws on ``ax`` if given, else a new figure; returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    rows = process_layout(nnodes, nproc_per_node)
    p, world = nproc_per_node, len(rows)
    node_w = p * (BOX_W + GAP) + GAP
    total_w = nnodes * node_w + (nnodes - 1) * NODE_GAP
    if ax is None:
        _, ax = plt.subplots(figsize=(max(7.5, 1.05 * total_w), 5.2))
    fig = ax.figure

    def box(x, y, w, h, fc, ec, **kw):
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.1", fc=fc, ec=ec, **kw))

    rdzv_w, rdzv_y = min(total_w, 6.0), 4.7
    rdzv_x = (total_w - rdzv_w) / 2
    box(rdzv_x, rdzv_y, rdzv_w, 0.75, "#fdf2e3", "#d68910", lw=1.5)
    ax.text(total_w / 2, rdzv_y + 0.375, f"{rendezvous} rendezvous: the agents meet at one host:port\n"
            f"and number their nodes GROUP_RANK 0..{nnodes - 1}", ha="center", va="center", fontsize=9)
    for g in range(nnodes):
        x0 = g * (node_w + NODE_GAP)
        box(x0, 0.45, node_w, 3.75, "#eef3fb", "#4a6fa5", lw=1.5)
        ax.text(x0 + 0.15, 4.05, f"node {g}", fontsize=9, va="top", weight="bold")
        box(x0 + GAP, 2.75, node_w - 2 * GAP, 0.75, "#ffffff", "#4a6fa5")
        ax.text(x0 + node_w / 2, 3.125, f"torchrun agent, GROUP_RANK {g}\nstarts {p} process{'es' if p != 1 else ''}",
                ha="center", va="center", fontsize=8.5)
        ax.add_patch(FancyArrowPatch((x0 + node_w / 2, 3.5), (total_w / 2, rdzv_y), arrowstyle="<->",
                                     mutation_scale=10, color="#d68910", lw=1.2, ls="--"))
    for r in rows:
        x = _x(r["GROUP_RANK"], r["LOCAL_RANK"], p)
        box(x, 0.85, BOX_W, BOX_H, "#ffffff", "#333333")
        ax.text(x + BOX_W / 2, 0.85 + BOX_H / 2,
                f"RANK {r['RANK']}\nLOCAL_RANK {r['LOCAL_RANK']}\nGROUP_RANK {r['GROUP_RANK']}\n"
                f"WORLD_SIZE {r['WORLD_SIZE']}", ha="center", va="center", fontsize=8.5, gid=f"rank-{r['RANK']}")
        ax.add_patch(FancyArrowPatch((x + BOX_W / 2, 2.75), (x + BOX_W / 2, 0.85 + BOX_H), arrowstyle="->",
                                     mutation_scale=8, color="#4a6fa5", lw=0.8))
    by_rank = {r["RANK"]: r for r in rows}
    for a, b, cross in ring_hops(nnodes, nproc_per_node):
        ra, rb = by_rank[a], by_rank[b]
        xa, xb = _x(ra["GROUP_RANK"], ra["LOCAL_RANK"], p), _x(rb["GROUP_RANK"], rb["LOCAL_RANK"], p)
        if b > a:                                   # to the right, between neighbouring boxes
            start, end, rad = (xa + BOX_W, 1.2), (xb, 1.2), 0.0
        else:                                       # the wrap-around, under every box
            start, end = (xa + BOX_W / 2, 0.85), (xb + BOX_W / 2, 0.85)
            rad = -1.3 / (start[0] - end[0])        # a sag of 0.65 under the boxes, whatever the width
        ax.add_patch(FancyArrowPatch(start, end, connectionstyle=f"arc3,rad={rad}", arrowstyle="-|>",
                                     mutation_scale=12, color=CROSS if cross else INSIDE,
                                     lw=2.4 if cross else 1.2, gid="hop-cross" if cross else "hop-inside"))
    ax.text(total_w / 2, 0.05 if world > 1 else 0.35,
            "ring all-reduce in RANK order: grey hops stay inside a node, red hops cross the network "
            "(the slowest link)", ha="center", va="top", fontsize=8.5, color="#333333")
    ax.set_xlim(-0.2, total_w + 0.2)
    ax.set_ylim(-0.35 if world > 1 else 0.0, rdzv_y + 0.95)
    ax.axis("off")
    ax.set_title(f"{nnodes} nodes × {p} processes: WORLD_SIZE {world}; "
                 f"RANK = GROUP_RANK × {p} + LOCAL_RANK", fontsize=10)
    return fig
