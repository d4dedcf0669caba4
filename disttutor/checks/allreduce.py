"""Checker for Exercises 2.1 (ring all-reduce) and 2.2 (all-reduce from its two halves), chapter 2.

Two halves, as every checker in :mod:`disttutor.checks`:

* **notebook side** -- :func:`check_ring_allreduce` (and the general
  :func:`check_all_reduce`) ship the learner's function as source to real
  ranks through :func:`disttutor.checks.adapter.run_check`, for several world
  sizes, and return a :class:`~disttutor.checks.adapter.CheckResult`;
* **rank side** -- this module is also a program
  (``python -m disttutor.checks.allreduce --source F --name ring_all_reduce``):
  for many shapes and dtypes each rank builds a known input, runs the
  learner's function and compares the result with a single-process reference
  sum *and* with ``dist.all_reduce``. The first wrong element is reported with
  its rank and ring chunk, e.g. ``rank 2: chunk 1 (elements 4..7) of a
  float32 tensor of shape (10,): expected 10.0, got 6.0``.

For Exercise 2.2 the rank side also watches which collectives the learner's code calls
(:class:`_Halves`): it must reach the sum through a reduce-scatter and an all-gather, never
``dist.all_reduce`` itself, nor the point-to-point ring of Exercise 2.1.

Inputs are small integers (-3..3), so every partial sum is exactly
representable even in float16/bfloat16: the comparison is exact whatever
order the additions happen in, and no tolerance is needed.
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from disttutor.contract.options import cli, opt
from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, run_check

#: (shape, dtype) cases: divisible and non-divisible sizes, fewer elements than
#: ranks (empty chunks), several dims, integer and low-precision dtypes.
CASES: tuple[tuple[tuple[int, ...], str], ...] = (
    ((12,), "float32"), ((10,), "float32"), ((1,), "float32"), ((3, 5), "float32"),
    ((2, 3, 7), "float64"), ((1000,), "float32"), ((17,), "int64"), ((33,), "int32"),
    ((64,), "float16"), ((50,), "bfloat16"), ((4097,), "float32"),
)
STRIDED_CASE = ((6, 4), "float32")  # checked through a transposed (non-contiguous) view


def make_input(shape: Sequence[int], dtype: str, rank: int, case: int) -> torch.Tensor:
    """Rank ``rank``'s input for case ``case``: small integers, different on every rank."""
    numel = 1
    for d in shape:
        numel *= d
    vals = (torch.arange(numel) * (rank + 1) + 3 * case + rank) % 7 - 3
    return vals.to(getattr(torch, dtype)).reshape(tuple(shape))


def reference_sum(shape: Sequence[int], dtype: str, world: int, case: int) -> torch.Tensor:
    """The single-process reference: add every rank's input here, no communication."""
    total = sum(make_input(shape, dtype, r, case).double() for r in range(world))
    return total.to(getattr(torch, dtype))


def first_problem(got: torch.Tensor, want: torch.Tensor, world: int) -> str | None:
    """``None`` if equal, else words naming the ring chunk of the first wrong element."""
    g, w = got.reshape(-1), want.reshape(-1)
    bad = (g != w).nonzero().flatten()
    if bad.numel() == 0:
        return None
    i = int(bad[0])
    bounds = torch.arange(w.numel()).tensor_split(world)
    c = next(k for k, b in enumerate(bounds) if b.numel() and b[0] <= i <= b[-1])
    lo, hi = int(bounds[c][0]), int(bounds[c][-1])
    n_bad = int(((bad >= lo) & (bad <= hi)).sum())
    dtype = str(want.dtype).replace("torch.", "")
    return (f"chunk {c} (elements {lo}..{hi}) of a {dtype} tensor of shape {tuple(want.shape)}: "
            f"expected {w[i].item()}, got {g[i].item()} at element {i}"
            + (f" ({n_bad} of {hi - lo + 1} elements of this chunk wrong)" if n_bad > 1 else ""))


# Exercise 2.2's spellings of the two halves (old names call the new ones: only the outermost call counts)
REDUCE_SCATTERS = ("reduce_scatter_single", "reduce_scatter_tensor", "_reduce_scatter_base", "reduce_scatter")
ALL_GATHERS = ("all_gather_single", "all_gather_into_tensor", "_all_gather_base", "all_gather")
NOT_HALVES = {  # a call that would hide the point of Exercise 2.2, and why
    "all_reduce": "dist.all_reduce is the collective you are building: reach the sum through its two halves",
    **{p2p: "the send/recv ring is Exercise 2.1: build this one from the library's reduce-scatter and all-gather"
       for p2p in ("send", "recv", "isend", "irecv", "batch_isend_irecv")},
}


