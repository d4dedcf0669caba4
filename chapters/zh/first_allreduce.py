import datetime
import os

import torch
import torch.distributed as dist

rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])   # set by torchrun
local_rank = int(os.environ["LOCAL_RANK"])                                 # this process's number on its machine
if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):       # a GPU for every local rank
    torch.cuda.set_device(local_rank)
    device, backend = torch.device("cuda", local_rank), "nccl"
else:
    device, backend = torch.device("cpu"), "gloo"

dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))   # a collective waits 60 s at most
x = torch.full((3,), float(rank + 1), device=device)                       # rank r holds [r+1, r+1, r+1]
dist.all_reduce(x)                                                         # sum over ranks, on every rank
print(f"rank {rank}/{world_size} on {device}: {x.tolist()}")
dist.destroy_process_group()
