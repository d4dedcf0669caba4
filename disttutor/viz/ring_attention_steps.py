"""Chapter 12's idealised picture of ring attention: which rank computes which block of scores, at which step.

Introduced in chapter 12. The sequence of ``seq`` tokens is cut into ``n`` contiguous blocks, one per
rank; rank ``r`` holds the queries of block ``r``. At step ``i`` it holds the keys and values of block
``(r - i) mod n`` (they travel one hop round the ring per step), so the score block (queries ``r``,
keys ``j``) is computed at step ``(r - j) mod n``. With a causal mask, keys after the queries are
never needed: blocks above the diagonal are skipped, though their keys and values still travel. The
picture is the attention matrix in tokens, each block labelled with its step; the bytes of one send
(``2 * batch * (seq/n) * dim`` numbers: keys and values) are in the title. Kernel side.
"""
from __future__ import annotations


def block_step(q_block: int, k_block: int, n: int) -> int:
    """The ring step at which the rank holding queries ``q_block`` holds keys ``k_block``."""
    return (q_block - k_block) % n


def plan(n: int, causal: bool = True) -> list[dict]:
    """Every (query block, key block): its step and what is done: 'full', 'diagonal' (masked inside), 'skipped'."""
    out = []
    for q in range(n):
        for k in range(n):
            what = "full" if not causal or k < q else ("diagonal" if k == q else "skipped")
            out.append({"q": q, "k": k, "step": block_step(q, k, n), "what": what})
    return out


def send_bytes(seq: int, batch: int, dim: int, n: int, bytes_per: int = 4) -> int:
    """Bytes of one ring send: the keys and values of one block."""
    return 2 * batch * (seq // n) * dim * bytes_per


def ring_attention_figure(seq: int, batch: int, dim: int, n: int, causal: bool = True, bytes_per: int = 4):
    """The seq x seq attention matrix in n x n blocks: colour = the ring step that computes it, hatched = skipped."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Polygon, Rectangle

    size = seq // n
    cmap = plt.get_cmap("viridis", max(n, 2))
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    for b in plan(n, causal):
        x0, y0 = b["k"] * size, b["q"] * size
        if b["what"] == "skipped":
            ax.add_patch(Rectangle((x0, y0), size, size, facecolor="white", edgecolor="#999999", hatch="//"))
            label = f"step {b['step']}:\nskipped\n(future keys)"
        else:
            color = cmap(b["step"] / max(n - 1, 1))
            if b["what"] == "diagonal":      # query i sees keys up to i: the lower triangle of the block
                ax.add_patch(Rectangle((x0, y0), size, size, facecolor="white", edgecolor="#999999"))
                ax.add_patch(Polygon([(x0, y0), (x0, y0 + size), (x0 + size, y0 + size)], closed=True,
                                     facecolor=color, edgecolor="black", linewidth=0.6))
            else:
                ax.add_patch(Rectangle((x0, y0), size, size, facecolor=color, edgecolor="black", linewidth=0.6))
            label = f"step {b['step']}\nrank {b['q']}"
        ax.text(x0 + size * (0.3 if b["what"] == "diagonal" else 0.5), y0 + size * (0.72 if b["what"] == "diagonal"
                else 0.5), label, ha="center", va="center", fontsize=8,
                color="black" if b["what"] == "skipped" or b["step"] > (n - 1) / 2 else "white")
    ticks = [i * size for i in range(n + 1)]
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.set_xlim(0, seq)
    ax.set_ylim(seq, 0)                       # query 0 at the top, as a matrix is printed
    ax.set_aspect("equal")
    ax.set_xlabel(f"key token (block j: held by rank j at step 0, one hop further each step)")
    ax.set_ylabel("query token (block r: rank r's queries)")
    ax.set_title(f"Ring attention, {n} ranks, {seq} tokens{', causal' if causal else ''}: {n} steps, {n - 1} "
                 f"send{'s' if n > 2 else ''} a rank\nof {send_bytes(seq, batch, dim, n, bytes_per):,} bytes "
                 f"(keys + values: 2 × {batch} × {size} × {dim} × {bytes_per} B)", fontsize=9)
    fig.tight_layout()
    return fig
