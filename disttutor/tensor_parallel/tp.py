"""Introduced in chapter 12: Megatron-style tensor parallelism from scratch.

Megatron-LM (Shoeybi et al., 2019) splits a feed-forward block ``Linear -> GELU -> Linear`` over
``t`` ranks without communicating in between: the first Linear by **columns** (each rank computes
``hidden/t`` of the hidden units, GELU is elementwise so it needs nothing else), the second by
**rows** (each rank multiplies its hidden units by its rows of the weight: a *partial sum* of the
output, which one all-reduce completes). Two conjugate operators carry all the communication:

* ``f`` (:class:`CopyToTP`) before the block: identity forward, all-reduce backward (every rank's
  input gradient is a partial sum over its hidden units);
* ``g`` (:class:`ReduceFromTP`) after it: all-reduce forward, identity backward (the output, and so
  its gradient, is the same on every rank).

So one all-reduce forward and one backward per block. Attention splits the same way with heads:
q/k/v by columns (whole heads per rank), the output projection by rows.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from disttutor.tensor_parallel.models import Attention

__all__ = ["CopyToTP", "ReduceFromTP", "ColumnParallelLinear", "RowParallelLinear", "TPMLP", "TPAttention",
           "shard_range"]


def shard_range(n: int, rank: int, world: int) -> slice:
    if n % world:
        raise ValueError(f"{n} does not split evenly over {world} ranks")
    size = n // world
    return slice(rank * size, (rank + 1) * size)


# [teach conjugates]
class CopyToTP(torch.autograd.Function):
    """f: the input enters the parallel region (forward: every rank has it already)"""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        # each rank's dL/dx covers its own hidden units only: a partial sum, added up here
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromTP(torch.autograd.Function):
    """g: the output leaves the parallel region (forward: add the ranks' partial sums)"""

    @staticmethod
    def forward(ctx, partial, group):
        out = partial.clone()  # all_reduce works in place; autograd's input must stay untouched
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        # the output is identical on every rank, so is its gradient: nothing to communicate
        return grad, None
# [/teach conjugates]


# [teach layers]
class ColumnParallelLinear(nn.Module):
    """This rank's output columns of ``full`` (rows of its weight): ``out_features / t`` units."""

    def __init__(self, full: nn.Linear, rank: int, world: int):
        super().__init__()
        cols = shard_range(full.out_features, rank, world)
        self.weight = nn.Parameter(full.weight.detach()[cols].clone())
        self.bias = nn.Parameter(full.bias.detach()[cols].clone())

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)  # no communication: my units from the whole input


class RowParallelLinear(nn.Module):
    """This rank's input rows of ``full`` (columns of its weight); the bias is kept whole."""

    def __init__(self, full: nn.Linear, rank: int, world: int, group=None):
        super().__init__()
        rows = shard_range(full.in_features, rank, world)
        self.group = group
        self.weight = nn.Parameter(full.weight.detach()[:, rows].clone())
        self.bias = nn.Parameter(full.bias.detach().clone())

    def forward(self, x_shard):
        partial = F.linear(x_shard, self.weight)  # my hidden units' share of every output
        # The bias is added once, AFTER the sum: added before it, it would count t times.
        return ReduceFromTP.apply(partial, self.group) + self.bias


class TPMLP(nn.Module):
    """``Linear -> GELU -> Linear`` split Megatron-style: f, column, GELU, row (with g inside)."""

    def __init__(self, full: nn.Sequential, rank: int, world: int, group=None):
        super().__init__()
        self.group = group
        self.fc1 = ColumnParallelLinear(full[0], rank, world)
        self.fc2 = RowParallelLinear(full[2], rank, world, group)

    def forward(self, x):
        x = CopyToTP.apply(x, self.group)
        return self.fc2(F.gelu(self.fc1(x)))
# [/teach layers]


class TPAttention(nn.Module):
    """:class:`~disttutor.tensor_parallel.models.Attention` with heads split over the ranks."""

    def __init__(self, full: Attention, rank: int, world: int, group=None):
        super().__init__()
        self.group, self.head_dim = group, full.head_dim
        heads = full.q.out_features // full.head_dim
        if heads % world:
            raise ValueError(f"{heads} heads do not split over {world} ranks")
        # Splitting q/k/v by columns in multiples of head_dim gives each rank whole heads.
        self.q, self.k, self.v = (ColumnParallelLinear(m, rank, world) for m in (full.q, full.k, full.v))
        self.o = RowParallelLinear(full.o, rank, world, group)

    def forward(self, x):
        b, t, _ = x.shape
        x = CopyToTP.apply(x, self.group)
        q, k, v = (f(x).view(b, t, -1, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # my heads only: no communication
        return self.o(y.transpose(1, 2).reshape(b, t, -1))
