import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule

out_dir = sys.argv[1]                                      # each rank writes its trace here
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 8)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
trace = os.path.join(out_dir, f"trace_rank{rank}.json")

with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3),
             on_trace_ready=lambda p: p.export_chrome_trace(trace)) as prof:
    for step in range(5):
        x, y = torch.randn(64, 64), torch.randn(64, 8)
        with record_function("forward"):
            if rank == 1:
                time.sleep(0.040)                          # the straggler: a slow data loader, a slow core...
            loss = F.mse_loss(model(x), y)
        with record_function("backward"):
            loss.backward()                                # DDP's gradient all-reduces run in here
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad()
        prof.step()                                        # advance the schedule
dist.destroy_process_group()
