"""Checkers for Exercises 4.1 (naive DDP) and 4.2 (bucketed, overlapped DDP) -- chapter 4.

* **notebook side** -- :func:`check_naive_ddp` and :func:`check_bucketed_ddp`
  ship the learner's function / class as source to real ranks through
  :func:`disttutor.checks.adapter.run_check` and return a ``CheckResult``;
* **rank side** -- this module is also a program
  (``python -m disttutor.checks.ddp --source F --name sync_gradients --exercise naive``):
  every rank trains :func:`tricky_model` (frozen parameters, a frozen bias in a
  submodule, tied weights, a parameter unused every other step, a buffer) with
  the shared loop (:func:`disttutor.data_parallel.train.train_step`) on its shard of each
  global batch, using the learner's code to average gradients, and after every
  step compares its parameters with the same model trained by the same loop on
  the full batch in one process. The first divergence is reported by step,
  parameter and rank.

For 4.2 the checker also watches ``dist.all_reduce``: it must be called
asynchronously *during* backward (that is the overlap) and once per bucket.
A mismatched collective order makes ranks wait on each other: the short
collective timeout turns that into an error message instead of a frozen cell.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch

from disttutor.contract.options import cli, opt
from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, run_check

from disttutor.checks.tolerances import DATA_PARALLEL_RTOL as RTOL  # why 1e-5: see tolerances.py
BUCKET_CAP = 600  # elements: splits tricky_model's trainable tensors into 5 buckets
COLLECTIVE_TIMEOUT_S = 10.0


def check_naive_ddp(fn: Callable | str, nproc: int = 2, steps: int = 3) -> CheckResult:
    """Exercise 4.1: ``fn(model)`` averages every ``p.grad`` over ranks after backward."""
    return run_check("4.1", "disttutor.checks.ddp", fn, function_name(fn, "sync_gradients"), nproc,
                     args={"exercise": "naive", "steps": steps}, timeout=JOB_TIMEOUT_S,
                     collective_timeout=COLLECTIVE_TIMEOUT_S)


def check_bucketed_ddp(cls: Callable | str, nproc: int = 2, steps: int = 3) -> CheckResult:
    """Exercise 4.2: ``cls(model, bucket_cap)``: hooks all-reduce buckets during backward; ``.finish()`` waits."""
    name = function_name(cls, "OverlappedDDP")
    return run_check("4.2", "disttutor.checks.ddp", cls, name, nproc,
                     args={"exercise": "bucketed", "steps": steps, "bucket_cap": BUCKET_CAP}, timeout=JOB_TIMEOUT_S,
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


def tricky_model(seed: int = 0):
    """The model the DDP checkers train: small, with every trap a real model has.

    * ``scale``: a frozen parameter (``requires_grad=False``): no gradient, no hook allowed;
    * ``block.lin.bias``: a bias frozen inside a submodule;
    * ``up.weight`` is ``down.weight``: tied weights, one parameter used by two layers
      (``parameters()`` yields it once; its gradient is the sum of both uses);
    * ``aux``: used only on every second forward -- in the other steps its ``.grad`` is None
      and its hooks never fire (torch's DDP needs ``find_unused_parameters=True`` for this);
    * ``shift``: a buffer (state that is not a parameter: never all-reduced as a gradient).
    """
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(32, 32)
            self.lin.bias.requires_grad_(False)

        def forward(self, h):
            return torch.relu(self.lin(h))

    class TrickyNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.aux = nn.Linear(16, 4)
            self.inp = nn.Linear(16, 32)
            self.block = Block()
            self.up, self.down = nn.Linear(32, 32), nn.Linear(32, 32)
            self.down.weight = self.up.weight
            self.head = nn.Linear(32, 4)
            self.scale = nn.Parameter(torch.full((4,), 1.5), requires_grad=False)
            self.register_buffer("shift", torch.linspace(-0.5, 0.5, 4))
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            h = self.block(torch.relu(self.inp(x)))
            h = torch.relu(self.down(torch.relu(self.up(h))))
            out = self.head(h) * self.scale + self.shift
            return out + self.aux(x) if self.calls % 2 == 0 else out

    torch.manual_seed(seed)
    return TrickyNet()


def _no_grad_note(model, unused_too: bool = True) -> str:
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    unused = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None] if unused_too else []
    parts = ([f"frozen (requires_grad=False): {', '.join(frozen)}"] if frozen else []) + (
        [f"unused in this step (grad is None): {', '.join(unused)}"] if unused else [])
    return "; ".join(parts)


def _train_and_compare(obj: Any, exercise: str, steps: int, bucket_cap: int) -> dict[str, Any]:
    from disttutor.rank import runtime
    from disttutor.scratch.buckets import plan_buckets
    from disttutor.data_parallel.train import TrainConfig, build_data, compare, global_batch, local_batch, make_optimizer, train_step

    ctx = runtime.context()
    cfg = TrainConfig(steps=steps)
    cfg.check_world(ctx.world_size)
    model, ref = tricky_model(cfg.seed).to(ctx.device), tricky_model(cfg.seed).to(ctx.device)
    opt, ref_opt = make_optimizer(cfg, model.parameters()), make_optimizer(cfg, ref.parameters())
    x, y = (t.to(ctx.device) for t in build_data(cfg))
    n_buckets = len(plan_buckets([p for p in model.parameters() if p.requires_grad], bucket_cap))
    try:
        wrapper = obj(model, bucket_cap) if exercise == "bucketed" else None
    except Exception as e:
        return {"passed": False, "problem": (
            f"{obj.__name__}(model, {bucket_cap}) raised {type(e).__name__}: {e} -- the checker's model has "
            f"{_no_grad_note(model, unused_too=False)}: hook and bucket only parameters with requires_grad")}
    with _Recorder() as rec:
        for step in range(steps):
            xg, yg = global_batch(cfg, x, y, step)
            first, mark = len(rec.calls), {}

            def before_step():  # the shared loop calls this after backward, before the optimizer step
                mark["end_of_backward"] = len(rec.calls)
                wrapper.finish() if wrapper is not None else obj(model)

            try:
                train_step(model, opt, *local_batch(xg, yg, ctx.rank, ctx.world_size), before_step)
            except Exception as e:
                note = _no_grad_note(model)
                return {"passed": False, "problem": (
                    f"step {step}: your code raised {type(e).__name__}: {e}"
                    + (f" -- in this step the model has parameters without a gradient ({note}): "
                       + ("skip them" if wrapper is None else "a bucket holding one never completes during "
                          "backward: launch it in finish(), with zeros in its place") if note else ""))}
            train_step(ref, ref_opt, xg, yg)  # the single-process reference: the same loop, the full batch
            calls = rec.calls[first:]
            for name, err in compare(model, ref):
                if not err <= RTOL:  # also catches NaN
                    return {"passed": False, "problem": (
                        f"after step {step}, parameter {name!r} differs from the single-process reference "
                        f"by {err:.3g} (relative; allowed {RTOL:g}). Did every gradient get all-reduced, "
                        f"and divided by the world size ({ctx.world_size}) exactly once?")}
            if not torch.equal(model.shift, ref.shift):
                return {"passed": False, "problem": f"after step {step}: the buffer 'shift' changed -- buffers "
                                                    "are not parameters, leave them alone"}
            if exercise == "bucketed":
                during = [c for c in calls[:mark.get("end_of_backward", 0)] if c["async"]]
                if not during:
                    return {"passed": False, "problem": (
                        f"step {step}: parameters are right, but no all_reduce(..., async_op=True) was launched "
                        "during backward -- launch each bucket from the gradient hook, so it overlaps.")}
                if len(calls) != n_buckets:
                    return {"passed": False, "problem": (
                        f"step {step}: expected one all_reduce per bucket ({n_buckets} buckets of the parameters "
                        f"that require grad), saw {len(calls)} -- flatten each bucket's gradients into one tensor "
                        "and reduce that; a bucket with an unused parameter is launched in finish().")}
    return {"passed": True, "collectives_per_step": len(rec.calls) / steps}


@dataclass(frozen=True)
class DDPCheckConfig(LearnerCode):
    exercise: Literal["naive", "bucketed"] = opt("naive", "which exercise: 4.1 naive, 4.2 bucketed")
    steps: int = opt(3, "training steps compared with the single-process reference")
    bucket_cap: int = opt(BUCKET_CAP, "elements per bucket (4.2)")

    def __post_init__(self):
        super().__post_init__()
        if self.steps < 1 or self.bucket_cap < 1:
            raise ValueError("--steps and --bucket-cap must be >= 1")


def run(cfg: DDPCheckConfig) -> None:
    from disttutor.rank import runtime
    from disttutor.checks.adapter import load_exercise

    with runtime.setup():
        runtime.report(**_train_and_compare(load_exercise(cfg.source, cfg.name), cfg.exercise, cfg.steps,
                                            cfg.bucket_cap))


main = cli(DDPCheckConfig, run)


if __name__ == "__main__":
    main()
