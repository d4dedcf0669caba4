"""Checkers for Exercises 8.1 (``no_sync`` for the from-scratch DDP) and 8.3 (a compression hook) -- chapter 8.

* 8.1 -- :func:`check_no_sync` runs the learner's ``NoSyncDDP`` (a subclass of chapter 4's
  :class:`disttutor.scratch.ddp.BucketedDDP`) on real ranks beside torch's DDP: ``k``
  micro-batches per optimiser step, the first ``k-1`` inside ``no_sync()``. It counts the
  ``dist.all_reduce`` calls per optimiser step (must be one per bucket, not ``k`` per bucket)
  and compares parameters with torch's DDP after every optimiser step.
* 8.3 -- :func:`check_compress_hook` runs the learner's hook through
  :mod:`disttutor.programs.comm_hooks` as a real DDP comm hook and checks its bytes per step
  and its loss against the fp32 all-reduce.

This module is also the rank-side program for 8.1
(``python -m disttutor.checks.perf --source F --name NoSyncDDP``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from disttutor.contract.options import cli, opt
from disttutor.checks.adapter import CheckResult, LearnerCode, function_name, run_check, to_source

# Torch's DDP and the scratch wrapper sum the same fp32 numbers in different orders (the
# data-parallel tolerance, see tolerances.py); all-reducing k times (k x the gradient averaged
# k times is still right!) is caught by the COUNT, and a missing sync by >1e-2.
from disttutor.checks.tolerances import DATA_PARALLEL_RTOL as RTOL  # noqa: E402
BUCKET_CAP = 2500  # elements: splits the chapter's 32-64-64-8 MLP into 3 buckets
COLLECTIVE_TIMEOUT_S = 10.0
# Learner code for 8.1 extends chapter 4's wrapper; these names are in scope for it.
PRELUDE_8_1 = "import contextlib\nfrom disttutor.scratch.ddp import BucketedDDP\n"


def check_no_sync(cls: Callable | str, nproc: int = 2, k: int = 4, steps: int = 2) -> CheckResult:
    """Exercise 8.1: ``cls(model, bucket_cap)`` has ``no_sync()``; inside it backward sends nothing."""
    src = to_source(cls)
    return run_check("8.1", "disttutor.checks.perf", PRELUDE_8_1 + src, function_name(cls, "NoSyncDDP"), nproc,
                     args={"k": k, "steps": steps}, timeout=150, collective_timeout=COLLECTIVE_TIMEOUT_S,
                     hint="a rank waits in an all-reduce the others never start: did some ranks skip a bucket?")


def check_compress_hook(fn: Callable | str, nproc: int = 2, steps: int = 30) -> CheckResult:
    """Exercise 8.3: ``fn(state, bucket) -> Future``: averaged gradients, fewer bytes, same convergence."""
    return run_check("8.3", "disttutor.programs.comm_hooks", fn, function_name(fn, "fp16_compress_hook"), nproc,
                     args={"hooks": ("learner",), "steps": steps}, timeout=150,
                     collective_timeout=COLLECTIVE_TIMEOUT_S,
                     hint="a hook's future never completed: return the all-reduce's future (or one chained on it)")


@dataclass(frozen=True)
class NoSyncCheck(LearnerCode):
    k: int = opt(4, "micro-batches per optimiser step")
    steps: int = opt(2, "optimiser steps")
    bucket_cap: int = opt(BUCKET_CAP, "bucket size in elements")
    micro_batch: int = opt(8, "GLOBAL samples per micro-batch")

    def __post_init__(self):
        super().__post_init__()
        for f in ("k", "steps", "bucket_cap", "micro_batch"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f} must be >= 1")


def _problem(step: int, micro: int | None, text: str) -> dict[str, Any]:
    where = f"optimiser step {step}" + (f", micro-batch {micro}" if micro is not None else "")
    return {"passed": False, "problem": f"{where}: {text}"}


def _train_and_compare(cls: Any, cfg: NoSyncCheck) -> dict[str, Any]:
    import contextlib

    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from disttutor.data_parallel import perf
    from disttutor.rank import runtime
    from disttutor.scratch.buckets import plan_buckets
    from disttutor.data_parallel.train import compare

    ctx = runtime.context()
    mine, theirs = perf.model().to(ctx.device), perf.model().to(ctx.device)
    n_buckets = len(plan_buckets(list(mine.parameters()), cfg.bucket_cap))
    wrapper = cls(mine, cfg.bucket_cap)
    if not hasattr(wrapper, "no_sync"):
        return {"passed": False, "problem": f"{cfg.name} has no no_sync() method"}
    ddp = DDP(theirs, device_ids=[ctx.local_rank] if ctx.device.type == "cuda" else None)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (mine, theirs)]
    x, y = (t.to(ctx.device) for t in perf.dataset(cfg.k * cfg.steps * cfg.micro_batch))
    counts = []
    with perf.CommRecorder() as rec:
        for step in range(cfg.steps):
            for o in opts:
                o.zero_grad(set_to_none=True)
            mark = rec.mark()
            for j in range(cfg.k):
                xb, yb = perf.batch(x, y, step * cfg.k + j, cfg.micro_batch, ctx.rank, ctx.world_size)
                last = j == cfg.k - 1
                before = rec.mark()
                with (contextlib.nullcontext() if last else wrapper.no_sync()):
                    (F.mse_loss(wrapper(xb), yb) / cfg.k).backward()
                if not last and rec.mark() != before:
                    return _problem(step, j, f"{rec.mark() - before} all_reduce call(s) inside no_sync(): "
                                             "backward must only accumulate .grad there, and send nothing")
                with (contextlib.nullcontext() if last else ddp.no_sync()):  # torch's DDP, same schedule
                    (F.mse_loss(ddp(xb), yb) / cfg.k).backward()
            try:
                wrapper.finish()
            except RuntimeError as e:
                return _problem(step, None, f"finish() failed after the synchronised backward: {e}")
            n = rec.since(mark)[0]
            counts.append(n)
            if n != n_buckets:
                return _problem(step, None, (
                    f"{n} all_reduce calls for {cfg.k} micro-batches; one per bucket ({n_buckets}) is right: "
                    "only the last backward of the step may communicate"))
            for o in opts:
                o.step()
            for name, err in compare(mine, theirs):
                if not err <= RTOL:
                    return _problem(step, None, (
                        f"parameter {name!r} differs from torch's DDP (with no_sync) by {err:.3g} relative "
                        f"(allowed {RTOL:g}): the synchronised backward must average the ACCUMULATED gradient"))
    return {"passed": True, "allreduces_per_step": counts, "buckets": n_buckets}


def _run(cfg: NoSyncCheck) -> None:
    from disttutor.rank import runtime
    from disttutor.checks.adapter import load_exercise

    with runtime.setup():
        runtime.report(**_train_and_compare(load_exercise(cfg.source, cfg.name), cfg))


main = cli(NoSyncCheck, _run)


if __name__ == "__main__":
    main()
