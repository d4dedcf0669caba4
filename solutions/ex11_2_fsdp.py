"""Solution to Exercise 11.2 (chapter 11): fully sharded data parallel from scratch.

Check it from a notebook or a shell::

    from disttutor.checks.sharding import check_fsdp
    print(check_fsdp("solutions/ex11_2_fsdp.py"))

Self-contained on purpose: the checker runs this file's source on every rank. Same idea as
:class:`disttutor.scratch.fsdp.ScratchFSDP`: one flat fp32 master shard per rank; all-gather
(in the compute dtype) for forward; reduce-scatter (and divide) the gradient in backward.
"""
import torch
import torch.distributed as dist
from torch import nn


class AllGatherFlat(torch.autograd.Function):
    @staticmethod
    def forward(ctx, shard, dtype):
        world = dist.get_world_size()
        out = shard.new_empty(world * shard.numel(), dtype=dtype)
        dist.all_gather_into_tensor(out, shard.detach().to(dtype))
        return out  # still padded: the caller only views the first `numel` elements

    @staticmethod
    def backward(ctx, grad):
        world = dist.get_world_size()
        piece = grad.new_empty(grad.numel() // world)
        dist.reduce_scatter_tensor(piece, grad.contiguous())  # sum of everyone's gradient, my slice
        return piece.float().div_(world), None  # mean over ranks, as fp32 for the fp32 master


class FSDP(nn.Module):
    def __init__(self, module, compute_dtype=None):
        super().__init__()
        self.module, self.dtype = module, compute_dtype or torch.float32
        world, rank = dist.get_world_size(), dist.get_rank()
        self.entries = [(n, p.shape) for n, p in module.named_parameters() if p.requires_grad]
        flat = torch.cat([p.detach().flatten() for n, p in module.named_parameters() if p.requires_grad])
        self.numel = flat.numel()
        size = -(-self.numel // world)  # ceil: equal shards, the last one padded with zeros
        flat = nn.functional.pad(flat, (0, size * world - self.numel))
        self.flat_shard = nn.Parameter(flat[rank * size:(rank + 1) * size].clone())
        for n, p in module.named_parameters():
            if p.requires_grad:
                p.requires_grad_(False)
                p.data = p.data.new_empty(0)  # the full copy is gone; only the shard remains

    def _split(self, flat):
        out, i = {}, 0
        for n, shape in self.entries:
            k = shape.numel()
            out[n] = flat[i:i + k].view(shape)
            i += k
        return out

    def forward(self, *inputs):
        params = self._split(AllGatherFlat.apply(self.flat_shard, self.dtype))
        for n, p in self.module.named_parameters():
            params.setdefault(n, p.to(self.dtype))  # frozen ones: kept whole, only cast
        return torch.func.functional_call(self.module, params, inputs).float()

    @torch.no_grad()
    def full_parameters(self):
        flat = AllGatherFlat.apply(self.flat_shard, torch.float32)
        full = {n: t.clone() for n, t in self._split(flat).items()}
        for n, p in self.module.named_parameters():
            full.setdefault(n, p.detach().clone())
        return full
