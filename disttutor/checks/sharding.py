"""Checkers for Exercises 11.1 (ZeRO-1 from scratch) and 11.2 (FSDP from scratch) -- chapter 11.

Both train :func:`disttutor.sharding.model.tiny_lm` (tied embeddings, a frozen
positional embedding, LayerNorm) on real ranks with the learner's class and,
after every step, compare with the same model trained in one process on the
full batch (:mod:`disttutor.sharding.model`'s ``update_diff``: the whole model's
update as one vector). They also add up, over the ranks, what is stored:

* 11.1 ``ZeroOne(params, torch.optim.AdamW, lr=..., weight_decay=...)``: gradients are
  averaged by the checker (as DDP would); over all ranks the optimiser state must be
  stored exactly once (8 bytes per trainable parameter for AdamW), not once per rank;
* 11.2 ``FSDP(module, compute_dtype)``: trained with SGD first (AdamW would hide a gradient
  that was summed instead of averaged: Adam divides by the gradient's own size), then with
  AdamW in fp32 and in bf16 (the reference applies the same casts); trainable parameters
  must be stored once over all ranks (plus padding), their full copies freed, and ``full_parameters()`` must return
  every parameter by name.

This module is also the rank-side program
(``python -m disttutor.checks.sharding --source F --name ZeroOne --exercise zero1``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

from disttutor.contract.options import cli, opt
from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, run_check

#: fp32 sharded vs one process: different summation orders, a few ulps per step; the whole
#: update then differs by ~1e-6 relative (measured 4e-7 on 4 ranks) -- 1e-4 is 100x headroom,
#: while a missing broadcast, average or gradient is off by more than 1e-1.
FP32_RTOL = 1e-4
#: bf16 compute and communication vs the same casts in one process: bf16 keeps 8 mantissa bits
#: (0.4%), reduced in another order, and Adam can flip the sign of an update whose gradient is
#: near zero; measured 0.02 over 3 steps on 2 and 4 ranks. 0.1 keeps 5x headroom; mistakes are ~1.
BF16_RTOL = 0.1
COLLECTIVE_TIMEOUT_S = 20.0
LR = 1e-2


def check_zero1(cls: Callable | str, nproc: int = 2, steps: int = 3) -> CheckResult:
    """Exercise 11.1: ``cls(params, optimizer_class, **kw)`` shards optimiser state, broadcasts parameters."""
    return run_check("11.1", "disttutor.checks.sharding", cls, function_name(cls, "ZeroOne"), nproc,
                     args={"exercise": "zero1", "steps": steps}, timeout=JOB_TIMEOUT_S,
                     collective_timeout=COLLECTIVE_TIMEOUT_S,
                     hint="ranks called broadcast a different number of times: every rank must broadcast "
                          "every parameter, in the same order")


def check_fsdp(cls: Callable | str, nproc: int = 2, steps: int = 3) -> CheckResult:
    """Exercise 11.2: ``cls(module, compute_dtype)``: sharded master weights, all-gather, reduce-scatter."""
    return run_check("11.2", "disttutor.checks.sharding", cls, function_name(cls, "FSDP"), nproc,
                     args={"exercise": "fsdp", "steps": steps}, timeout=JOB_TIMEOUT_S,
                     collective_timeout=COLLECTIVE_TIMEOUT_S,
                     hint="ranks disagree on the collectives: all-gather in forward and reduce-scatter in "
                          "backward, on every rank, with equal shard sizes")


@dataclass(frozen=True)
class ShardingCheck(LearnerCode):
    exercise: Literal["zero1", "fsdp"] = opt("zero1", "which exercise")
    steps: int = opt(3, "optimiser steps per phase")

    def __post_init__(self):
        super().__post_init__()
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")


def _fail(text: str) -> dict[str, Any]:
    return {"passed": False, "problem": text}


def _sum_over_ranks(n: int) -> int:
    import torch
    import torch.distributed as dist

    t = torch.tensor([n], dtype=torch.float64)
    dist.all_reduce(t)
    return int(t.item())


def _phase(step_fn, full_params, cfg, ctx, opt_name: str, dtype=None) -> dict[str, Any] | None:
    """Train learner and reference ``cfg.steps`` steps; None when every step matched."""
    import torch

    from disttutor.sharding import model as S

    ref, start = S.tiny_lm(), S.tiny_lm()
    ref_opt = (S.adamw(ref.parameters(), LR) if opt_name == "AdamW"
               else torch.optim.SGD(ref.parameters(), lr=0.1))
    x, y = S.data()
    tol = BF16_RTOL if dtype is not None else FP32_RTOL
    what = f"{opt_name}{', compute dtype ' + str(dtype).split('.')[-1] if dtype is not None else ''}"
    for step in range(cfg.steps):
        try:
            step_fn(*S.batch(x, y, step, 8, ctx.rank, ctx.world_size))
            mine = full_params()
        except Exception as e:
            return _fail(f"{what}, step {step}: your code raised {type(e).__name__}: {e} -- the model has a "
                         "frozen parameter (pos.weight: requires_grad=False, grad None) and a tied one "
                         "(head.weight is emb.weight)")
        xb, yb = S.batch(x, y, step, 8)
        ref_opt.zero_grad(set_to_none=True)
        S.loss_fn(S.cast_forward(ref, xb, dtype), yb).backward()
        ref_opt.step()
        missing = [n for n, _ in ref.named_parameters() if n not in mine]
        if missing:
            return _fail(f"the full parameters have no {', '.join(missing)} (names as in the original module)")
        if not torch.equal(mine["pos.weight"].detach().float(), start.pos.weight):
            return _fail(f"{what}, step {step}: the frozen pos.weight moved -- a parameter with "
                         "requires_grad=False gets no gradient, no optimiser state and no update "
                         "(AdamW's weight decay moves anything that has a gradient, even a zero one)")
        err = S.update_diff(mine, ref, start)
        if not err <= tol:  # also catches NaN
            return _fail(f"{what}, step {step}: the model's update differs from one process on the full batch "
                         f"by {err:.3g} (relative; allowed {tol:g}; worst parameter "
                         f"{S.max_rel_diff(mine, ref)[0]!r}). Averaged gradients, every parameter updated "
                         "on every rank?")
    return None


def _zero1(cls, cfg: ShardingCheck, ctx) -> dict[str, Any]:
    import torch

    from disttutor.sharding import model as S
    from disttutor.scratch.buckets import allreduce_mean_

    model = S.tiny_lm()
    try:
        opt_ = cls(model.parameters(), torch.optim.AdamW, lr=LR, weight_decay=0.1)
    except Exception as e:
        return _fail(f"{cfg.name}(params, torch.optim.AdamW, lr=..., weight_decay=...) raised "
                     f"{type(e).__name__}: {e}")
    if not isinstance(opt_, torch.optim.Optimizer):
        return _fail(f"{cfg.name} must be a torch.optim.Optimizer subclass (schedulers and loops expect one)")

    def step(xb, yb):
        opt_.zero_grad(set_to_none=True)
        S.loss_fn(model(xb), yb).backward()
        allreduce_mean_([p.grad for p in model.parameters() if p.grad is not None])  # what DDP does
        opt_.step()

    bad = _phase(step, lambda: dict(model.named_parameters()), cfg, ctx, "AdamW")
    if bad:
        return bad
    inner = [o for o in vars(opt_).values() if isinstance(o, torch.optim.Optimizer)]
    mine = S.state_bytes(opt_, *inner)
    total, full = _sum_over_ranks(mine), S.counts(model)[1] * 8
    if total != full:
        return _fail(f"over all {ctx.world_size} ranks the optimiser state takes {total} bytes; stored once it "
                     f"is {full} (AdamW: 8 bytes per trainable parameter). This rank holds {mine}: each rank "
                     "should keep state only for the parameters it owns")
    return {"passed": True, "state_bytes": mine, "state_bytes_unsharded": full}


def _fsdp(cls, cfg: ShardingCheck, ctx) -> dict[str, Any]:
    import torch

    from disttutor.sharding import model as S

    n_trainable = S.counts(S.tiny_lm())[1]
    for opt_name, dtype in (("SGD", None), ("AdamW", None), ("AdamW", torch.bfloat16)):
        try:
            wrapper = cls(S.tiny_lm(), dtype)
        except Exception as e:
            return _fail(f"{cfg.name}(module, {dtype}) raised {type(e).__name__}: {e}")
        trainable = [p for p in wrapper.parameters() if p.requires_grad]
        opt_ = (S.adamw(trainable, LR) if opt_name == "AdamW" else torch.optim.SGD(trainable, lr=0.1))

        def step(xb, yb):
            opt_.zero_grad(set_to_none=True)
            S.loss_fn(wrapper(xb), yb).backward()
            opt_.step()

        stored = _sum_over_ranks(S.nbytes(trainable))
        limit = (n_trainable + ctx.world_size * ctx.world_size) * 4  # + padding to equal shards
        if not stored <= limit:
            n_all = S.counts(S.tiny_lm())[0]
            frozen = n_all * 4 <= stored <= (n_all + ctx.world_size ** 2) * 4  # sharded once, frozen included
            return _fail(f"over all ranks the trainable parameters take {stored} bytes; stored once (plus "
                         f"padding) they take at most {limit}" + (
                             ": the frozen pos.weight is in your shard -- it has no gradient and no optimiser "
                             "state, keep it out (weight decay would move it)" if frozen else
                             ": each rank should keep only its shard"))
        held = _sum_over_ranks(S.nbytes(wrapper.parameters()))  # trainable or not: what stays in memory
        frozen = (S.counts(S.tiny_lm())[0] - n_trainable) * 4
        if not held <= limit + ctx.world_size * frozen:  # the shards, plus the frozen weight whole on every rank
            return _fail(f"over all ranks the module's parameters take {held} bytes, at most {limit} for the "
                         f"shards plus {ctx.world_size} x {frozen} for the frozen pos.weight: the full copies of "
                         "the trainable parameters are still stored -- free them once the shard holds their "
                         "values (p.data = an empty tensor; requires_grad off is not enough)")
        bad = _phase(step, wrapper.full_parameters, cfg, ctx, opt_name, dtype)
        if bad:
            return bad
    return {"passed": True, "stored_param_bytes": S.nbytes(trainable), "unsharded_bytes": n_trainable * 4}


def _run(cfg: ShardingCheck) -> None:
    from disttutor.rank import runtime
    from disttutor.checks.adapter import load_exercise

    with runtime.setup() as ctx:
        cls = load_exercise(cfg.source, cfg.name)
        runtime.report(**(_zero1 if cfg.exercise == "zero1" else _fsdp)(cls, cfg, ctx))


main = cli(ShardingCheck, _run)

if __name__ == "__main__":
    main()
