"""Checker for Exercise 10.2 (write the DDP language model's training step) -- chapter 10.

The learner writes ``train_step(ddp_model, optimizer, scheduler, scaler, micro_batches, loss_fn,
clip)``: one optimiser step of chapter 10's loop, returning this rank's mean loss.
:func:`check_train_step` runs chapter 10's loop (:func:`disttutor.lm.loop.train`, the tiny
configuration of Exercise 10.1) twice on 2 gloo ranks: with the course's own step
(:func:`disttutor.lm.step.train_step`) and with the learner's, each wrapped in a :class:`Recorder`
that counts DDP's all-reduces (a communication hook) and records, at each ``optimizer.step()``
(a step pre-hook), the learning rate and the gradients the optimizer sees. The GradScaler is
really enabled (a fixed scale, on CPU, in fp32), so clipping before unscaling shows.

This module is also the rank-side program (``python -m disttutor.checks.lm_step --source F``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, load_exercise, run_check
from disttutor.checks.resume import TINY
from disttutor.contract.options import cli, opt

COLLECTIVE_TIMEOUT_S = 20.0  # a collective only some ranks call is reported after this, not waited for
STEPS = 3       # step 0 shows most slips; step 1 also shows carried-over gradients and a shifted schedule
SCALE = 2.0 ** 10  # a power of two: scaling and unscaling are exact, so the scaler changes no bit
ACCUM = 4       # a power of two too: dividing each micro-batch's loss by it is exact, in any order
CLIP = 4.0      # above every true gradient norm of this run (measured 0.62-0.63; 4x that, a loss not divided by
#                 ACCUM, is 2.5) and far below SCALE x them: a correct step never clips (so it changes no bit),
#                 clipping the scaled gradients always does
CFG = {**TINY, "steps": STEPS, "accum": ACCUM, "loss_scale": SCALE, "clip": CLIP}
ANSWER_KEY = re.compile(r"disttutor\.lm\.step\b|from\s+disttutor\.lm\s+import\s+(?:\w+\s*,\s*)*step\b")
FORBIDDEN = "write the step yourself -- disttutor.lm.step is the answer key"
HANG_HINT = ("a rank waited for a collective that another rank never called: the step must run the same "
             "collectives on every rank")


def check_train_step(fn: Callable | str, nproc: int = 2) -> CheckResult:
    """Exercise 10.2: the learner's step, inside the course's loop, must do exactly what the course's step does."""
    from disttutor.checks.adapter import to_source

    if ANSWER_KEY.search(to_source(fn)):  # answered here, no ranks needed
        return CheckResult("10.2", False, [FORBIDDEN])
    return run_check("10.2", "disttutor.checks.lm_step", fn, function_name(fn, "train_step"), nproc,
                     timeout=JOB_TIMEOUT_S, collective_timeout=COLLECTIVE_TIMEOUT_S, hint=HANG_HINT)


# ---------------------------------------------------------------- rank side

def _forbidden(*args, **kwargs):
    raise RuntimeError(f"Exercise 10.2: {FORBIDDEN}")


class Recorder:
    """Wraps a step function (the loop calls it as its own): counts DDP's all-reduces, records what
    ``optimizer.step()`` saw (learning rate, gradients) and, after the step, the weights and the loss."""

    def __init__(self, fn: Callable):
        self.fn, self.steps, self.cur, self.hooked = fn, [], {}, False

    def _hook(self, ddp, optimizer) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def counting(state, bucket):  # DDP's own all-reduce, counted
            self.cur["allreduces"] += 1
            return allreduce_hook(None, bucket)

        names = {id(p): n for n, p in ddp.module.named_parameters()}

        def pre(opt, args, kwargs):  # runs inside optimizer.step(), before it changes anything
            self.cur["opt_steps"] += 1
            if self.cur["opt_steps"] == 1:
                self.cur["lr"] = opt.param_groups[0]["lr"]
                self.cur["grads"] = {names[id(p)]: torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
                                     for g in opt.param_groups for p in g["params"]}

        ddp.register_comm_hook(None, counting)  # before the first backward, as DDP requires
        optimizer.register_step_pre_hook(pre)
        self.hooked = True

    def __call__(self, ddp, optimizer, scheduler, scaler, micro_batches, loss_fn, clip):
        if not self.hooked:
            self._hook(ddp, optimizer)
        self.cur = {"allreduces": 0, "opt_steps": 0, "lr": None, "grads": {}}
        loss = self.fn(ddp, optimizer, scheduler, scaler, micro_batches, loss_fn, clip)
        try:
            self.cur["loss"] = float(loss)
        except (TypeError, ValueError, RuntimeError):
            self.cur["loss"], loss = type(loss).__name__, 0.0
        self.cur["params"] = {n: p.detach().clone() for n, p in ddp.module.named_parameters()}
        self.cur["spread"] = _spread(self.cur["params"])
        self.steps.append(self.cur)
        return loss


