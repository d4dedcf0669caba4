"""Checkers for Exercises 4.1 (naive DDP) and 4.2 (bucketed, overlapped DDP) -- chapter 4.

* **notebook side** -- :func:`check_naive_ddp` and :func:`check_bucketed_ddp`
  ship the learner's function / class as source to real ranks through
  :func:`disttutor.checks.adapter.run_check` and return a ``CheckResult``;
* **rank side** -- this module is also a program
  (``python -m disttutor.checks.ddp --source F --name sync_gradients --exercise naive``):
  every rank trains the shared small model (:mod:`disttutor.train`) on its
  shard of each global batch, using the learner's code to average gradients,
  and after every step compares its parameters with a single-process model
  trained on the full batch. The first divergence is reported by step,
  parameter and rank.

For 4.2 the checker also watches ``dist.all_reduce``: it must be called
asynchronously *during* backward (that is the overlap) and once per bucket.
A mismatched collective order makes ranks wait on each other: the short
collective timeout turns that into an error message instead of a frozen cell.
"""
from __future__ import annotations

import argparse
from typing import Any, Callable

from .adapter import CheckResult, function_name, run_check

from .tolerances import DATA_PARALLEL_RTOL as RTOL  # why 1e-5: see tolerances.py
BUCKET_CAP = 600  # elements: splits the 6 tensors of the default MLP into 3 buckets
COLLECTIVE_TIMEOUT_S = 10.0


def check_naive_ddp(fn: Callable | str, nproc: int = 2, steps: int = 3) -> CheckResult:
    """Exercise 4.1: ``fn(model)`` averages every ``p.grad`` over ranks after backward."""
    return run_check("4.1", "disttutor.checks.ddp", fn, function_name(fn, "sync_gradients"), nproc,
                     args={"exercise": "naive", "steps": steps}, timeout=90,
                     collective_timeout=COLLECTIVE_TIMEOUT_S)


def check_bucketed_ddp(cls: Callable | str, nproc: int = 2, steps: int = 3) -> CheckResult:
    """Exercise 4.2: ``cls(model, bucket_cap)``: hooks all-reduce buckets during backward; ``.finish()`` waits."""
    name = function_name(cls, "OverlappedDDP")
    return run_check("4.2", "disttutor.checks.ddp", cls, name, nproc,
                     args={"exercise": "bucketed", "steps": steps, "bucket_cap": BUCKET_CAP}, timeout=90,
                     collective_timeout=COLLECTIVE_TIMEOUT_S)


class _Recorder:
    """Wraps ``torch.distributed.all_reduce`` to note each call: size, async or not, during backward or not."""

    def __init__(self):
        import torch.distributed as dist

        self.dist, self.original, self.calls, self.in_backward = dist, dist.all_reduce, [], False

    def __enter__(self):
        def all_reduce(tensor, *args, **kwargs):
            async_op = kwargs.get("async_op", args[2] if len(args) > 2 else False)
            self.calls.append({"numel": tensor.numel(), "async": bool(async_op), "backward": self.in_backward})
            return self.original(tensor, *args, **kwargs)

        self.dist.all_reduce = all_reduce  # learner code looks it up as dist.all_reduce at call time
        return self

    def __exit__(self, *exc):
        self.dist.all_reduce = self.original


def _train_and_compare(obj: Any, exercise: str, steps: int, bucket_cap: int) -> dict[str, Any]:
    import torch.nn.functional as F

    from .. import runtime
    from ..scratch.buckets import plan_buckets
    from ..train import Reference, TrainConfig, build_data, build_model, compare, global_batch, local_batch
    from ..train import make_optimizer

    ctx = runtime.context()
    cfg = TrainConfig(steps=steps)
    cfg.check_world(ctx.world_size)
    model = build_model(cfg).to(ctx.device)  # seeded: the same start on every rank and in the reference
    opt = make_optimizer(cfg, model.parameters())
    ref = Reference(cfg, ctx.device)
    x, y = (t.to(ctx.device) for t in build_data(cfg))
    n_buckets = len(plan_buckets(list(model.parameters()), bucket_cap))
    wrapper = obj(model, bucket_cap) if exercise == "bucketed" else None
    with _Recorder() as rec:
        for step in range(steps):
            xb, yb = local_batch(*global_batch(cfg, x, y, step), ctx.rank, ctx.world_size)
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(xb), yb)
            rec.in_backward, first = True, len(rec.calls)
            loss.backward()
            rec.in_backward = False
            if wrapper is not None:
                wrapper.finish()
            else:
                obj(model)
            opt.step()
            ref.step(step)
            calls = rec.calls[first:]
            for name, err in compare(model, ref.model):
                if not err <= RTOL:  # also catches NaN
                    return {"passed": False, "problem": (
                        f"after step {step}, parameter {name!r} differs from the single-process reference "
                        f"by {err:.3g} (relative; allowed {RTOL:g}). Did every gradient get all-reduced, "
                        f"and divided by the world size ({ctx.world_size}) exactly once?")}
            if exercise == "bucketed":
                during = [c for c in calls if c["backward"] and c["async"]]
                if not during:
                    return {"passed": False, "problem": (
                        f"step {step}: parameters are right, but no all_reduce(..., async_op=True) was launched "
                        "during backward -- launch each bucket from the gradient hook, so it overlaps.")}
                if len(calls) != n_buckets:
                    return {"passed": False, "problem": (
                        f"step {step}: expected one all_reduce per bucket ({n_buckets} buckets), saw {len(calls)} "
                        "-- flatten each bucket's gradients into one tensor and reduce that.")}
    return {"passed": True, "collectives_per_step": len(rec.calls) / steps}


def main(argv: list[str] | None = None) -> None:
    from .. import runtime
    from .adapter import load_exercise

    p = argparse.ArgumentParser(prog="disttutor.checks.ddp", description="checker for Exercises 4.1 and 4.2")
    p.add_argument("--source", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--exercise", choices=("naive", "bucketed"), required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--bucket-cap", type=int, default=BUCKET_CAP)
    a = p.parse_args(argv)
    if a.steps < 1:
        raise SystemExit("--steps must be >= 1")
    with runtime.setup():
        runtime.report(**_train_and_compare(load_exercise(a.source, a.name), a.exercise, a.steps, a.bucket_cap))


if __name__ == "__main__":
    main()
