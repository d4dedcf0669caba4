"""Chapter 12's idealised picture of a tensor-parallel block: Megatron's column and row split, f and g.

Introduced in chapter 12. One feed-forward block ``Linear(d, h) -> GELU -> Linear(h, d)`` on ``t``
ranks, drawn rank by rank, every tensor a rectangle to scale (rows: tokens ``s*b``, columns: features),
with the bytes it holds. Plain tensor parallelism (TP): the input is whole on every rank, ``f``
(identity forward, all-reduce backward) enters the parallel region, the column-parallel weight gives
each rank ``h/t`` hidden units, the row-parallel weight a partial sum, ``g`` (all-reduce forward,
identity backward) adds the partial sums. Sequence parallelism (SP): each rank keeps ``s/t`` of the
tokens outside the region, so ``f`` becomes an all-gather and ``g`` a reduce-scatter. Each collective
is labelled with the bytes one rank sends in a ring. Kernel side; matplotlib only inside the drawing.
"""
from __future__ import annotations

RANK_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")
WHOLE = "#bbbbbb"


def ring_bytes(op: str, nbytes: float, t: int) -> float:
    """Bytes one rank sends in a ring collective over ``t`` ranks of an ``nbytes`` tensor (its full size)."""
    return (2 if op == "all-reduce" else 1) * (t - 1) / t * nbytes


def stages(seq: int, batch: int, dim: int, hidden: int, t: int, sequence_parallel: bool) -> list[dict]:
    """The block's tensors left to right on one rank: ``{name, rows, cols, kind}`` (kind: 'whole' on every
    rank, 'shard' this rank's own part, 'partial' an addend of a sum) and the collectives between them
    (``{op, forward, backward, rows, cols}``: the tensor it acts on, full size)."""
    n = seq * batch
    own = n // t if sequence_parallel else n
    enter = ("all-gather", "reduce-scatter") if sequence_parallel else ("identity", "all-reduce")
    leave = ("reduce-scatter", "all-gather") if sequence_parallel else ("all-reduce", "identity")
    return [
        {"name": "input:\nmy tokens" if sequence_parallel else "input x", "rows": own, "cols": dim,
         "kind": "shard" if sequence_parallel else "whole", "my_tokens": sequence_parallel},
        {"op": "f", "forward": enter[0], "backward": enter[1], "rows": n, "cols": dim},
        {"name": "x:\nall tokens", "rows": n, "cols": dim, "kind": "whole"},
        {"name": "column\nweight:\nrows of\n[h, d]", "rows": hidden // t, "cols": dim, "kind": "shard"},
        {"name": "GELU\noutput", "rows": n, "cols": hidden // t, "kind": "shard"},
        {"name": "row\nweight:\ncolumns\nof [d, h]", "rows": dim, "cols": hidden // t, "kind": "shard"},
        {"name": "partial\nsum", "rows": n, "cols": dim, "kind": "partial"},
        {"op": "g", "forward": leave[0], "backward": leave[1], "rows": n, "cols": dim},
        {"name": "output\n(+ bias)", "rows": own, "cols": dim, "kind": "shard" if sequence_parallel else "whole",
         "my_tokens": sequence_parallel},
    ]


def block_bytes_sent(seq: int, batch: int, dim: int, t: int, bytes_per: int = 4) -> float:
    """Ring bytes one rank sends per block and training step (forward + backward): 2 x 2(t-1)/t x sbd x e,
    the same for TP (two all-reduces) and SP (two all-gathers, two reduce-scatters)."""
    return 2 * ring_bytes("all-reduce", seq * batch * dim * bytes_per, t)


def tp_block_figure(seq: int, batch: int, dim: int, hidden: int, t: int, sequence_parallel: bool = False,
                    bytes_per: int = 4):
    """Rank by rank, the block's tensors to scale and the two collectives, with bytes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    st = stages(seq, batch, dim, hidden, t, sequence_parallel)
    n = seq * batch
    unit = 1.0 / max(n, dim, hidden // t)              # one element's size in the picture
    gap, row_h = 0.45, 1.0 + 1.0                        # between columns; one rank's row (tensor + labels)
    fig, ax = plt.subplots(figsize=(12, 1.9 * t + 1.2))
    x = 0.0
    for s in st:
        if "op" in s:
            w = 1.0
            top = t * row_h - 0.35
            ax.add_patch(Rectangle((x, -0.9), w, top + 0.9, facecolor="#fff4d6", edgecolor="#b08a2e"))
            sent = {op: ring_bytes(op, s["rows"] * s["cols"] * bytes_per, t) for op in (s["forward"], s["backward"])}
            desc = "\n\n".join(f"{d}:\n{op}" + (f"\n{sent[op]:,.0f} B\nsent a rank" if op != "identity" else "")
                                 for d, op in (("forward", s["forward"]), ("backward", s["backward"])))
            ax.text(x + w / 2, top - 0.05, s["op"], ha="center", va="top", fontsize=13, weight="bold")
            ax.text(x + w / 2, top / 2 - 0.4, desc, ha="center", va="center", fontsize=7.5)
            x += w + gap
            continue
        w = s["cols"] * unit
        for r in range(t):
            y0 = (t - 1 - r) * row_h
            h = s["rows"] * unit
            color = WHOLE if s["kind"] == "whole" else RANK_COLORS[r % len(RANK_COLORS)]
            top = y0 + 1 - (r * h if s.get("my_tokens") else 0)     # SP: rank r's tokens sit at r * s*b/t
            ax.add_patch(Rectangle((x, top - h), w, h, facecolor=color, edgecolor="black", linewidth=0.6,
                                   hatch="//" if s["kind"] == "partial" else None, alpha=0.9))
            ax.text(x + w / 2, y0 - 0.05, f"[{s['rows']} × {s['cols']}]\n{s['rows'] * s['cols'] * bytes_per:,} B",
                    ha="center", va="top", fontsize=7.5)
        ax.text(x + w / 2, t * row_h - 0.35, s["name"], ha="center", va="bottom", fontsize=7.5)
        x += max(w, 0.75) + gap
    for r in range(t):
        ax.text(-0.15, (t - 1 - r) * row_h + 0.5, f"rank {r}", ha="right", va="center", fontsize=9)
    ax.set_xlim(-0.9, x)
    ax.set_ylim(-1.0, t * row_h + 0.3)
    ax.set_aspect("equal")
    ax.set_axis_off()
    what = "sequence parallelism (SP)" if sequence_parallel else "tensor parallelism (TP)"
    ax.set_title(f"One feed-forward block, {what} on {t} ranks: s·b = {n} tokens, d = {dim}, h = {hidden}, "
                 f"{bytes_per}-byte numbers\ngrey: whole on every rank; colour: this rank's part; "
                 f"hatched: a partial sum", fontsize=9)
    fig.tight_layout()
    return fig
