import datetime
import os

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))  # debug with seconds, not 30 min
x = torch.ones(4)
if rank == 0:
    dist.all_reduce(x)           # rank 0 sums ...
else:
    dist.broadcast(x, src=0)     # ... while rank 1 waits for a broadcast: two different collectives
dist.destroy_process_group()
