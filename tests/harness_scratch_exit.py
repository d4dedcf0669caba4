"""How an outside course drives the from-scratch DDP wrappers: ``mp.spawn``, 2 gloo ranks, exit after the step.

Run by tests/test_scratch_exit.py (not collected by pytest). Each rank trains with NaiveDDP, then with
BucketedDDP, and counts the steps after which gloo's worker threads still held one of the step's
communication buffers when ``finish()`` returned -- the state in which a rank that exits straight away
aborts ("terminate called without an active exception"). Then it returns without destroying the group,
as the outside course's tests do, so an unclean exit shows as a non-zero exit code.
"""
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def worker(rank: int, world: int, port: int, steps: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from disttutor.scratch.ddp import BucketedDDP, NaiveDDP

    sent: list[torch.Tensor] = []  # every tensor the wrappers hand to an all-reduce this step
    all_reduce = dist.all_reduce

    def spy(t, *args, **kwargs):
        sent.append(t)
        return all_reduce(t, *args, **kwargs)

    dist.all_reduce = spy
    held = {}
    for kind in ("naive", "bucketed"):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
        ddp = NaiveDDP(model) if kind == "naive" else BucketedDDP(model, bucket_cap_numel=300)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        held[kind] = 0
        for _ in range(steps):
            opt.zero_grad(set_to_none=False)  # keep .grad: its use count is then 2 (the parameter, its Python object)
            sent.clear()
            ((ddp(torch.randn(4, 16)) - 1) ** 2).mean().backward()
            ddp.finish()
            # Beyond the tensor's own holders (a bucket buffer: its Python object, in `sent`; a gradient: also
            # the parameter's .grad), any count is a reference gloo's threads still hold.
            own = 2 if kind == "naive" else 1
            held[kind] += any(t._use_count() > own for t in sent)
            opt.step()
    # One write(2) of under PIPE_BUF bytes: atomic on a pipe, so the two ranks' lines never interleave
    # (print() may split the text and its newline into two writes, and the ranks share the parent's stdout).
    os.write(1, (json.dumps({"rank": rank, "steps": steps, "held": held}) + "\n").encode())


if __name__ == "__main__":
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # a free port from the OS
    port = s.getsockname()[1]
    s.close()
    mp.spawn(worker, args=(2, port, int(sys.argv[1])), nprocs=2)
