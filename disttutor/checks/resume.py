"""Checker for Exercise 10.1 (write the resume logic) -- chapter 10.

The learner writes ``resume(ckpt_dir, model, optimizer, scheduler) -> int``: restore the newest
complete checkpoint written by :func:`disttutor.lm.checkpoint.save` and return how many steps it had
done (0 when there is none). :func:`check_resume` runs chapter 10's training loop
(:func:`disttutor.lm.loop.train`, a tiny configuration) on 2 ranks under torchrun with one
elastic restart:

* attempt 0: an uninterrupted reference run, then the same run with checkpoints every 2 steps,
  where rank 1 SIGKILLs itself at a step drawn at random;
* attempt 1 (torchrun's restart): the learner's ``resume`` brings the job back; at the end each
  rank compares its parameters and loss curve with the reference and says what differs.

This module is also the rank-side program (``python -m disttutor.checks.resume --source F``).
"""
from __future__ import annotations

import dataclasses
import os
import random
import re
import tempfile
from dataclasses import dataclass
from typing import Callable

import torch

from disttutor.lm import checkpoint
from disttutor.rank import runtime
from disttutor.lm.loop import LMConfig, attempt, train
from disttutor.contract.options import cli, opt
from disttutor.checks.adapter import CheckResult, LearnerCode, function_name, load_exercise, run_check

COLLECTIVE_TIMEOUT_S = 30.0
STEPS, CKPT_EVERY = 8, 2
TINY = dict(steps=STEPS, seq_len=32, micro_batch=4, accum=2, d_model=32, heads=2, layers=1, warmup=2,
            eval_every=100, eval_windows=4, sample_chars=0)


def check_resume(fn: Callable | str, nproc: int = 2, fail_at_step: int | None = None) -> CheckResult:
    """Exercise 10.1: the resumed run must end exactly where the uninterrupted one does."""
    from disttutor.checks.adapter import to_source

    if re.search(r"\bcheckpoint\.load\(|\bdefault_resume\b", to_source(fn)):  # answered here, no ranks needed
        return CheckResult("10.1", False, ["write the loading yourself -- disttutor.lm.checkpoint.load is the "
                                           "answer key (use dcp.load, set_state_dict, ... as the hints say)"])
    # A random step after the first checkpoint: resuming from step 0 would hide most mistakes.
    k = fail_at_step if fail_at_step is not None else random.Random().randint(CKPT_EVERY + 1, STEPS - 1)
    work = tempfile.mkdtemp(prefix="disttutor-ex10-")
    return run_check("10.1", "disttutor.checks.resume", fn, function_name(fn, "resume"), nproc,
                     args={"workdir": work, "fail_at_step": k}, timeout=240, max_restarts=1,
                     collective_timeout=COLLECTIVE_TIMEOUT_S,
                     hint="the restarted ranks never met: does resume() call a collective on only some ranks?")


def _forbidden(*args, **kwargs):
    raise RuntimeError("Exercise 10.1: write the loading yourself -- disttutor.lm.checkpoint.load is the answer key")


@dataclass(frozen=True)
class ResumeCheck(LearnerCode):
    workdir: str = opt("", "directory for the reference and the checkpoints")
    fail_at_step: int = opt(5, "rank 1 is SIGKILLed at this step of the first attempt")

    def __post_init__(self):
        super().__post_init__()
        if not self.workdir:
            raise ValueError("--workdir is required")
        if not CKPT_EVERY < self.fail_at_step < STEPS:
            raise ValueError(f"fail_at_step must be in ({CKPT_EVERY}, {STEPS}), got {self.fail_at_step}")


def diagnose(ref: dict, out: dict, saved_at: int) -> str | None:
    """What went wrong, in words, from the two runs' loss/lr curves and parameters (None: identical)."""
    if out["resumed_from"] != saved_at:
        return (f"resume() returned {out['resumed_from']}, but the newest complete checkpoint had done "
                f"{saved_at} steps: return meta['step'] of the checkpoint you loaded")
    h, r = out["history"], ref["history"]
    if h["lr"] != r["lr"]:
        s = next(i for i, (a, b) in enumerate(zip(h["lr"], r["lr"])) if a != b)
        return f"the learning rate differs from step {s} on: the scheduler's state was not restored"
    if h["loss"] != r["loss"]:
        s = next((i for i, (a, b) in enumerate(zip(h["loss"], r["loss"])) if a != b), len(r["loss"]))
        if s == saved_at:
            return (f"the loss of the first step after the resume (step {s}) already differs: the weights or "
                    "this rank's random-number state (dropout!) were not restored")
        return (f"the loss first differs at step {s}, after the first resumed step was right: the optimiser's "
                "state (AdamW's moments and step counts) was not restored")
    diff = max(float((out["params"][n] - ref["params"][n]).abs().max()) for n in ref["params"])
    # Same ops, same order, same inputs, same random numbers: a correct resume is bitwise equal.
    if diff != 0.0:
        return f"the final parameters differ from the uninterrupted run's by {diff:.2e}"
    return None


def run(cfg: ResumeCheck) -> None:
    with runtime.setup(timeout_s=COLLECTIVE_TIMEOUT_S) as ctx:
        base = LMConfig(**TINY)
        ref_file = os.path.join(cfg.workdir, f"reference_rank{ctx.rank}.pt")
        if attempt() == 0:
            ref = train(base, ctx)
            torch.save({"history": ref["history"], "params": ref["params"]}, ref_file)
        checkpoint.load = _forbidden  # the learner's code must not just call the answer key
        learner = load_exercise(cfg.source, cfg.name)
        faulty = dataclasses.replace(base, ckpt_dir=os.path.join(cfg.workdir, "ckpt"),
                                     ckpt_every=CKPT_EVERY, fail_at_step=cfg.fail_at_step)
        out = train(faulty, ctx, resume=learner)
        ref = torch.load(ref_file, weights_only=True)
        saved_at = (cfg.fail_at_step // CKPT_EVERY) * CKPT_EVERY  # the last checkpoint before the kill
        problem = diagnose(ref, out, saved_at) if attempt() > 0 else "the job was never killed and restarted"
        runtime.report(passed=problem is None, problem=problem, fail_at_step=cfg.fail_at_step,
                       resumed_from=out["resumed_from"], attempt=attempt())


main = cli(ResumeCheck, run)


if __name__ == "__main__":
    main()
