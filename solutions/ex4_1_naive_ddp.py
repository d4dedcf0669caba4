"""Solution to Exercise 4.1 (chapter 4): naive DDP -- all-reduce every gradient after backward.

Check it from a notebook or a shell::

    from disttutor.checks.ddp import check_naive_ddp
    print(check_naive_ddp("solutions/ex4_1_naive_ddp.py"))

Self-contained on purpose: the checker runs this file's source on every rank.
Same idea as :class:`disttutor.scratch.ddp.NaiveDDP`.
"""
import torch
import torch.distributed as dist


def sync_gradients(model: torch.nn.Module) -> None:
    """Make every ``p.grad`` the average of that gradient over all ranks (in place)."""
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is None:  # a parameter this backward did not reach
            continue
        dist.all_reduce(p.grad)  # SUM of the ranks' gradients, one collective per tensor
        p.grad.div_(world)       # the loss is a mean per rank, so the global gradient is the mean
