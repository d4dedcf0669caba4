"""Solution to Exercise 5.2 (chapter 5): the set-up a multi-node script needs.

Everything comes from torchrun's environment: the device from LOCAL_RANK (this process's number on
its node), the job's size from WORLD_SIZE, the meeting point from MASTER_ADDR/MASTER_PORT, which
init_process_group reads itself. Nothing in it names a host, a port or a count of processes.
"""
import datetime
import os

import torch
import torch.distributed as dist


def join_job(gpus_per_node):
    rank = int(os.environ["RANK"])                   # unique in the job
    local_rank = int(os.environ["LOCAL_RANK"])       # 0 .. nproc-per-node - 1 on every node
    world_size = int(os.environ["WORLD_SIZE"])       # all nodes' processes
    node = int(os.environ["GROUP_RANK"])             # this node's number, given by the rendezvous
    gpu = local_rank                                 # a node's GPUs are numbered 0 .. gpus_per_node - 1
    if torch.cuda.device_count() >= gpus_per_node:
        torch.cuda.set_device(gpu)                   # before NCCL starts: this process owns this GPU
        backend = "nccl"
    else:
        backend = "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))  # env://: torchrun's address
    return {"rank": rank, "local_rank": local_rank, "world_size": world_size, "node": node, "gpu": gpu}