def _spread(params: dict[str, torch.Tensor]) -> tuple[str, float]:
    """The parameter whose values differ most between the ranks, and by how much (two all-reduces)."""
    flat = torch.cat([p.reshape(-1) for p in params.values()])
    hi, lo = flat.clone(), flat.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    d = hi - lo
    i, end = int(d.argmax()), 0
    for n, p in params.items():
        end += p.numel()
        if i < end:
            return n, float(d[i])
    return "", 0.0


def _flat(t: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([v.reshape(-1).double() for v in t.values()])


def _grads(s: int, m: dict, r: dict, ref: list[dict]) -> str | None:
    """Why the gradients the optimizer saw at step ``s`` differ from the course's (None: bit for bit equal)."""
    if all(torch.equal(m["grads"][n], g) for n, g in r["grads"].items()):
        return None
    G, R = _flat(m["grads"]), _flat(r["grads"])
    g, rr = float(G.norm()), float(R.norm())
    where = f"step {s}: the gradients the optimizer saw have norm {g:.3g} (the course's loop: {rr:.3g})"
    if g == 0:
        return f"{where} -- they were zeroed after the backward passes: call zero_grad() before the first micro-batch"
    if abs(g / rr - ACCUM) < 1e-3 * ACCUM:  # the gradients of ACCUM micro-batch means add up to ACCUM x the mean
        return (f"{where}, {ACCUM}x too large -- the {ACCUM} micro-batches' gradients add up: divide each "
                f"micro-batch's loss by len(micro_batches)")
    if abs(g - CLIP / SCALE) < 1e-3 * CLIP / SCALE:  # clipped to CLIP while x SCALE, then unscaled
        return (f"{where} = clip / loss scale ({CLIP:g} / {SCALE:g}) -- they were clipped while still multiplied by "
                f"the loss scale: call scaler.unscale_(optimizer) before clip_grad_norm_")
    if s > 0:  # left in .grad by the last step: the scaled backward adds to them, unscale_ divides both
        P, D = _flat(ref[s - 1]["grads"]), G - R
        c = float(D @ P / (P @ P))
        if c > 0 and float((D - c * P).norm()) < 1e-2 * float(D.norm()):
            return (f"step {s}: the gradients the optimizer saw are this step's plus {c:.3g} x step {s - 1}'s -- "
                    f"backward adds to .grad, and nothing cleared it between steps: call optimizer.zero_grad() "
                    f"once per step, before the first micro-batch")
    n = max(r["grads"], key=lambda k: float((m["grads"][k] - r["grads"][k]).abs().max()))
    rel = float((G - R).norm()) / rr
    if rel < 1e-5:  # rounding only: the same operations in another order
        return (f"step {s}: the gradients agree with the course's loop only to {rel:.1e} (relative), not bit for bit -- "
                f"one forward and backward per micro-batch, in order, each loss divided by len(micro_batches)")
    return (f"{where}; they differ most in {n}" + (
        " -- did every micro-batch's gradient reach .grad exactly once? zero_grad() belongs once per step, before "
        "the first micro-batch" if g < rr else ""))


def diagnose(ref: list[dict], mine: list[dict]) -> str | None:
    """The first step at which the learner's step differs from the course's, and the likely slip."""
    for s, (r, m) in enumerate(zip(ref, mine)):
        if m["opt_steps"] != 1:
            return (f"step {s}: optimizer.step() ran {m['opt_steps']} times -- one optimiser step calls it once, "
                    f"through scaler.step(optimizer)")
        if m["allreduces"] != r["allreduces"]:
            if m["allreduces"] == 0:
                name, d = m["spread"]
                return (f"step {s}: no gradient all-reduce ran (the course's loop: {r['allreduces']}) -- every "
                        f"backward was inside no_sync(), so each rank stepped on its own gradients and the ranks' "
                        f"{name} now differ by {d:.2g}: run the LAST micro-batch's backward outside no_sync()")
            return (f"step {s}: the gradients were all-reduced {m['allreduces']} times for one step of {ACCUM} "
                    f"micro-batches (the course's loop: {r['allreduces']}) -- run the forward and backward of all "
                    f"but the last micro-batch inside `with ddp_model.no_sync():`")
        if m["lr"] != r["lr"]:
            if s + 1 < len(ref) and m["lr"] == ref[s + 1]["lr"]:
                return (f"step {s}: the optimizer stepped with learning rate {m['lr']:.3g}, the schedule's value for "
                        f"step {s + 1} (step {s}'s is {r['lr']:.3g}) -- scheduler.step() ran before the optimizer's "
                        f"step: call it after scaler.step(optimizer)")
            return (f"step {s}: the optimizer stepped with learning rate {m['lr']:.3g}; the schedule's value for this "
                    f"step is {r['lr']:.3g}")
        problem = _grads(s, m, r, ref)
        if problem:
            return problem
        # Same gradients, same learning rate, same AdamW: the same operations in the same order, so the
        # weights must be bitwise equal (the scale and ACCUM are powers of two, CLIP never binds).
        for n, p in r["params"].items():
            if not torch.equal(m["params"][n], p):
                return (f"step {s}, parameter {n}: the weights differ by {float((m['params'][n] - p).abs().max()):.2g} "
                        f"after the step, although the optimizer saw the same gradients and learning rate")
        if isinstance(m["loss"], str):
            return f"step {s}: train_step returned a {m['loss']}; return this rank's mean loss (a number or a 0-d tensor)"
        if abs(m["loss"] - r["loss"]) > 1e-5 * abs(r["loss"]):  # fp32 sums of 4 numbers in another order: ~1e-7
            hint = (f" ({ACCUM}x: divide by len(micro_batches))" if abs(m["loss"] / r["loss"] - ACCUM) < 1e-3 else "")
            return (f"step {s}: train_step returned {m['loss']:.5f}; the mean of this rank's micro-batch losses "
                    f"is {r['loss']:.5f}{hint}")
    return None


@dataclass(frozen=True)
class TrainStepCheck(LearnerCode):
    steps: int = opt(STEPS, "optimiser steps compared")

    def __post_init__(self):
        super().__post_init__()
        if self.steps < 2:
            raise ValueError(f"steps must be >= 2 (carried-over gradients show from step 1), got {self.steps}")


def run(cfg: TrainStepCheck) -> None:
    from disttutor.lm.loop import LMConfig, train
    from disttutor.lm.step import train_step
    from disttutor.rank import runtime

    with runtime.setup(timeout_s=COLLECTIVE_TIMEOUT_S) as ctx:
        lm_cfg = LMConfig(**{**CFG, "steps": cfg.steps})
        ref = Recorder(train_step)
        train(lm_cfg, ctx, step_fn=ref)  # the course's own step, in the same loop
        import disttutor.lm.step

        disttutor.lm.step.train_step = _forbidden  # the learner's code must not just call the answer key
        mine = Recorder(load_exercise(cfg.source, cfg.name))
        problem: Any
        try:
            train(lm_cfg, ctx, step_fn=mine)
            problem = diagnose(ref.steps, mine.steps)
        except Exception as e:  # the learner's code raised: one line that names it (a timeout: why)
            first = re.sub(r"^\[[^\]]*\] ", "", str(e).splitlines()[0] if str(e) else "")  # gloo's source path
            hang = "timeout" in first.lower() or "timed out" in first.lower()
            problem = (f"step {len(mine.steps)}: your train_step raised {type(e).__name__}: {first[:200]}"
                       + (f" -- {HANG_HINT}" if hang else ""))
            if "No inf checks were recorded" in first:  # unscale_/step found no .grad at all
                problem += (" -- the optimizer had no gradients when the scaler reached it: zero_grad() belongs "
                            "before the first micro-batch, not after the backward passes")
        runtime.report(passed=problem is None, **({"problem": problem} if problem else {}))


main = cli(TrainStepCheck, run)


if __name__ == "__main__":
    main()