class _Refused(RuntimeError):
    """A call Exercise 2.2 does not allow, stopped before it runs (on every rank alike)."""


class _Halves:
    """Counts the learner's reduce-scatters and all-gathers while ``fn`` runs; refuses ``NOT_HALVES``."""

    def __init__(self):
        import torch.distributed as dist

        self.dist, self.saved, self.calls, self.depth = dist, {}, {"reduce-scatter": 0, "all-gather": 0}, 0

    def _wrap(self, name: str, kind: str | None):
        real = self.saved[name]

        def call(*args, **kwargs):
            if kind is None and self.depth == 0:
                raise _Refused(NOT_HALVES[name])
            if self.depth == 0 and kind:
                self.calls[kind] += 1
            self.depth += 1
            try:
                return real(*args, **kwargs)
            finally:
                self.depth -= 1
        return call

    def __enter__(self):
        kinds = {**{n: "reduce-scatter" for n in REDUCE_SCATTERS}, **{n: "all-gather" for n in ALL_GATHERS},
                 **{n: None for n in NOT_HALVES}}
        for name, kind in kinds.items():
            self.saved[name] = getattr(self.dist, name)
            setattr(self.dist, name, self._wrap(name, kind))
        return self

    def __exit__(self, *exc):
        for name, real in self.saved.items():
            setattr(self.dist, name, real)
        return False

    def missing(self) -> str | None:
        """Words for a half never called (the sum reached some other way), else None."""
        absent = [k for k, c in self.calls.items() if c == 0]
        if not absent:
            return None
        return (f"the result is right, but no {' and no '.join(absent)} was called: an all-reduce built from "
                "other collectives moves more bytes than its two halves (section 5 derives what each one sends)")


@dataclass(frozen=True)
class CheckConfig(LearnerCode):
    name: tuple[str, ...] = opt(("ring_all_reduce",), "the function(s) to check, each on every case")
    halves: bool = opt(False, "Exercise 2.2: require a reduce-scatter and an all-gather, refuse all_reduce and send/recv")


def _check_one(fn: Callable, case: int, shape: tuple[int, ...], dtype: str, rank: int, world: int,
               strided: bool = False, halves: bool = False) -> str | None:
    import torch.distributed as dist

    x = make_input(shape, dtype, rank, case)
    builtin = x.clone()
    dist.all_reduce(builtin)  # the library's answer, before the learner's code touches anything
    want = reference_sum(shape, dtype, world, case)
    if not torch.equal(builtin, want):  # would mean the reference itself is wrong
        return f"internal: dist.all_reduce disagrees with the reference for {dtype} {shape}"
    if strided:
        x, want = x.t(), want.t()  # a non-contiguous view: the function must still work in place
    spy = _Halves() if halves else contextlib.nullcontext()
    try:
        with spy:
            out = fn(x)
    except _Refused as e:
        return str(e)
    except RuntimeError as e:
        if halves and x.numel() % world:
            # The library's two halves need n equal chunks: say which size could not give them.
            return (f"a {dtype} tensor of shape {tuple(x.shape)} ({x.numel()} elements) on {world} ranks made the "
                    f"function fail: {x.numel()} elements do not split into {world} equal chunks, and both "
                    f"collectives need equal ones (the library: {_library_words(e)})")
        if not strided:
            raise
        # A crash only on the strided case (typically .view(-1)) must say it is the strided case.
        return (f"a transposed, non-contiguous view (tensor.t() of a {tuple(x.t().shape)} tensor) "
                f"made the function fail: {str(e).splitlines()[0]}")
    problem = first_problem(x, want, world)
    if problem is None and halves:
        problem = spy.missing()
    if problem and isinstance(out, torch.Tensor) and out is not x and first_problem(out, want, world) is None:
        problem = ("the returned tensor is right, but the input tensor was not updated: write the sum into "
                   "`tensor` itself, in place, like dist.all_reduce")
    if problem and strided:
        # Say which case this is: "(4, 6)" alone reads like any other input.
        problem = (f"a transposed, non-contiguous view (tensor.t() of a {tuple(x.t().shape)} tensor; "
                   f"tensor.view(-1) fails on it and a reshape(-1) is a copy, so write the result back): {problem}")
    return problem


