import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

fault = sys.argv[1]                                  # "hang" or "crash": what rank 1 does wrong
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
x = torch.ones(3)
if rank == 1 and fault == "hang":
    time.sleep(60)                                   # rank 1 does not join the all-reduce in time
if rank == 1 and fault == "crash":
    os._exit(3)                                      # rank 1 dies: no cleanup, no message
dist.all_reduce(x)                                   # rank 0 waits here for rank 1, 3 s at most
dist.destroy_process_group()
