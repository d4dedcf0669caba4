"""Data-parallel training with a wrapper chosen by flag: torch's DDP or one built from scratch (chapter 4).

The same loop (:mod:`disttutor.data_parallel.train`) runs under each wrapper of ``--wrappers``
in turn: ``torch`` (``DistributedDataParallel``), ``naive`` (all-reduce every
gradient after backward), ``bucketed`` (async bucket all-reduces launched from
gradient hooks during backward). Each rank reports ``runs[wrapper]``. Modes:

* ``--reference``: step a single-process model on the full global batch in
  lockstep and report, after every step, how far each rank's parameters are from it;
* ``--trace``: record, for one step, when each gradient became ready and when
  each bucket's all-reduce was launched (overlap made visible);
* ``--time``: interleave timed rounds of several wrappers on identical models.

    disttutor run ddp_scratch -n 2 -- --wrappers torch bucketed --reference --trace
    disttutor run ddp_scratch -n 4 -- --time --wrappers torch naive bucketed
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from disttutor.rank import runtime
from disttutor.contract.config import require_non_negative, require_positive
from disttutor.contract.options import cli, opt
from disttutor.scratch.ddp import BucketedDDP, NaiveDDP
from disttutor.data_parallel.train import (Reference, TrainConfig, build_data, build_model, compare, global_batch, local_batch,
                             make_optimizer, train_step)

WRAPPERS = ("torch", "naive", "bucketed")


@dataclass(frozen=True)
class ScratchConfig:
    # The shared loop's model, data and optimiser: its fields are this program's flags too
    # (--samples, --batch, --hidden, ...), written once, in disttutor.data_parallel.train.
    train: TrainConfig = field(default_factory=TrainConfig)
    bucket_cap: int = opt(600, "elements per bucket (torch DDP: converted to bucket_cap_mb)")
    reference: bool = opt(False, "compare every rank with a single-process model after each step")
    trace: bool = opt(False, "record when gradients became ready and buckets were launched")
    time: bool = opt(False, "time the wrappers in interleaved rounds")
    wrappers: tuple[str, ...] = opt(WRAPPERS, f"run (or time) these one after the other, of {', '.join(WRAPPERS)}")
    rounds: int = opt(3, "timed rounds per wrapper, interleaved to share the machine's noise")
    warmup: int = opt(2, "untimed steps before each timed round")

    def __post_init__(self):
        if not self.wrappers:
            raise ValueError(f"wrappers: name at least one of {WRAPPERS}")
        bad = [w for w in self.wrappers if w not in WRAPPERS]
        if bad:
            raise ValueError(f"unknown wrapper(s) {bad}: choose from {WRAPPERS}")
        require_positive(self, "bucket_cap", "rounds")
        require_non_negative(self, "warmup")


def wrap(model, kind: str, ctx: runtime.Context, bucket_cap: int, trace: list | None = None):
    """Returns ``(wrapped_model, before_step)`` for the chosen data-parallel wrapper."""
    if kind == "torch":
        ddp = DDP(model, device_ids=[ctx.local_rank] if ctx.device.type == "cuda" else None,
                  bucket_cap_mb=bucket_cap * 4 / 2**20)  # fp32: 4 bytes per element
        if trace is not None:
            _trace_torch(ddp, trace)
        return ddp, None  # torch's DDP has finished averaging when backward() returns
    w = NaiveDDP(model) if kind == "naive" else BucketedDDP(model, bucket_cap, trace=trace)
    return w, w.finish


def _trace_torch(ddp: DDP, trace: list) -> None:
    """Record gradient-ready events and torch DDP's bucket launches (through a comm hook)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    for name, p in ddp.module.named_parameters():
        p.register_post_accumulate_grad_hook(lambda _p, name=name: trace.append(("grad", name)))

    def hook(state, bucket):
        trace.append(("launch", bucket.index()))
        return allreduce_hook(None, bucket)  # the default: async all-reduce, then divide by world size

    ddp.register_comm_hook(None, hook)


