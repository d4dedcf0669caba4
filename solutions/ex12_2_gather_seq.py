"""Solution to Exercise 12.2 (chapter 12): sequence parallelism's all-gather, with its backward.

Check it from a notebook or a shell::

    from disttutor.checks.sequence_parallel import check_gather_seq
    print(check_gather_seq("solutions/ex12_2_gather_seq.py"))
"""
import torch
import torch.distributed as dist


class GatherSeq(torch.autograd.Function):
    """Sequence shards [seq/t, batch, dim] -> the whole sequence [seq, batch, dim], in rank order."""

    @staticmethod
    def forward(ctx, shard):
        world = dist.get_world_size()
        full = shard.new_empty((shard.shape[0] * world, *shard.shape[1:]))
        dist.all_gather_single(full, shard.contiguous())   # dim 0 is the sequence: rank k's rows at k*s
        return full

    @staticmethod
    def backward(ctx, grad):
        # Every rank used the whole gathered sequence (its own hidden units), so the gradient of my
        # rows is the SUM of all ranks' gradients for those rows: a reduce-scatter.
        world = dist.get_world_size()
        mine = grad.new_empty((grad.shape[0] // world, *grad.shape[1:]))
        dist.reduce_scatter_single(mine, grad.contiguous())
        return mine
