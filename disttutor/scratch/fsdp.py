"""Fully sharded data parallel (ZeRO-3) from scratch: one flat, sharded parameter per module.

Introduced in chapter 11 (Exercise 11.2 rebuilds it). ``ScratchFSDP(module, compute_dtype)``:

1. flattens the module's *trainable* parameters into one fp32 vector, pads it to a multiple
   of the world size and keeps only this rank's equal slice -- the **master shard**, the one
   ``nn.Parameter`` the optimiser sees (so its state is sharded too);
2. in ``forward`` **all-gathers** the shards (cast to ``compute_dtype`` first: half the bytes
   on the wire), cuts the full vector back into parameter-shaped views and runs the original
   module on them with ``torch.func.functional_call``;
3. in backward the gradient of the full vector is **reduce-scattered**: each rank receives
   the sum over ranks of *its* slice only, divides by the world size (the average) and
   turns it into an fp32 gradient of its master shard.

Simplifications against torch's FSDP2, said plainly: one unit for the whole module (FSDP2
wraps layer by layer and frees each layer's gathered weights after use -- here the full
vector stays alive from forward to backward, because autograd saved it); frozen parameters
and buffers stay whole on every rank (they have no gradient and no optimiser state).
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import nn


class _GatherShards(torch.autograd.Function):
    """Forward: all-gather the shards into the full flat vector. Backward: reduce-scatter its gradient."""

    @staticmethod
    def forward(ctx, shard: torch.Tensor, dtype: torch.dtype, numel: int) -> torch.Tensor:
        world = dist.get_world_size()
        ctx.world = world
        full = torch.empty(world * shard.numel(), dtype=dtype, device=shard.device)
        # all_gather_single is torch 2.13's name; older code (and torch < 2.13) calls it all_gather_into_tensor.
        dist.all_gather_single(full, shard.detach().to(dtype))  # rank r's slice lands at r*len
        return full[:numel]  # drop the padding

    @staticmethod
    def backward(ctx, grad_full: torch.Tensor):
        world = ctx.world
        padded = torch.zeros(world * math.ceil(grad_full.numel() / world), dtype=grad_full.dtype,
                             device=grad_full.device)
        padded[: grad_full.numel()] = grad_full
        mine = torch.empty(padded.numel() // world, dtype=grad_full.dtype, device=grad_full.device)
        # Each rank gets sum_over_ranks(gradient)[its slice]; divide for the AVERAGE (the loss is a
        # per-rank mean). Reduced in the compute dtype, like FSDP2's default reduce_dtype.
        # reduce_scatter_single: torch 2.13's name for what older code calls reduce_scatter_tensor.
        dist.reduce_scatter_single(mine, padded, op=dist.ReduceOp.SUM)
        return (mine / world).float(), None, None


class ScratchFSDP(nn.Module):
    def __init__(self, module: nn.Module, compute_dtype: torch.dtype | None = None):
        super().__init__()
        self.module = module
        self.compute_dtype = compute_dtype or torch.float32
        rank, world = dist.get_rank(), dist.get_world_size()
        # named_parameters() yields a tied tensor once (under its first name); functional_call
        # (tie_weights=True) then feeds the same view to every place the tensor is used.
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self.layout = [(n, p.shape, p.numel()) for n, p in named]
        self.numel = sum(p.numel() for _, p in named)
        with torch.no_grad():
            # Every rank must start from the same weights: rank 0's, as DDP's constructor does.
            for t in [*module.parameters(), *module.buffers()]:
                dist.broadcast(t, 0)
            flat = torch.cat([p.detach().reshape(-1).float() for _, p in named])
        per = math.ceil(self.numel / world)
        flat = torch.cat([flat, flat.new_zeros(per * world - self.numel)])
        self.shard = nn.Parameter(flat[rank * per:(rank + 1) * per].clone())  # fp32 master shard
        for _, p in named:
            # Free the full copies: from now on the only trainable storage on this rank is the shard.
            p.requires_grad_(False)
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)
        self._names = {n for n, _, _ in self.layout}

    def _views(self, full: torch.Tensor) -> dict[str, torch.Tensor]:
        out, at = {}, 0
        for name, shape, n in self.layout:
            out[name] = full[at:at + n].view(shape)
            at += n
        return out

    def forward(self, *args, **kwargs):
        dtype = self.compute_dtype
        params = self._views(_GatherShards.apply(self.shard, dtype, self.numel))
        for n, p in self.module.named_parameters():
            if n not in self._names:  # frozen: whole on every rank, only cast
                params[n] = p.to(dtype)
        args = tuple(a.to(dtype) if torch.is_tensor(a) and a.is_floating_point() else a for a in args)
        out = torch.func.functional_call(self.module, params, args, kwargs)
        return out.float()  # outputs in fp32, so the loss is computed in fp32 whatever the compute dtype

    def sharded_parameters(self) -> list[nn.Parameter]:
        """What the optimiser should step: this rank's master shard."""
        return [self.shard]

    @torch.no_grad()
    def full_parameters(self) -> dict[str, torch.Tensor]:
        """Every parameter, whole and in fp32, by its name in the original module (a collective)."""
        full = torch.empty(self.shard.numel() * dist.get_world_size(), device=self.shard.device)
        dist.all_gather_single(full, self.shard.detach())
        out = {n: t.clone() for n, t in self._views(full[: self.numel]).items()}
        out.update({n: p.detach().clone() for n, p in self.module.named_parameters() if n not in self._names})
        return out
