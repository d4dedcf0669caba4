"""Introduced in chapter 12: the small modules every kind of model parallelism splits.

One definition, used by the distributed versions (as the source of their weights) and by the
single-process references they are compared with.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["mlp", "Attention", "Block", "dropout_mask"]


def mlp(dim: int = 16, hidden: int = 32) -> nn.Sequential:
    """The transformer's feed-forward block: widen, nonlinearity, narrow (Megatron splits it in two)."""
    return nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))


class Attention(nn.Module):
    """Multi-head causal self-attention whose head count follows the (possibly split) projection width."""

    def __init__(self, dim: int = 16, heads: int = 4):
        super().__init__()
        self.head_dim = dim // heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        b, t, _ = x.shape
        # Under tensor parallelism q/k/v are column-split: a rank computes heads/tp WHOLE heads
        # (heads never straddle ranks), so attention itself needs no communication at all.
        q, k, v = (f(x).view(b, t, -1, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))  # row-split o: partial sums, one all-reduce


class Block(nn.Module):
    """``x + dropout(mlp(layernorm(x)))``, the feed-forward half of a transformer layer.

    Activations are ``[seq, batch, dim]`` (Megatron's layout: the sequence is dimension 0, so a
    sequence shard is a contiguous slice and the collectives' dimension 0 is the sequence). The
    dropout mask is an argument (see :func:`dropout_mask`), so a split block can use the same
    mask, sliced, as the unsplit reference.
    """

    def __init__(self, dim: int = 16, hidden: int = 32):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.mlp = mlp(dim, hidden)

    def forward(self, x, mask):
        return x + self.mlp(self.ln(x)) * mask


def dropout_mask(shape, p: float, seed: int) -> torch.Tensor:
    """An inverted-dropout mask (kept units scaled by 1/(1-p)) for the WHOLE tensor, from ``seed``.

    Every rank draws the full mask and keeps its slice: the same mask one process would draw.
    (Megatron instead seeds each tensor-parallel rank differently inside sequence-parallel regions;
    drawing the full mask is wasteful but makes the comparison with one process exact.)
    """
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) >= p).float() / (1 - p)
