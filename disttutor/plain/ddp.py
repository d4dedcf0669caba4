"""DistributedDataParallel in one file: DistributedSampler, gradient accumulation with no_sync().

    torchrun --nproc-per-node 2 ddp.py                      # CPU (gloo) or one GPU per rank (NCCL)
    torchrun --nnodes 2 --node-rank R --master-addr HOST --master-port 29500 --nproc-per-node 8 ddp.py

Only torch. Prints "ddp: OK ..." on rank 0 when the replicas end identical.
"""
import contextlib
import itertools
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

STEPS, ACCUM, BATCH = 4, 2, 16   # optimizer steps, micro-batches per step, samples per micro-batch per rank


def main():
    # [teach setup]
    # torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT for every process.
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():          # one GPU per process: NCCL
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:                                  # CPU ranks: gloo
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)       # reads the env torchrun set ("env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    # [/teach setup]

    # [teach model]
    torch.manual_seed(rank)                # different init per rank on purpose: DDP broadcasts rank 0's
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)   # the SAME dataset on every rank; the sampler splits it
    data = TensorDataset(torch.randn(512, 32, generator=g), torch.randint(0, 4, (512,), generator=g))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
    # [/teach model]

    # [teach loop]
    def batches():                         # endless: epoch after epoch
        for epoch in itertools.count():
            sampler.set_epoch(epoch)       # a new shuffle each epoch, the same one on every rank
            yield from loader

    stream = batches()
    for step in range(STEPS):
        for micro in range(ACCUM):
            x, y = (t.to(device) for t in next(stream))
            last = micro == ACCUM - 1
            # no_sync(): this backward only accumulates into .grad. The last micro-batch's backward
            # all-reduces the accumulated sum, so each step costs ONE all-reduce, not ACCUM.
            with contextlib.nullcontext() if last else model.no_sync():
                loss = nn.functional.cross_entropy(model(x), y) / ACCUM   # / ACCUM: a mean over micro-batches
                loss.backward()
        opt.step()                         # every rank steps with the same averaged gradient
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            print(f"step {step + 1}: loss {loss.item() * ACCUM:.4f}", flush=True)
    # [/teach loop]

    # Check: every replica holds the same parameters (DDP's promise). all_reduce(MAX) of |p - p_rank0|.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    diff = (flat - ref).abs().max()
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    if rank == 0:
        verdict = "OK" if diff.item() == 0.0 else f"FAILED (max difference {diff.item():g})"
        print(f"ddp: {verdict}: {world} ranks, {STEPS} steps of {ACCUM} micro-batches, {backend} on {device.type}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # gloo's threads may still run while Python's exit-time destructors free their objects (torch
    # 2.13 on CPU): a rank whose work is done can then abort with SIGABRT, and torchrun reports the
    # job as failed (seen once in a CI run, after "OK"). Skip interpreter finalisation: flush and leave.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
