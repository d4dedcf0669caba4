"""Failure modes that need real ranks, reproduced one after another in ONE job (chapter 9).

Run by :mod:`disttutor.programs.troubleshoot`. Each mode is a function
``mode(pg, rank, world, fixed) -> str``: with ``fixed=False`` it makes the
mistake and returns what a learner would see (the misbehaviour in words; an
exception it raises is caught by the program, and its text is the symptom);
with ``fixed=True`` it applies the fix and returns what the fixed run shows.

Why one job and a fresh group per attempt: starting torchrun costs seconds, while
``dist.new_group`` costs milliseconds. A mode that leaves its group broken (a
collective that timed out, a DDP constructor that failed half-way) breaks only
its own group; every group is created with a short timeout, so a mode that
hangs on purpose waits seconds, not the default 30 minutes.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
from disttutor.contract.machine import usable_cores
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

Mode = Callable[[object, int, int, bool], str]
MODES: dict[str, Mode] = {}


def mode(fn: Mode) -> Mode:
    MODES[fn.__name__] = fn
    return fn


def new_group(timeout_s: float):
    """A fresh group of all ranks: every rank calls this in the same order (it is collective)."""
    return dist.new_group(timeout=_dt.timedelta(seconds=timeout_s))


def _net(width: int = 8, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2))


def _batches(n: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)) for _ in range(n)]


def _step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = F.mse_loss(model(x), y)
    loss.backward()
    return loss


@mode
def skipped_collective(pg, rank, world, fixed):
    x = torch.ones(4)
    if fixed or rank != 1:  # rank 1 "forgot" the all-reduce (e.g. it sits in an `if rank == 0:` branch)
        dist.all_reduce(x, group=pg)
    return f"every rank called all_reduce: {x[0].item():g}" if fixed else "rank 1 went on without the all-reduce"


@mode
def mismatched_collective(pg, rank, world, fixed):
    x = torch.ones(4)
    # Rank 0 all-reduces while rank 1 broadcasts. Under TORCH_DISTRIBUTED_DEBUG=DETAIL each
    # collective first compares a fingerprint (op, shapes, dtypes) across ranks and names the mismatch.
    if rank == 0 or fixed:
        dist.all_reduce(x, group=pg)
    else:
        dist.broadcast(x, src=1, group=pg)
    return f"x = {x.tolist()}" + ("" if fixed else " (no error: a silently wrong answer)")


@mode
def rank_dependent_shape(pg, rank, world, fixed):
    n = 3 + rank  # e.g. a tensor sized by this rank's number of samples
    if fixed:  # agree on the largest size first, pad to it (all_gather needs equal shapes too)
        size = torch.tensor([n])
        dist.all_reduce(size, op=dist.ReduceOp.MAX, group=pg)
        x = torch.zeros(int(size))
        x[:n] = 1
    else:
        x = torch.ones(n)
    dist.all_reduce(x, group=pg)
    return f"x = {x.tolist()}"


@mode
def uneven_inputs(pg, rank, world, fixed):
    from torch.distributed.algorithms.join import Join

    batches = _batches(3 - rank)  # rank 0 has 3 batches, rank 1 only 2: rank 0's third backward waits alone
    model = DDP(_net(), process_group=pg)
    # The fix: Join lets ranks that ran out of data shadow the others' all-reduces.
    with Join([model], enable=fixed):
        for x, y in batches:
            _step(model, x, y)
    return f"rank {rank} trained its {len(batches)} batches" + (" under Join, no hang" if fixed else "")


def _with_unused() -> nn.Module:
    model = _net()
    # A parameter forward never uses (a second head, a frozen-in-practice branch): no gradient for it.
    model.register_parameter("head_b", nn.Parameter(torch.zeros(2)))
    return model


@mode
def unused_parameters(pg, rank, world, fixed):
    model = DDP(_with_unused(), process_group=pg, find_unused_parameters=fixed)
    for x, y in _batches(2):  # without the fix the error surfaces in the SECOND forward
        _step(model, x, y)
    return "find_unused_parameters=True: 2 steps done" if fixed else "2 steps done"


@mode
def different_models(pg, rank, world, fixed):
    width = 8 if rank == 0 or fixed else 6  # e.g. a width read from a rank-local config file
    model = DDP(_net(width), process_group=pg)
    return f"same model on every rank: DDP built ({sum(p.numel() for p in model.parameters())} parameters)"


def _param_sums(model: nn.Module, pg) -> list[float]:
    s = torch.tensor([float(sum(p.detach().sum() for p in model.parameters()))])
    out = [torch.zeros(1) for _ in range(dist.get_world_size(pg))]
    dist.all_gather(out, s, group=pg)
    return [round(t.item(), 4) for t in out]


@mode
def different_seeds(pg, rank, world, fixed):
    sums = _param_sums(_net(seed=0 if fixed else rank), pg)  # torch.manual_seed(rank) before the model
    same = len(set(sums)) == 1
    return (f"parameter sums per rank {sums}: " + ("identical replicas" if same else "the replicas differ"))


@mode
def no_sampler(pg, rank, world, fixed):
    from torch.utils.data import DataLoader, DistributedSampler

    data = list(range(16))
    # Without a sampler every rank reads the whole dataset: N identical copies of one worker's work.
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False) if fixed else None
    seen = [int(i) for b in DataLoader(data, batch_size=4, sampler=sampler) for i in b]
    out = [None] * world
    dist.all_gather_object(out, seen, group=pg)
    overlap = len(set(out[0]).intersection(*map(set, out[1:])))
    return f"rank {rank} saw {len(seen)} samples; samples seen by every rank: {overlap}"


@mode
def module_prefix(pg, rank, world, fixed):
    model = DDP(_net(), process_group=pg)
    state = model.module.state_dict() if fixed else model.state_dict()  # DDP's keys are "module.0.weight"
    res = _net().load_state_dict(state)  # a plain model expects "0.weight"
    return f"saved model.module.state_dict(), loaded into a plain model: {res}"


def _count_allreduces(no_sync: bool, pg, k: int = 4) -> int:
    calls = []

    def hook(state, bucket):  # a comm hook sees every gradient all-reduce DDP launches
        calls.append(1)
        t = bucket.buffer().div_(dist.get_world_size(pg))
        return dist.all_reduce(t, group=pg, async_op=True).get_future().then(lambda f: f.value()[0])

    model = DDP(_net(), process_group=pg)
    model.register_comm_hook(None, hook)
    for i, (x, y) in enumerate(_batches(k)):
        ctx = model.no_sync() if no_sync and i < k - 1 else contextlib.nullcontext()
        with ctx:  # inside no_sync gradients accumulate locally, nothing is sent
            _step(model, x, y)
    return len(calls)


@mode
def accumulation_without_no_sync(pg, rank, world, fixed):
    n = _count_allreduces(fixed, pg)
    return f"4 micro-batches per optimizer step -> {n} gradient all-reduce(s) per step" + (
        " (first 3 inside model.no_sync())" if fixed else "")


@mode
def rank_local_loss(pg, rank, world, fixed):
    x, y = _batches(1, seed=10 + rank)[0]  # each rank's own shard of the batch
    loss = F.mse_loss(_net()(x), y).detach()
    if not fixed:
        return f"rank {rank} prints loss {loss.item():.4f} as 'the' loss"
    dist.all_reduce(loss, group=pg)  # the fix: average over ranks before printing
    return f"all_reduce(loss) / world_size = {loss.item() / world:.4f} on every rank"


@mode
def syncbn_cpu(pg, rank, world, fixed):
    # convert_sync_batchnorm turns BatchNorm into SyncBatchNorm; on CPU keep plain BatchNorm
    # (statistics of this rank's batch only) or use GroupNorm, which needs no statistics across ranks.
    bn = nn.BatchNorm1d(4) if fixed else nn.SyncBatchNorm(4, process_group=pg)
    out = bn(torch.randn(8, 4))
    return f"{type(bn).__name__} on CPU: output {tuple(out.shape)}"


class _Pids(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return os.getpid()


@mode
def dataloader_oversubscription(pg, rank, world, fixed):
    from torch.utils.data import DataLoader

    cores = usable_cores()
    workers = max(0, cores // world - 1) if fixed else 2  # the fix: workers <= cores per rank - 1
    pids = {int(p) for b in DataLoader(_Pids(), batch_size=2, num_workers=workers) for p in b}
    n = torch.tensor([len(pids - {os.getpid()}) + 1])  # worker processes plus this rank's own
    dist.all_reduce(n, group=pg)
    return f"{world} ranks x (1 + {workers} DataLoader workers) = {int(n)} busy processes on {cores} CPU cores"
