"""Gradient accumulation under DDP, with and without ``no_sync()`` (chapter 8, article §8.2).

One "epoch" of ``micro`` micro-batches is cut into optimiser steps of ``k`` micro-batches;
the last group may be shorter (``micro`` need not divide by ``k``): it is **stepped**, with
its loss divided by its own length, so no gradient spills into the next epoch.

For every ``k`` two fresh DDP replicas train the same epoch: one all-reduces after
*every* micro-batch (what the article's loop does under DDP), one wraps the first
``k-1`` backwards of each group in ``ddp.no_sync()``. Every rank also trains a
single-process reference that takes ONE step per group on the group's whole batch
(``k`` times larger): all three must agree. All-reduces are counted from the
communication hook (``default_hooks.allreduce_hook``, DDP's own arithmetic), not estimated::

    disttutor run accumulation -n 2 -- --ks 1 2 4
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from disttutor.data_parallel import perf
from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt
from disttutor.data_parallel.train import compare

# fp32, different summation order (k local means, then a rank average, versus one mean): the
# data-parallel tolerance (tolerances.py); a wrong scaling (forgetting /k) is off by >1e-1.
from disttutor.checks.tolerances import DATA_PARALLEL_RTOL as RTOL  # noqa: E402


@dataclass(frozen=True)
class AccumConfig:
    ks: tuple[int, ...] = opt((1, 2, 4), "micro-batches per optimiser step to try")
    micro: int = opt(18, "micro-batches in the epoch (need not divide by k)")
    micro_batch: int = opt(16, "GLOBAL samples per micro-batch (split over ranks)")
    lr: float = opt(0.05, "SGD learning rate")
    seed: int = opt(0, "model and data seed")

    def __post_init__(self):
        require_positive(self, "micro", "micro_batch")
        if not self.ks or any(isinstance(k, bool) or k < 1 for k in self.ks):
            raise ValueError(f"ks must be one or more integers >= 1, got {self.ks}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


def groups(n_micro: int, k: int) -> list[list[int]]:
    """``groups(10, 4) -> [[0,1,2,3], [4,5,6,7], [8,9]]``: the leftover group is kept, not dropped."""
    return [list(range(i, min(i + k, n_micro))) for i in range(0, n_micro, k)]


def train_epoch(cfg: AccumConfig, ctx, k: int, use_no_sync: bool, data, rec: perf.CommRecorder) -> dict:
    ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
    ddp = DDP(perf.model(cfg.seed).to(ctx.device), device_ids=ids)
    # The same all-reduce DDP does in C++, but through Python, so CommRecorder can count it.
    ddp.register_comm_hook(state=None, hook=default_hooks.allreduce_hook)
    opt_ = torch.optim.SGD(ddp.parameters(), lr=cfg.lr)
    ref = perf.model(cfg.seed).to(ctx.device)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=cfg.lr)
    x, y = data
    calls, times, sizes = [], [], []
    for group in groups(cfg.micro, k):
        mark, t0 = rec.mark(), time.perf_counter()
        opt_.zero_grad(set_to_none=True)
        for j, m in enumerate(group):
            xb, yb = perf.batch(x, y, m, cfg.micro_batch, ctx.rank, ctx.world_size)
            last = j == len(group) - 1
            # no_sync(): backward only accumulates into .grad; the LAST backward of the group
            # runs outside it and all-reduces the accumulated sum (one all-reduce per bucket).
            ctxm = ddp.no_sync() if (use_no_sync and not last) else contextlib.nullcontext()
            with ctxm:
                # / len(group): the mean over the group's samples (the leftover group is shorter).
                (F.mse_loss(ddp(xb), yb) / len(group)).backward()
        opt_.step()
        times.append(time.perf_counter() - t0)
        calls.append(rec.since(mark)[0])
        sizes.append(len(group))
        # Reference: one step on the whole group's global batch (k times larger), one process.
        idx = torch.cat([(torch.arange(cfg.micro_batch) + m * cfg.micro_batch) % len(x) for m in group])
        ref_opt.zero_grad(set_to_none=True)
        F.mse_loss(ref(x[idx]), y[idx]).backward()
        ref_opt.step()
    err = max(e for _, e in compare(ddp.module, ref))
    opt_.zero_grad(set_to_none=True)
    full = [t for t, s in zip(times, sizes) if s == k][1:] or times  # full groups, first one is warm-up
    return dict(k=k, no_sync=use_no_sync, group_sizes=sizes, allreduces=calls, max_rel_err=err,
                ms_per_step=perf.median_ms(full), grads_left=sum(p.grad is not None for p in ddp.parameters()))


def run(cfg: AccumConfig) -> None:
    with runtime.setup() as ctx:
        data = tuple(t.to(ctx.device) for t in perf.dataset(cfg.micro * cfg.micro_batch, cfg.seed + 1))
        rows = []
        with perf.CommRecorder() as rec:
            for i, k in enumerate(cfg.ks):
                for mode in (False, True):
                    rows.append(train_epoch(cfg, ctx, k, mode, data, rec))
                    runtime.progress(len(rows), 2 * len(cfg.ks), desc="accumulation", k=k)
        bad = [r for r in rows if not r["max_rel_err"] <= RTOL]
        runtime.report(rows=rows, rtol=RTOL, all_match_reference=not bad)


main = cli(AccumConfig, run)


if __name__ == "__main__":
    main()
