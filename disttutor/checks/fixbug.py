"""Checkers for the "fix the bug" Exercises 9.2 and 9.3 -- chapter 9.

The learner starts from a broken DDP program that *runs* (the notebook cell; the same text is in
``disttutor/checks/broken/``) and fixes it. Both bugs are silent: no error, just wrong numbers.

* **9.2** ``accumulate_step(ddp_model, optimizer, micro_batches)``: gradient accumulation that
  neither divides the loss (the step is ``len(micro_batches)`` times too long) nor uses
  ``no_sync()`` (one all-reduce per micro-batch instead of one per step).
* **9.3** ``train_epochs(ddp_model, optimizer, dataset, epochs, batch_size)``: no
  ``sampler.set_epoch`` (every epoch repeats the first one's order) and a rank-local loss logged
  as if it were global. The tempting half-fix -- ``if rank == 0: dist.all_reduce(loss)`` -- is a
  collective only one rank calls: the checker's 10 s collective timeout turns it into a message.

Rank side (``python -m disttutor.checks.fixbug --source F --name accumulate_step --exercise
accumulation``): every rank runs the learner's function on a DDP model over gloo, and compares
the weights (and the log) with ONE process that replays all ranks' batches on the full model.
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch

from disttutor.contract.options import cli, opt
from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, resolve_path, run_check, to_source
from disttutor.checks.tolerances import DATA_PARALLEL_RTOL as RTOL  # why 1e-5: see tolerances.py

COLLECTIVE_TIMEOUT_S = 10.0  # a collective only some ranks call is reported after this, not waited for
LR = 0.1  # plain SGD, on purpose: Adam divides by the gradient's own size, which would hide a loss
#           that is len(micro_batches) times too large (the update would barely change)
HANG_HINT = ("a rank waited for a collective that another rank never called: every rank must call the same "
             "collectives (all_reduce, barrier, ...) in the same order -- `if rank == 0: dist.all_reduce(...)` "
             "waits forever")


def check_accumulation(fn: Callable | str, nproc: int = 2, steps: int = 2) -> CheckResult:
    """Exercise 9.2: gradient accumulation under DDP -- the mean loss, one all-reduce per step."""
    return _check("9.2", "accumulation", fn, nproc, steps)


def check_epochs(fn: Callable | str, nproc: int = 2, steps: int = 2) -> CheckResult:
    """Exercise 9.3: a DistributedSampler that reshuffles every epoch, and a loss log that is global."""
    return _check("9.3", "epochs", fn, nproc, steps)


def _check(ex_id: str, kind: str, fn: Callable | str, nproc: int, steps: int) -> CheckResult:
    from disttutor.checks.registry import exercise

    e = exercise(ex_id)
    if unchanged(to_source(fn), e.broken, e.stub):  # the starting program needs no ranks to recognise
        return CheckResult(ex_id, False, [f"still the broken program -- Exercise {ex_id}: {e.title}. "
                                          f"Change `{e.stub}`, then run the check again"])
    return run_check(ex_id, "disttutor.checks.fixbug", fn, function_name(fn, e.stub), nproc,
                     args={"exercise": kind, "steps": steps}, timeout=JOB_TIMEOUT_S,
                     collective_timeout=COLLECTIVE_TIMEOUT_S, hint=HANG_HINT)


def unchanged(src: str, broken_path: str, name: str) -> bool:
    """True if ``src`` defines ``name`` exactly as the broken program does (comments, blank lines
    and the docstring aside): the learner has not changed anything yet."""
    def body(text: str) -> str | None:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return None
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                stmts = node.body
                if stmts and isinstance(stmts[0], ast.Expr) and isinstance(stmts[0].value, ast.Constant):
                    stmts = stmts[1:]  # the docstring
                return ast.dump(ast.Module(body=stmts, type_ignores=[])) + ast.dump(node.args)
        return None

    mine = body(src)
    return mine is not None and mine == body(open(resolve_path(broken_path)).read())


# ---------------------------------------------------------------- rank side

def _model(seed: int = 0) -> torch.nn.Module:
    """A model small enough to be one DDP bucket (so one all-reduce per synchronised backward)."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _data(n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    return x, torch.sin(x.sum(1, keepdim=True)) + 0.1 * torch.randn(n, 1, generator=g)


