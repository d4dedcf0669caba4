"""Solution to Exercise 0.1 (chapter 0): a complete distributed script, as one function.

Run on every rank under torchrun, with no process group yet: read who this process is, pick the
device and backend, join with a timeout, all-reduce rank + 1, check the sum, leave.
"""
import datetime
import os

import torch
import torch.distributed as dist


def first_job():
    rank = int(os.environ["RANK"])                        # all four set by torchrun for every process
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    local_world_size = int(os.environ["LOCAL_WORLD_SIZE"])
    if torch.cuda.device_count() >= local_world_size:     # a GPU for every process on this machine
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    # MASTER_ADDR/MASTER_PORT come from the environment too (env://); a collective waits 30 s at most
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=30))
    x = torch.full((1,), float(rank + 1), device=device)
    dist.all_reduce(x)                                    # every rank calls it: the sum lands on every rank
    assert x.item() == world_size * (world_size + 1) / 2, x.item()
    dist.destroy_process_group()
    return x