def train(cfg: ScratchConfig, ctx: runtime.Context, kind: str) -> dict:
    tc = cfg.train
    model = build_model(tc).to(ctx.device)
    if ctx.rank != 0:  # different weights on purpose: the wrapper must broadcast rank 0's
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * ctx.rank)
    trace: list | None = [] if cfg.trace else None
    wrapped, before_step = wrap(model, kind, ctx, cfg.bucket_cap, trace)
    opt = make_optimizer(tc, wrapped.parameters())
    ref = Reference(tc, ctx.device) if cfg.reference else None
    x, y = (t.to(ctx.device) for t in build_data(tc))
    errors, worst, traces = [], [], []
    for step in range(tc.steps):
        if trace is not None:
            trace.clear()
        loss = train_step(wrapped, opt, *local_batch(*global_batch(tc, x, y, step), ctx.rank, ctx.world_size),
                          before_step)
        if trace is not None:
            traces.append(list(trace))
        if ref is not None:
            ref.step(step)
            per_param = compare(wrapped, ref.model)
            name, err = max(per_param, key=lambda t: t[1])
            errors.append(err)
            worst.append(name)
        runtime.progress(step + 1, tc.steps, desc=f"{kind} on {ctx.world_size} ranks", loss=loss)
    out = {"steps": tc.steps, "max_rel_err": errors, "worst_param": worst}
    if isinstance(wrapped, BucketedDDP):
        names = {id(p): n for n, p in model.named_parameters()}
        out["buckets"] = [[names[id(p)] for p in b] for b in wrapped.buckets]  # in the order they fill
    if trace is not None:
        out["trace"] = traces[-1]  # the last step: torch DDP rebuilds its buckets after step 1
    return out


def time_wrappers(cfg: ScratchConfig, ctx: runtime.Context) -> None:
    """Median step time of each wrapper, in interleaved rounds on identical models and data."""
    tc = cfg.train
    x, y = (t.to(ctx.device) for t in build_data(tc))
    runs = {}
    for kind in cfg.wrappers:
        wrapped, before = wrap(build_model(tc).to(ctx.device), kind, ctx, cfg.bucket_cap)
        runs[kind] = (wrapped, make_optimizer(tc, wrapped.parameters()), before)
    samples: dict[str, list[float]] = {k: [] for k in cfg.wrappers}
    total, done = cfg.rounds * len(cfg.wrappers), 0
    for rnd in range(cfg.rounds):
        for kind, (wrapped, opt, before) in runs.items():
            for step in range(cfg.warmup + tc.steps):
                xb, yb = local_batch(*global_batch(tc, x, y, step), ctx.rank, ctx.world_size)
                if step == cfg.warmup:
                    t0 = runtime.barrier_time()  # all ranks start the timed block together
                train_step(wrapped, opt, xb, yb, before)
            dist.barrier()  # the slowest rank ends the block: that is the step time everyone sees
            samples[kind].append((time.perf_counter() - t0) / tc.steps * 1e3)
            done += 1
            runtime.progress(done, total, desc=f"timing on {ctx.world_size} ranks")
    runtime.report(step_ms={k: statistics.median(v) for k, v in samples.items()}, samples_ms=samples,
                   params=sum(p.numel() for p in build_model(tc).parameters()),
                   local_batch=tc.batch // ctx.world_size)


def run(cfg: ScratchConfig) -> None:
    with runtime.setup() as ctx:
        cfg.train.check_world(ctx.world_size)
        if cfg.time:
            time_wrappers(cfg, ctx)
        else:
            runtime.report(runs={kind: train(cfg, ctx, kind) for kind in cfg.wrappers})


main = cli(ScratchConfig, run)  # flags: ScratchConfig's fields and its nested TrainConfig's


if __name__ == "__main__":
    main()