def _library_words(e: Exception) -> str:
    """The library's error without its log prefix (``[rank0]:[F1206 00:00:28.35 File.cpp:1537] ``)."""
    line = str(e).splitlines()[0] if str(e) else type(e).__name__
    return re.sub(r"^(\[rank\d+\]:)?\[[^\]]*\]\s*", "", line)[:120]


def run(cfg: CheckConfig) -> None:
    import torch.distributed as dist

    from disttutor.rank import runtime

    from disttutor.checks.adapter import load_exercise

    with runtime.setup() as ctx:
        fns = {name: load_exercise(cfg.source, name) for name in cfg.name}
        checked = 0
        cases = [(c, shape, dt, False) for c, (shape, dt) in enumerate(CASES)]
        cases.append((len(CASES), *STRIDED_CASE, True))
        for name, fn in fns.items():
            for case, shape, dtype, strided in cases:
                problem = _check_one(fn, case, shape, dtype, ctx.rank, ctx.world_size, strided, cfg.halves)
                # Every rank learns whether *any* rank failed, so all stop together:
                # a rank that stopped alone would leave the others waiting on it.
                flag = torch.tensor([0 if problem is None else 1])
                dist.all_reduce(flag)
                if problem is not None:
                    runtime.report(passed=False, problem=f"{name}: {problem}" if len(fns) > 1 else problem)
                    return
                if int(flag):
                    runtime.report(passed=True, problem=None, note="other ranks went wrong")
                    return
                checked += 1
        runtime.report(passed=True, cases=checked, names=list(cfg.name))


def check_all_reduce(obj: Callable | str, names: Sequence[str] | None = None,
                     world_sizes: Sequence[int] = (2, 3, 4), exercise: str = "2.1",
                     collective_timeout: float = 10.0, timeout: float = JOB_TIMEOUT_S, **launch_kw: Any) -> CheckResult:
    """Check all-reduce functions on real ranks, for each world size in turn.

    obj: a function (its source is shipped, so keep helpers inside it), a
        ``.py`` path or source text. names: the functions to check in it
        (default: ``obj``'s own name, else ``ring_all_reduce``).
    Stops at the first world size that fails; a hang comes back after
    ``collective_timeout`` seconds as a failure, never a frozen cell.
    """
    names = list(names or [function_name(obj, "ring_all_reduce")])
    if not world_sizes or any(not isinstance(n, int) or n < 1 for n in world_sizes):
        raise ValueError(f"world_sizes must be positive integers, got {world_sizes!r}")
    problems: list[str] = []
    details: list[dict[str, Any]] = []
    for n in world_sizes:
        res = run_check(exercise, "disttutor.checks.allreduce", obj, tuple(names), nproc=n,
                        timeout=timeout, collective_timeout=collective_timeout, **launch_kw)
        details += res.details
        if not res.passed:
            problems += [f"with {n} ranks, {p}" for p in res.problems]
            if exercise == "2.1" and any("waited more than" in p for p in res.problems):
                problems.append("hint: a rank waited for a message nobody sent. In each step every rank must "
                                "send to its right neighbour AND receive from its left one: post both with "
                                "dist.isend/dist.irecv, then wait on both (two blocking sends/recvs facing "
                                "each other wait forever)")
            break
    return CheckResult(exercise, not problems, problems, details)


def check_ring_allreduce(fn: Callable | str, world_sizes: Sequence[int] = (2, 3, 4), **kw: Any) -> CheckResult:
    """Exercise 2.1: is ``fn(tensor)`` an in-place sum all-reduce for every case and world size?"""
    return check_all_reduce(fn, None, world_sizes, "2.1", **kw)


def check_halves(fn: Callable | str, world_sizes: Sequence[int] = (2, 3, 4), **kw: Any) -> CheckResult:
    """Exercise 2.2: ``fn(tensor)`` sums in place through a reduce-scatter and an all-gather, every case."""
    return check_all_reduce(fn, [function_name(fn, "all_reduce_from_halves")], world_sizes, "2.2",
                            args={"halves": True}, **kw)


main = cli(CheckConfig, run)


if __name__ == "__main__":
    main()
