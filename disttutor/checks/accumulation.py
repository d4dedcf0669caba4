"""Checker for Exercise 8.2 (gradient accumulation with torch's DDP and ``no_sync()``) -- chapter 8.

The learner writes the whole loop, ``accumulate_train(ddp, optimizer, micro_batches, k)``: this
rank's micro-batches in groups of ``k``, one ``optimizer.step()`` per group, the last group shorter
when ``k`` does not divide their number (stepped too, its losses divided by its own size), every
backward but a group's last inside ``ddp.no_sync()``. Chapter 9's Exercise 9.2 repairs ONE such step
(:mod:`disttutor.checks.fixbug`); this one is written from nothing and graded on the whole loop.

Rank side (``python -m disttutor.checks.accumulation --source F --name accumulate_train``): every
rank runs the learner's loop on a real DDP over gloo (9.2's model: one bucket, so every backward
that synchronises is exactly one all-reduce) and a :class:`Recorder` notes which micro-batch's
backward DDP all-reduced in (a communication hook, numbered by a forward pre-hook) and what every
``optimizer.step()`` saw (a step pre-hook). One process replays all ranks' micro-batches group by
group on the full model; the first step that differs is explained.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, run_check
from disttutor.checks.fixbug import COLLECTIVE_TIMEOUT_S, HANG_HINT, LR, _data, _err, _model, raised
from disttutor.contract.options import cli

# fp32 sums in another order (a rank's micro-batch means, then the all-reduce, versus one mean over
# the union): the data-parallel tolerance, 100x above the rounding; every slip below is off by >1e-1.
from disttutor.checks.tolerances import DATA_PARALLEL_RTOL as RTOL  # noqa: E402

K = 3        # micro-batches per optimizer step
MICRO = 8    # micro-batches per rank: groups of 3, 3 and 2, so the short last group shows
SAMPLES = 4  # rows per micro-batch per rank (equal: the mean of the ranks' means is the mean of the union)
SHAPE = 1e-3  # "this gradient is c x that one": rounding leaves ~1e-6 of the other's size, a slip ~1


def check_accumulate_train(fn: Callable | str, nproc: int = 2) -> CheckResult:
    """Exercise 8.2: the accumulation loop under torch's DDP: one all-reduce and one step per group."""
    return run_check("8.2", "disttutor.checks.accumulation", fn, function_name(fn, "accumulate_train"), nproc,
                     timeout=JOB_TIMEOUT_S, collective_timeout=COLLECTIVE_TIMEOUT_S, hint=HANG_HINT)


# ---------------------------------------------------------------- rank side

class Recorder:
    """Hooks on a DDP model and its optimizer: in which micro-batch's backward DDP all-reduced (the
    forward count at that moment), and, at each ``optimizer.step()``, the forwards so far and the gradients."""

    def __init__(self, ddp: torch.nn.Module, optimizer: torch.optim.Optimizer):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        self.forwards, self.synced, self.steps = 0, [], []

        def forward(module, args):
            self.forwards += 1

        def counting(state, bucket):  # DDP's own all-reduce, noted with the micro-batch it belongs to
            self.synced.append(self.forwards - 1)
            return allreduce_hook(None, bucket)

        def pre(opt, args, kwargs):  # inside optimizer.step(), before it changes anything
            self.steps.append({"after": self.forwards - 1, "grads": [
                torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
                for g in opt.param_groups for p in g["params"]]})

        ddp.module.register_forward_pre_hook(forward)
        ddp.register_comm_hook(None, counting)
        optimizer.register_step_pre_hook(pre)


def _flat(ts: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1).double() for t in ts])


def _times(g: torch.Tensor, r: torch.Tensor) -> float | None:
    """c if ``g`` is c times ``r`` (up to rounding), else None."""
    c = float(g @ r / (r @ r))
    return c if float((g - c * r).norm()) <= SHAPE * float(g.norm()) else None