def _err(model: torch.nn.Module, ref: torch.nn.Module) -> float:
    from disttutor.data_parallel.train import compare

    return max(err for _, err in compare(model, ref))


def _accumulation(fn: Callable, rank: int, world: int, steps: int, accum: int = 3, micro: int = 4) -> str | None:
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    model, ref = _model(), _model()
    ddp = DDP(model)
    calls: list[int] = []

    def counting_hook(state, bucket):  # DDP's own all-reduce, counted: how many per optimizer step
        calls.append(bucket.buffer().numel())
        return allreduce_hook(None, bucket)

    ddp.register_comm_hook(None, counting_hook)
    opt, ref_opt = torch.optim.SGD(ddp.parameters(), lr=LR), torch.optim.SGD(ref.parameters(), lr=LR)
    per_step = world * accum * micro
    x, y = _data(steps * per_step)
    for s in range(steps):
        xs, ys = x[s * per_step:(s + 1) * per_step], y[s * per_step:(s + 1) * per_step]
        lo = rank * accum * micro  # this rank's contiguous share of the global batch, in `accum` slices
        mine = [(xs[lo + i * micro:lo + (i + 1) * micro], ys[lo + i * micro:lo + (i + 1) * micro])
                for i in range(accum)]
        before, first = [p.detach().clone() for p in ref.parameters()], len(calls)
        fn(ddp, opt, mine)
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(xs), ys).backward()  # one process, the whole global batch
        ref_opt.step()
        n = len(calls) - first
        err = _err(model, ref)
        if not err <= RTOL:  # also catches NaN
            if n == 0:
                return (f"step {s}: the gradients were never all-reduced -- every backward ran inside no_sync(), "
                        f"so this rank stepped on its own micro-batches only. Let the LAST micro-batch's "
                        f"backward run outside no_sync()")
            moved = sum((p.detach() - b).pow(2).sum() for p, b in zip(model.parameters(), before)).sqrt()
            want = sum((p.detach() - b).pow(2).sum() for p, b in zip(ref.parameters(), before)).sqrt()
            ratio = (moved / want).item()
            msg = (f"step {s}: the weights moved {ratio:.2f}x as far as one SGD step on the mean loss of the "
                   f"global batch (relative error {err:.2g}, allowed {RTOL:g})")
            if abs(ratio - accum) < 0.05 * accum:  # the gradients of `accum` means add up to accum x the mean
                msg += (f" -- the gradients of {accum} micro-batches add up: divide each micro-batch's loss "
                        f"by len(micro_batches)")
            return msg
        if n > 1:  # the model is one bucket: a synchronised step needs exactly one all-reduce
            return (f"step {s}: the weights are right, but the gradients were all-reduced {n} times for one "
                    f"optimizer step of {accum} micro-batches -- run the forward and backward of all but the "
                    f"last micro-batch inside `with ddp_model.no_sync():` (one all-reduce per step)")
    return None


def _replay(world: int, dataset: Any, epochs: int, batch: int, set_epoch: bool):
    """One process replays every rank's batches, step by step: (model, global losses, per-rank losses)."""
    from torch.utils.data import DataLoader, DistributedSampler

    ref = _model()
    opt = torch.optim.SGD(ref.parameters(), lr=LR)
    samplers = [DistributedSampler(dataset, world, r, shuffle=True, seed=0) for r in range(world)]
    glob, local = [], []
    for epoch in range(epochs):
        for s in samplers:
            s.set_epoch(epoch if set_epoch else 0)
        for parts in zip(*(DataLoader(dataset, batch_size=batch, sampler=s) for s in samplers)):
            with torch.no_grad():
                local.append([torch.nn.functional.mse_loss(ref(bx), by).item() for bx, by in parts])
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ref(torch.cat([p[0] for p in parts])), torch.cat([p[1] for p in parts]))
            loss.backward()  # equal shares per rank: the full-batch mean is the mean of the ranks' means
            opt.step()
            glob.append(loss.item())
    return ref, glob, local


