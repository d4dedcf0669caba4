"""Solution to Exercise 11.2 (chapter 11): fully sharded data parallel from scratch.

Check it from a notebook or a shell::

    from disttutor.checks.sharding import check_fsdp
    print(check_fsdp("solutions/ex11_2_fsdp.py"))

Self-contained on purpose: the checker runs this file's source on every rank. It is the notebook's
skeleton with its three methods written (``free``, ``gather``, ``reduce_scatter``); the same idea as
:class:`disttutor.scratch.fsdp.ScratchFSDP`: one flat fp32 master shard per rank; all-gather (in the
compute dtype) for forward; reduce-scatter (and divide) the gradient in backward.
"""
import torch
import torch.distributed as dist
from torch import nn


class _Unit(torch.autograd.Function):
    """The unit's boundary: forward gathers the whole flat vector, backward reduce-scatters its gradient."""

    @staticmethod
    def forward(ctx, shard, fsdp):
        ctx.fsdp = fsdp
        return fsdp.gather(shard.detach(), fsdp.dtype)

    @staticmethod
    def backward(ctx, grad_full):
        return ctx.fsdp.reduce_scatter(grad_full), None


class FSDP(nn.Module):
    def __init__(self, module, compute_dtype=None):
        super().__init__()
        self.module, self.dtype = module, compute_dtype or torch.float32
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        trainable = [(n, p) for n, p in module.named_parameters() if p.requires_grad]  # frozen ones stay whole
        self.entries = [(n, p.shape) for n, p in trainable]
        flat = torch.cat([p.detach().flatten().float() for _, p in trainable])
        self.numel = flat.numel()
        size = -(-self.numel // self.world)  # ceil: equal shards, the last one padded with zeros
        flat = nn.functional.pad(flat, (0, size * self.world - self.numel))
        self.flat_shard = nn.Parameter(flat[self.rank * size:(self.rank + 1) * size].clone())  # fp32 master
        self.free([p for _, p in trainable])

    def free(self, params):
        for p in params:
            p.requires_grad_(False)   # the optimiser must see only the shard
            p.data = p.data.new_empty(0)  # the full copy is gone; only the shard remains

    def gather(self, shard, dtype):
        out = shard.new_empty(self.world * shard.numel(), dtype=dtype)
        # all_gather_single (older code: all_gather_into_tensor): rank r's shard lands at r * len(shard)
        dist.all_gather_single(out, shard.to(dtype))
        return out  # still padded: forward views only the first `numel` elements

    def reduce_scatter(self, grad_full):
        piece = grad_full.new_empty(grad_full.numel() // self.world)
        # reduce_scatter_single (older code: reduce_scatter_tensor): the SUM over ranks, my slice only
        dist.reduce_scatter_single(piece, grad_full.contiguous())
        return piece.float().div_(self.world)  # mean over ranks (the loss is a per-rank mean), fp32 master

    def forward(self, *inputs):
        full = _Unit.apply(self.flat_shard, self)  # all-gathered here; reduce-scattered in backward
        params, i = {}, 0
        for n, shape in self.entries:
            params[n] = full[i:i + shape.numel()].view(shape)
            i += shape.numel()
        for n, p in self.module.named_parameters():
            params.setdefault(n, p.to(self.dtype))  # frozen ones: kept whole, only cast
        return torch.func.functional_call(self.module, params, inputs).float()

    @torch.no_grad()
    def full_parameters(self):
        flat, full, i = self.gather(self.flat_shard.detach(), torch.float32), {}, 0
        for n, shape in self.entries:
            full[n] = flat[i:i + shape.numel()].view(shape).clone()
            i += shape.numel()
        for n, p in self.module.named_parameters():
            full.setdefault(n, p.detach().clone())
        return full