def _grad(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def _apart(model: torch.nn.Module, world: int) -> list[tuple[int, float]]:
    """The ranks whose parameters differ from rank 0's, with the largest relative difference (a collective)."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(every, flat)
    scale = float(every[0].abs().max()) or 1.0
    diffs = [(r, float((t - every[0]).abs().max()) / scale) for r, t in enumerate(every)]
    return [(r, d) for r, d in diffs if d > RTOL]


def _wrong_grad(s: int, grp: list[int], mine: torch.Tensor, want: torch.Tensor, last: torch.Tensor,
                before: torch.Tensor | None) -> str:
    """Why step ``s``'s gradient is not the mean loss's gradient over the group ``grp``."""
    n, where = len(grp), f"step {s} (micro-batches {grp[0]}-{grp[-1]})"
    c = _times(mine, want)
    if c is not None and abs(c - n) < SHAPE * n:
        return (f"{where}: the update is {n} times the reference's -- the {n} micro-batches' gradients add up: "
                f"divide each loss by the size of its group ({n})")
    if c is not None and n < K and abs(c - n / K) < SHAPE:
        return (f"{where}: the last group holds only {n} micro-batches, and its update is {n}/{K} of the "
                f"reference's -- divide its losses by {n}, the size of this group, not by k={K}")
    if c is not None:
        return f"{where}: the update is {c:.3g} times the reference's (the mean loss over the group's micro-batches)"
    if _times(mine, last) is not None:
        return (f"{where}: the optimizer saw only micro-batch {grp[-1]}'s gradient -- .grad was cleared inside the "
                f"loop: zero the gradients once per group, after optimizer.step(), not per micro-batch")
    if before is not None and _times(mine - want, before) is not None:
        return (f"{where}: the optimizer saw this group's gradient plus step {s - 1}'s -- backward adds to .grad: "
                f"call optimizer.zero_grad() after every optimizer.step()")
    err = float((mine - want).norm() / want.norm())
    return f"{where}: the gradient the optimizer saw differs from the reference's by {err:.2g} (relative)"


def examine(fn: Callable, rank: int, world: int) -> str | None:
    """Run the learner's loop on this rank and return what is wrong (None: nothing)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from disttutor.programs.accumulation import groups  # the chapter's rule: the short last group is kept

    model, ref = _model(), _model()
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR)
    rec = Recorder(ddp, optimizer)
    rows = world * SAMPLES  # one global micro-batch: every rank's share of it
    x, y = _data(MICRO * rows)
    share = [slice(m * rows + rank * SAMPLES, m * rows + (rank + 1) * SAMPLES) for m in range(MICRO)]
    fn(ddp, optimizer, [(x[i], y[i]) for i in share], K)
    apart = _apart(model, world)  # every rank, whatever it found: a collective
    want_groups = groups(MICRO, K)
    sizes = ", ".join(str(len(g)) for g in want_groups[:-1]) + f" and {len(want_groups[-1])}"
    if not rec.synced:
        who = ", ".join(f"rank {r}'s differ from rank 0's by {d:.2g}" for r, d in apart) or "none differ yet"
        return (f"DDP never all-reduced: every backward ran inside no_sync(), each group's last too, so each rank "
                f"stepped on its own micro-batches; the parameters drifted apart ({who})")
    if len(rec.steps) != len(want_groups):
        n = len(rec.steps)
        every = {st["after"] for st in rec.steps} == set(range(MICRO))
        why = (f"a step after every micro-batch: step once per group of k={K}" if every else
               f"the last {len(want_groups[-1])} micro-batches never stepped: the short last group must step too, "
               f"its losses divided by its size" if n == MICRO // K else "")
        return (f"optimizer.step() ran {n} times for {MICRO} micro-batches with k={K}; expected {len(want_groups)} "
                f"(groups of {sizes})" + (f" -- {why}" if why else ""))
    opt_ref = torch.optim.SGD(ref.parameters(), lr=LR)
    previous = None
    for s, (grp, got) in enumerate(zip(want_groups, rec.steps)):
        where = f"step {s} (micro-batches {grp[0]}-{grp[-1]})"
        if got["after"] != grp[-1]:
            return (f"{where}: optimizer.step() ran after micro-batch {got['after']}; expected after micro-batch "
                    f"{grp[-1]}")
        synced = [m for m in rec.synced if grp[0] <= m <= grp[-1]]
        if grp[-1] not in synced:
            return (f"{where}: DDP all-reduced in the backward of micro-batch(es) {sorted(set(synced))}, not in the "
                    f"group's last ({grp[-1]}): the gradients after it stayed on this rank")
        rows_of = slice(grp[0] * rows, (grp[-1] + 1) * rows)  # every rank's share of the group: the union
        last = _flat(_grad(ref, x[grp[-1] * rows:(grp[-1] + 1) * rows], y[grp[-1] * rows:(grp[-1] + 1) * rows]))
        want = _grad(ref, x[rows_of], y[rows_of])
        mine, flat_want = _flat(got["grads"]), _flat(want)
        if not float((mine - flat_want).norm()) <= RTOL * float(flat_want.norm()):  # also catches NaN
            return _wrong_grad(s, grp, mine, flat_want, last, previous)
        if len(synced) != 1:  # the model is one bucket: one all-reduce per synchronised backward
            return (f"{where}: {len(synced)} all-reduces for {len(grp)} micro-batches -- the numbers are right, but "
                    f"every micro-batch but the group's last, its forward and its backward, belongs inside ddp.no_sync(): one all-reduce per step")
        opt_ref.step()
        previous = mine
    err = _err(model, ref)
    if not err <= RTOL:
        return f"after the loop the parameters differ from the single-process reference by {err:.2g} (allowed {RTOL:g})"
    return None


@dataclass(frozen=True)
class AccumulateCheck(LearnerCode):
    """The learner's file and function; the run's shape (K, MICRO, SAMPLES) is fixed above."""


def run(cfg: AccumulateCheck) -> None:
    from disttutor.checks.adapter import load_exercise
    from disttutor.rank import runtime

    with runtime.setup() as ctx:
        try:
            problem = examine(load_exercise(cfg.source, cfg.name), ctx.rank, ctx.world_size)
        except Exception as e:
            problem = raised(e)
        runtime.report(passed=problem is None, **({"problem": problem} if problem else {}))


main = cli(AccumulateCheck, run)


if __name__ == "__main__":
    main()
