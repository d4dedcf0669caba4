"""The per-step traffic of ``nn.DataParallel`` versus DDP's ring all-reduce, on real ranks (chapter 3).

DataParallel is one process driving several GPUs. Without GPUs we cannot run it
for real, but we can run its *communication pattern* for real: rank 0 plays
device 0 (the one that holds the module, the batch and the labels), ranks
1..N-1 play the other devices, and every step trains the article's MLP on one
fixed batch exactly as DataParallel would:

    dp-*:  broadcast params 0 -> all ; scatter inputs from 0 ; forward ; gather outputs to 0 ;
           loss on 0 ; scatter output grads from 0 ; backward ; reduce (sum) grads to 0 ; step on 0
    ddp-ring: each rank forward/backward on its own shard ; ring all-reduce of grads ; step everywhere

Every byte is counted from the size of the tensor handed to a real gloo
send/recv/scatter/gather; the counts are compared with the textbook formulas in
:func:`disttutor.data_parallel.dataparallel.expected_bytes`. These are collectives between CPU
*processes*, not GPU peer copies: the byte counts carry over, the timings do not.

    disttutor run dp_traffic -n 4 -- --steps 3 --sizes 2 3 4   # N = 2, 3, 4 in one job
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from disttutor.workloads import data
from disttutor.workloads import models
from disttutor.rank import runtime
from disttutor.data_parallel.wire import Wire, chain_broadcast, chain_reduce, counted_ring_all_reduce, star_broadcast, star_reduce
from disttutor.data_parallel.dataparallel import PATTERNS
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt


# --------------------------------------------------------------------------- one training step each
@dataclass(frozen=True)
class TrafficConfig:
    steps: int = opt(3, "training steps per pattern and size")
    batch: int = opt(96, "global batch (divisible by 2, 3 and 4; the article's 64 is not divisible by 3)")
    d_in: int = opt(10, "input features")
    hidden: int = opt(100, "hidden units (10 -> 100 -> 10: the article's SimpleModel)")
    classes: int = opt(10, "classes")
    lr: float = opt(0.1, "SGD learning rate")
    pieces: int = opt(4, "pipeline depth of the chain broadcast/reduce")
    seed: int = opt(0, "seed of the data and the weights")
    patterns: tuple[str, ...] = opt(PATTERNS, f"communication patterns to measure, of {', '.join(PATTERNS)}")
    sizes: tuple[int, ...] = opt((), "device counts to measure in one job, e.g. 2 3 4 (subgroups 0..n-1; "
                                      "none: all ranks)")

    def __post_init__(self):
        require_positive(self, "steps", "batch", "d_in", "hidden", "classes", "pieces")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if any(n < 1 for n in self.sizes) or list(self.sizes) != sorted(set(self.sizes)):
            raise ValueError(f"sizes must be increasing and >= 1, got {self.sizes}")
        bad = [p for p in self.patterns if p not in PATTERNS]
        if bad or not self.patterns:
            raise ValueError(f"patterns must be a non-empty subset of {PATTERNS}, got {self.patterns}")


def dp_step(w: Wire, model, x, y, cfg: TrafficConfig, how: str) -> tuple[float, torch.Tensor]:
    """One DataParallel step; returns (loss, summed gradient) on rank 0, (nan, local grad) elsewhere."""
    params = list(model.parameters())
    flat = parameters_to_vector(params).detach()
    # replicate(): DataParallel re-broadcasts every parameter at *every* forward.
    star_broadcast(w, flat, "replicate") if how == "copy" else chain_broadcast(w, flat, "replicate", cfg.pieces)
    with torch.no_grad():
        vector_to_parameters(flat, params)  # on rank 0 a no-op: replica 0 shares the original's storage
    x_local = torch.empty(cfg.batch // w.world, cfg.d_in)
    w.scatter(x_local, x, "scatter inputs")
    out = model(x_local)
    full = w.gather(out.detach(), "gather outputs")
    loss, dout = None, None  # only rank 0 ever sees the loss
    if w.rank == 0:  # the loss needs every output and every label: only device 0 has both
        full.requires_grad_(True)
        l_full = F.cross_entropy(full, y)
        (dout,) = torch.autograd.grad(l_full, full)
        loss = l_full.item()
    d_local = torch.empty_like(out)
    w.scatter(d_local, dout, "scatter output grads")  # Gather.backward is a Scatter
    model.zero_grad()
    # == out.backward(d_local); a scalar backward avoids a slow first-call import (sympy) in torch.
    (out * d_local).sum().backward()
    g = parameters_to_vector([p.grad for p in params])
    # Broadcast.backward is ReduceAddCoalesced: a SUM onto device 0. No averaging is needed (or
    # correct): the loss above is already the mean over the whole batch.
    star_reduce(w, g, "reduce grads") if how == "copy" else chain_reduce(w, g, "reduce grads", cfg.pieces)
    return loss, g


def ddp_step(w: Wire, model, x, y, cfg: TrafficConfig) -> tuple[float, torch.Tensor]:
    """One DDP step: local shard, local loss, ring all-reduce, average, every rank steps."""
    shard = slice(w.rank * cfg.batch // w.world, (w.rank + 1) * cfg.batch // w.world)
    params = list(model.parameters())
    model.zero_grad()
    loss = F.cross_entropy(model(x[shard]), y[shard])  # each rank reads its own shard: no input traffic
    loss.backward()
    g = parameters_to_vector([p.grad for p in params])
    counted_ring_all_reduce(w, g)
    g /= w.world  # each local loss is a mean over B/N samples: the sum of N of them is N x too big
    return loss.item(), g


def sgd(model, g: torch.Tensor, lr: float) -> None:
    with torch.no_grad():
        flat = parameters_to_vector(model.parameters()) - lr * g
        vector_to_parameters(flat, model.parameters())


def run(cfg: TrafficConfig) -> None:
    with runtime.setup(backend="gloo") as ctx:  # the point is CPU ranks; gloo is the CPU backend
        sizes = cfg.sizes or (ctx.world_size,)
        for n in sizes:
            if n > ctx.world_size:
                raise ValueError(f"size {n} needs {n} ranks; this job has {ctx.world_size}")
            if cfg.batch % n:
                raise ValueError(f"batch {cfg.batch} is not divisible by {n} ranks: every rank must get an "
                                 "equal shard (DistributedSampler pads to the same end)")
        # One job, several "device counts": ranks 0..n-1 form a group of n. Every rank must create
        # every group (new_group is itself collective), even the groups it is not in.
        groups = {n: dist.new_group(list(range(n))) for n in sizes}
        x, y = data.classification(n=cfg.batch, d_in=cfg.d_in, classes=cfg.classes, seed=cfg.seed).tensors
        runs, done, total = {}, 0, len(sizes) * len(cfg.patterns) * cfg.steps
        for n in sizes:
            if ctx.rank < n:
                runs[str(n)] = {p: measure(cfg, p, Wire(ctx.rank, n, groups[n]), x, y) for p in cfg.patterns}
            done += len(cfg.patterns) * cfg.steps
            runtime.progress(done, total, desc=f"N={n}")
            dist.barrier()  # the ranks outside the group wait here, idle, for the next size
        n_params = sum(p.numel() for p in models.MLP(cfg.d_in, [cfg.hidden], cfg.classes).parameters())
        runtime.report(runs=runs, n_params=n_params, batch=cfg.batch, d_in=cfg.d_in, d_out=cfg.classes,
                       steps=cfg.steps)


def measure(cfg: TrafficConfig, pattern: str, w: Wire, x, y) -> dict:
    """Train ``cfg.steps`` steps with ``pattern`` on the ranks of ``w``; bytes per step, time, results."""
    model = models.seeded(models.MLP, cfg.seed, cfg.d_in, [cfg.hidden], cfg.classes)
    losses, check = [], {}
    dist.barrier(group=w.group)
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        if pattern == "ddp-ring":
            loss, g = ddp_step(w, model, x, y, cfg)
            sgd(model, g, cfg.lr)
        else:
            loss, g = dp_step(w, model, x, y, cfg, pattern.split("-")[1])
            if w.rank == 0:
                if step == 0:
                    check = grad_check(model, x, y, g, w.world)
                sgd(model, g, cfg.lr)  # the optimizer only ever updates device 0's module
        losses.append(loss)
    dist.barrier(group=w.group)
    return {"sent": sum(w.out.values()) // cfg.steps, "recv": sum(w.inn.values()) // cfg.steps,
            "sent_phases": {k: v // cfg.steps for k, v in w.out.items()},
            "recv_phases": {k: v // cfg.steps for k, v in w.inn.items()},
            "ms_per_step": (time.perf_counter() - t0) / cfg.steps * 1e3, "losses": losses,
            "params": models.param_summary(model), **check}


def grad_check(model, x, y, g_sum: torch.Tensor, world: int) -> dict[str, float]:
    """Rank 0, before its first update: the reduced gradient versus the full-batch gradient."""
    ref = copy.deepcopy(model)
    ref.zero_grad()
    F.cross_entropy(ref(x), y).backward()
    g_full = parameters_to_vector([p.grad for p in ref.parameters()])
    return {"sum_vs_full": float((g_sum - g_full).abs().max()),       # DataParallel: ~0
            "mean_vs_full": float((g_sum / world - g_full).abs().max()),  # the article's "average": wrong
            "grad_norm": float(g_full.norm())}


main = cli(TrafficConfig, run)  # the command line is derived from TrafficConfig's fields



if __name__ == "__main__":
    main()
