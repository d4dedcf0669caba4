"""What each DDP rank holds and what it writes to a DCP checkpoint, in bytes (chapter 10).

The capstone's ``TinyLM`` (vocabulary V, width d, L layers) has

    N = 2·V·d + V + L·(12·d² + 13·d) + 2·d

parameters: the embedding and the output layer (V·d each, V output biases), per layer attention
(4d² + 4d), feed-forward d -> 4d -> d (8d² + 5d) and two LayerNorms (4d), and a final LayerNorm (2d).
Under DDP with fp32 AdamW every rank holds weights, gradients and the two moments, 4N bytes each
(DDP's all-reduce buckets, a copy of the gradients unless ``gradient_as_bucket_view=True``, add 4N
more: not drawn). A checkpoint keeps weights and moments (12N); the replicas are equal, so DCP
writes each tensor once, spread over the ranks: about 12N / n a rank. Training costs 6 FLOPs per
matmul weight per token (2 forward, 4 backward), plus attention, plus one more forward of each layer
under activation checkpointing.

:func:`schematic` draws the bytes from the run's config; :func:`written_tensor_bytes` reads what a
checkpoint's files really hold. Computing functions need no matplotlib (imported inside).
"""
from __future__ import annotations

import math

KIB = 1024
HELD = ("weights", "gradients", "AdamW exp_avg", "AdamW exp_avg_sq")  # fp32, 4 bytes a parameter each
WRITTEN = ("weights", "AdamW exp_avg", "AdamW exp_avg_sq")           # what a checkpoint keeps of them
COLORS = {"weights": "#3182bd", "gradients": "#bdbdbd", "AdamW exp_avg": "#e6550d", "AdamW exp_avg_sq": "#fdae6b"}


def tinylm_params(vocab: int, d_model: int, layers: int) -> int:
    """N of ``disttutor.lm.model.TinyLM`` (its buffers, the positional table, are not parameters)."""
    return 2 * vocab * d_model + vocab + layers * (12 * d_model ** 2 + 13 * d_model) + 2 * d_model


def matmul_params(vocab: int, d_model: int, layers: int) -> int:
    """Weights used in matrix multiplications: 12d² a layer and the output layer's V·d (the embedding is a lookup)."""
    return layers * 12 * d_model ** 2 + vocab * d_model


def flops_per_token(vocab: int, d_model: int, layers: int, seq_len: int, act_ckpt: bool) -> int:
    """Training FLOPs per token: 6 per matmul weight, 12·L·T·d for attention's two T x T products; activation
    checkpointing reruns each layer's forward (2·12d² + 4·T·d a layer)."""
    flops = 6 * matmul_params(vocab, d_model, layers) + 12 * layers * seq_len * d_model
    if act_ckpt:
        flops += layers * (2 * 12 * d_model ** 2 + 4 * seq_len * d_model)
    return flops


def held_bytes(n_params: int) -> dict[str, int]:
    """Bytes every DDP rank holds, fp32 with AdamW: 4N each for weights, gradients and the two moments
    (not DDP's all-reduce buckets, another 4N unless ``gradient_as_bucket_view=True``)."""
    return {part: 4 * n_params for part in HELD}


def written_bytes(n_params: int, world: int) -> dict[str, float]:
    """Idealised bytes of tensors each rank writes: weights and moments split evenly over ``world`` ranks."""
    return {part: 4 * n_params / world for part in WRITTEN}


def written_tensor_bytes(path: str) -> dict[str, int]:
    """A DCP checkpoint's tensor bytes per data file (``__{rank}_0.distcp``), read from its metadata."""
    from disttutor.lm.checkpoint import SafeReader

    md = SafeReader(path).read_metadata()
    out: dict[str, int] = {}
    for index, info in md.storage_data.items():
        meta = md.state_dict_metadata[index.fqn]
        out[info.relative_path] = out.get(info.relative_path, 0) + math.prod(meta.size) * meta.properties.dtype.itemsize
    return dict(sorted(out.items()))


def schematic(n_params: int, world: int):
    """Per rank: what it holds in memory (weights, gradients, two moments) and what it writes to a DCP
    checkpoint (its share of weights and moments), stacked horizontal bars in KiB."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(9, 0.9 * world + 1.6), constrained_layout=True)
    rows = []
    for r in range(world):
        rows += [(f"rank {r} holds", held_bytes(n_params)), (f"rank {r} writes", written_bytes(n_params, world))]
    for y, (_, parts) in enumerate(rows):
        left = 0.0
        for part, nbytes in parts.items():
            ax.barh(y, nbytes / KIB, left=left, color=COLORS[part], edgecolor="white", height=0.7)
            left += nbytes / KIB
        ax.text(left, y, f" {left:,.0f} KiB", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [name for name, _ in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, 16 * n_params / KIB * 1.2)
    ax.set_xlabel("KiB (fp32: 4 bytes a parameter)")
    ax.set_title(f"DDP + AdamW, N = {n_params:,} parameters on {world} ranks: each holds 16N bytes of state\n"
                 f"(DDP's gradient buckets, not drawn, add 4N) and writes about 12N/{world}", fontsize=10)
    ax.legend(handles=[Patch(color=COLORS[p], label=p) for p in HELD], fontsize=8, frameon=False,
              loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig
