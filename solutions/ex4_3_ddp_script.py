"""Solution to Exercise 4.3 (chapter 4): a single-process training script, turned into DDP.

Check it from a notebook or a shell::

    from disttutor.checks.ddp_script import check_ddp_script
    print(check_ddp_script("solutions/ex4_3_ddp_script.py"))

Self-contained on purpose: the checker runs this file's source on every rank, in a process group
it has already set up (gloo on the CPU).
"""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset


def train_ddp(model, train_set, eval_set, epochs, batch_size, lr, checkpoint_path):
    """Train ``model`` with DDP; return the eval loss over the whole ``eval_set`` after each epoch."""
    rank, world = dist.get_rank(), dist.get_world_size()
    ddp = DDP(model)  # broadcasts rank 0's weights; averages the gradients during backward
    sampler = DistributedSampler(train_set)  # this rank's share; shuffled with seed 0 + epoch
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, drop_last=True)  # full batches only
    # Every world-th eval sample: each sample on exactly one rank (a sampler would pad with repeats).
    eval_loader = DataLoader(Subset(eval_set, range(rank, len(eval_set), world)), batch_size=batch_size)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    losses = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        ddp.train()
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
        ddp.eval()
        total = torch.zeros(2, dtype=torch.float64)  # sum of losses, count
        with torch.no_grad():
            for x, y in eval_loader:
                total[0] += torch.nn.functional.cross_entropy(ddp(x), y, reduction="sum").item()
                total[1] += len(y)
        dist.all_reduce(total)  # sums and counts over all ranks: every rank gets the global mean
        losses.append(float(total[0] / total[1]))
    if rank == 0:
        torch.save(ddp.module.state_dict(), checkpoint_path)  # the plain model's keys, no 'module.'
    dist.barrier()  # nobody returns (and reads the file) before rank 0 has written it
    return losses
