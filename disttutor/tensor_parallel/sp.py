"""Introduced in chapter 12: sequence parallelism (Korthikanti et al., 2022), next to plain TP.

Tensor parallelism leaves LayerNorm, dropout and the residual add *replicated*: every rank
computes them on the whole sequence and stores the whole activation. Sequence parallelism splits
those regions by the **sequence** instead: each rank keeps ``seq/t`` tokens there. The all-reduce
after the row-parallel layer becomes two halves placed around the block:

* before the column-parallel layer, an **all-gather** of the sequence shards (its backward: a
  reduce-scatter of the input gradient);
* after the row-parallel layer, a **reduce-scatter** of the partial sums (its backward: an
  all-gather), so each rank gets the *summed* output for its own tokens only.

Same bytes as the all-reduce (an all-reduce IS a reduce-scatter then an all-gather), less memory.
One new duty: LayerNorm's weights (and the row layer's bias) now see only this rank's tokens, so
their gradients are partial and are all-reduced after backward (:func:`sync_replicated_grads`).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from disttutor.tensor_parallel.models import Block
from disttutor.tensor_parallel.tp import ColumnParallelLinear, CopyToTP, ReduceFromTP, shard_range

__all__ = ["GatherSeq", "ScatterSeq", "TPBlock", "SPBlock", "sync_replicated_grads", "saved_activation_bytes"]


# [teach sp_ops]
class GatherSeq(torch.autograd.Function):
    """Sequence shards -> the whole sequence (forward all-gather, backward reduce-scatter)."""

    @staticmethod
    def forward(ctx, shard, group):
        ctx.group, world = group, dist.get_world_size(group)
        full = shard.new_empty((shard.shape[0] * world, *shard.shape[1:]))
        dist.all_gather_single(full, shard.contiguous(), group=group)  # dimension 0 is the sequence
        return full

    @staticmethod
    def backward(ctx, grad):
        # Every rank's gradient covers the whole sequence, from its own hidden units: sum the
        # ranks' contributions AND keep only my tokens -- a reduce-scatter.
        world = dist.get_world_size(ctx.group)
        mine = grad.new_empty((grad.shape[0] // world, *grad.shape[1:]))
        dist.reduce_scatter_single(mine, grad.contiguous(), group=ctx.group)
        return mine, None


class ScatterSeq(torch.autograd.Function):
    """Partial sums of the whole sequence -> the summed values of my tokens (reduce-scatter; backward all-gather)."""

    @staticmethod
    def forward(ctx, partial, group):
        ctx.group, world = group, dist.get_world_size(group)
        mine = partial.new_empty((partial.shape[0] // world, *partial.shape[1:]))
        dist.reduce_scatter_single(mine, partial.contiguous(), group=group)
        return mine

    @staticmethod
    def backward(ctx, grad):
        world = dist.get_world_size(ctx.group)
        full = grad.new_empty((grad.shape[0] * world, *grad.shape[1:]))
        dist.all_gather_single(full, grad.contiguous(), group=ctx.group)
        return full, None
# [/teach sp_ops]


class _Split(nn.Module):
    def __init__(self, full: Block, rank: int, world: int, group=None):
        super().__init__()
        self.group = group
        self.ln = nn.LayerNorm(full.ln.normalized_shape)
        self.ln.load_state_dict(full.ln.state_dict())
        self.fc1 = ColumnParallelLinear(full.mlp[0], rank, world)
        rows = shard_range(full.mlp[2].in_features, rank, world)
        self.w2 = nn.Parameter(full.mlp[2].weight.detach()[:, rows].clone())
        self.b2 = nn.Parameter(full.mlp[2].bias.detach().clone())


class TPBlock(_Split):
    """Plain TP: LayerNorm, dropout and the residual on the WHOLE sequence, on every rank."""

    def forward(self, x, mask):                      # x: [seq, batch, dim], the same on every rank
        h = CopyToTP.apply(self.ln(x), self.group)   # f: all-reduce in backward
        partial = F.linear(F.gelu(self.fc1(h)), self.w2)
        return x + (ReduceFromTP.apply(partial, self.group) + self.b2) * mask  # g: all-reduce forward


# [teach sp_block]
class SPBlock(_Split):
    """Sequence parallel: LayerNorm, dropout and the residual on MY seq/t tokens only."""

    def forward(self, x_shard, mask_shard):          # x_shard: [seq/t, batch, dim]
        h = GatherSeq.apply(self.ln(x_shard), self.group)    # all-gather: the column layer needs all tokens
        partial = F.linear(F.gelu(self.fc1(h)), self.w2)     # [seq, batch, dim], a partial sum
        mine = ScatterSeq.apply(partial, self.group)         # reduce-scatter: summed, my tokens only
        return x_shard + (mine + self.b2) * mask_shard


def sync_replicated_grads(block: SPBlock) -> None:
    """LayerNorm's weights and the output bias saw only my tokens: their gradients are partial sums."""
    grads = [block.ln.weight.grad, block.ln.bias.grad, block.b2.grad]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=block.group)            # one all-reduce for the three small tensors
    for g, new in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(new.view_as(g))
# [/teach sp_block]


def saved_activation_bytes(fn, params) -> tuple[object, int, list]:
    """Run ``fn()``; measure the bytes autograd keeps for backward, parameters excluded.

    Returns (what fn returned, total bytes, [(shape, bytes) of each saved tensor]).

    ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor an operation saves; tensors that
    share storage (a view of a saved tensor) are counted once, by their storage.
    """
    skip = {p.data_ptr() for p in params}
    seen: dict[int, tuple[list, int]] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip and ptr not in seen:
            seen[ptr] = (list(t.shape), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(b for _, b in seen.values()), list(seen.values())
