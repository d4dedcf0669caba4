"""Solution to Exercise 3.2 (chapter 3): one parameter-server step -- gradients to rank 0, parameters back.

Check it from a notebook or a shell::

    from disttutor.checks.param_server import check_ps_step
    print(check_ps_step("solutions/ex3_2_ps_step.py"))

Self-contained on purpose: the checker runs this file's source on every rank. Called after every
rank's backward on its own equal shard; everything goes through rank 0, as in DataParallel.
"""
import torch
import torch.distributed as dist


def ps_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Reduce the gradients to rank 0, average and step there, broadcast the new parameters from it."""
    rank, world = dist.get_rank(), dist.get_world_size()
    for p in model.parameters():
        dist.reduce(p.grad, dst=0)  # the SUM lands on rank 0 only; the others keep partial sums (unused)
    if rank == 0:
        for p in model.parameters():
            p.grad /= world  # each rank's loss was its shard's mean: the full batch's gradient is the average
        optimizer.step()     # only the server updates the parameters
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p, src=0)  # every rank receives rank 0's updated parameters, in place