def _epochs(fn: Callable, rank: int, world: int, epochs: int, batch: int = 4) -> str | None:
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import TensorDataset

    model = _model()
    ddp = DDP(model)
    dataset = TensorDataset(*_data(4 * world * batch))  # 4 steps per epoch, equal shares, no padding
    log = fn(ddp, torch.optim.SGD(ddp.parameters(), lr=LR), dataset, epochs, batch)
    problems = []
    good, stale = _replay(world, dataset, epochs, batch, True), _replay(world, dataset, epochs, batch, False)
    if _err(model, good[0]) <= RTOL:
        _, glob, local = good
    elif _err(model, stale[0]) <= RTOL:
        _, glob, local = stale
        problems.append(f"after {epochs} epochs the weights are those of a run in which every epoch visits the "
                        f"samples in the SAME order as epoch 0 -- call sampler.set_epoch(epoch) at the start of "
                        f"each epoch")
    else:
        return (f"after {epochs} epochs the weights differ from the single-process replay of all ranks' batches "
                f"(relative error {_err(model, good[0]):.2g}, allowed {RTOL:g})")
    try:
        log = [float(v) for v in log]
    except (TypeError, ValueError):
        return "; ".join(problems + [f"train_epochs should return a list of numbers (one loss per step), got "
                                     f"{type(log).__name__}"])
    if len(log) != len(glob):
        problems.append(f"the log has {len(log)} entries; expected one per step ({len(glob)})")
    else:
        for i, (got, want) in enumerate(zip(log, glob)):
            if not math.isclose(got, want, rel_tol=RTOL):  # fp32 sums in another order: see tolerances.py
                own = math.isclose(got, local[i][rank], rel_tol=RTOL)
                problems.append(f"log[{i}] = {got:.5f} but the mean loss over all ranks at that step was {want:.5f}"
                                + (" -- that is this rank's own loss: all-reduce a copy of it (on every rank) "
                                   "and divide by the world size" if own else ""))
                break
    return "; ".join(problems) or None


def raised(e: Exception) -> str:
    """The learner's code raised: one line that names it (a collective's timeout: why it waited).
    Also used by Exercise 8.2's checker (:mod:`disttutor.checks.accumulation`)."""
    first = str(e).splitlines()[0] if str(e) else ""
    # gloo prefixes its errors (also one quoted inside a callback's error) with its build machine's
    # source path: not for learners
    text = f"{type(e).__name__}: " + re.sub(r"^\[[^\]]*\] |\[[^\]\s]*\.(?:cc|cpp|h):\d+\] ", "", first)
    hang = "timed out" in text.lower() or "timeout" in text.lower()
    return f"your code raised {text[:200]}" + (f" -- {HANG_HINT}" if hang else "")


@dataclass(frozen=True)
class FixBugCheckConfig(LearnerCode):
    exercise: Literal["accumulation", "epochs"] = opt("accumulation", "9.2 accumulation, 9.3 epochs")
    steps: int = opt(2, "optimizer steps (9.2) or epochs (9.3)")

    def __post_init__(self):
        super().__post_init__()
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")


def run(cfg: FixBugCheckConfig) -> None:
    from disttutor.rank import runtime
    from disttutor.checks.adapter import load_exercise

    with runtime.setup() as ctx:
        fn = load_exercise(cfg.source, cfg.name)
        check = _accumulation if cfg.exercise == "accumulation" else _epochs
        try:
            problem = check(fn, ctx.rank, ctx.world_size, cfg.steps)
        except Exception as e:
            problem = raised(e)
        runtime.report(passed=problem is None, **({"problem": problem} if problem else {}))


main = cli(FixBugCheckConfig, run)


if __name__ == "__main__":
    main()
