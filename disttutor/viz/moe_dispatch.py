"""Chapter 12's picture of expert parallelism's two all-to-alls: dispatch (tokens to their experts) and combine.

Introduced in chapter 12. ``E`` experts over ``n`` ranks, ``E/n`` each (rank ``j`` owns experts
``j*E/n`` to ``(j+1)*E/n - 1``). Each rank routes each of its tokens to ``top_k`` experts; the
dispatch all-to-all sends rank ``i``'s token rows chosen for rank ``j``'s experts from ``i`` to
``j``, and the combine sends the experts' outputs back the same way, transposed. The picture draws
both as matrices of rows and bytes, from the routing counts of the chapter's run (rows to oneself
stay local: they cross no link). Kernel side; matplotlib only inside the drawing function.
"""
from __future__ import annotations


def dispatch_rows(tokens_per_expert: list[list[int]]) -> list[list[int]]:
    """``rows[i][j]``: token rows rank ``i`` sends to rank ``j`` in the dispatch (per rank, its tokens'
    choices per expert; experts split evenly and in order over the ranks)."""
    n, n_exp = len(tokens_per_expert), len(tokens_per_expert[0])
    per = n_exp // n
    return [[sum(row[j * per:(j + 1) * per]) for j in range(n)] for row in tokens_per_expert]


def moe_dispatch_figure(tokens_per_expert: list[list[int]], dim: int, bytes_per: int = 4):
    """Two matrices, dispatch (from rank i to rank j) and combine (its transpose), in rows and bytes."""
    import matplotlib.pyplot as plt

    rows = dispatch_rows(tokens_per_expert)
    n = len(rows)
    per = len(tokens_per_expert[0]) // n
    fig, axes = plt.subplots(1, 2, figsize=(10, 2.2 + 0.9 * n))
    for ax, (title, m) in zip(axes, (("dispatch: my tokens to their experts", rows),
                                     ("combine: the experts' outputs back", [list(c) for c in zip(*rows)]))):
        ax.imshow(m, cmap="Blues", vmin=0, vmax=2 * max(max(r) for r in rows))
        for i in range(n):
            for j in range(n):
                where = "stays local" if i == j else "sent"
                ax.text(j, i, f"{m[i][j]} rows\n{m[i][j] * dim * bytes_per:,} B\n{where}", ha="center",
                        va="center", fontsize=8)
        ax.set_xticks(range(n), [f"to rank {j}" for j in range(n)], fontsize=8)
        ax.set_yticks(range(n), [f"from rank {i}" for i in range(n)], fontsize=8)
        ax.set_title(title, fontsize=9)
    for j, ax in enumerate(axes):
        ax.set_xlabel("experts " + ", ".join(f"{r * per}-{(r + 1) * per - 1} on rank {r}" for r in range(n))
                      if j == 0 else "back to the rank whose tokens they are", fontsize=8)
    sent = [sum(r) - r[i] for i, r in enumerate(rows)]
    off = ", ".join(f"{s * dim * bytes_per:,} B from rank {i}" for i, s in enumerate(sent))
    fig.suptitle(f"Expert parallelism, {n} ranks, token rows of {dim} × {bytes_per} B: the dispatch sends {off}; "
                 f"the combine sends the same rows back", fontsize=9)
    fig.tight_layout()
    return fig
