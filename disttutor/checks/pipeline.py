"""Checker for Exercise 7.1 (chapter 7): the order in which one rank runs a 1F1B schedule.

The learner writes ``one_f_one_b(rank, p, m)``: the list of ``("F", i)`` / ``("B", i)``
actions rank ``rank`` of a ``p``-stage pipeline runs for ``m`` micro-batches. The checker

1. runs torch's own ``Schedule1F1B`` on real ranks once (chapter 7's program,
   :mod:`disttutor.programs.pipeline`, 3 ranks, 4 micro-batches) and compares every rank's
   *measured* order of forwards and backwards with the learner's list;
2. then compares with :func:`disttutor.schedules.rank_orders` (the chapter's model of torch's
   schedule, itself tested against torch's runs) for shapes not launched here: more ranks,
   more micro-batches, and fewer micro-batches than stages.
Orders are lists of small integers: the comparison is exact.
"""
from __future__ import annotations

from typing import Callable

from ..schedules import PipeSpec, rank_orders
from .adapter import JOB_TIMEOUT_S, CheckResult, function_name, load_learner

LAUNCHED = (3, 4)  # p ranks, m micro-batches run on real ranks
MODELLED = ((4, 8), (4, 2), (2, 5), (1, 3))


def measured_orders(p: int, m: int, timeout: float = JOB_TIMEOUT_S) -> list[list[tuple[str, int]]]:
    """Each rank's order of F and B on a real run of torch's Schedule1F1B (events sorted by start time)."""
    from ..launch import launch

    res = launch("pipeline", p, {"schedule": "1f1b", "microbatches": m, "steps": 1, "batch": 4 * m, "width": 8,
                                 "no_reference": True}, stream=False, timeout=timeout)
    return [[(k, int(mb)) for k, mb, _stage, _t0, _t1 in sorted(r["timeline"], key=lambda e: e[3])]
            for r in res.results]


def _normalise(got) -> list[tuple[str, int]] | None:
    try:
        return [(str(k), int(i)) for k, i in got]
    except (TypeError, ValueError):
        return None


def _first_difference(got, want: list[tuple[str, int]], rank: int, p: int, m: int, source: str) -> str | None:
    norm = _normalise(got)
    if norm is None:
        return f"expected a list of ('F', i) / ('B', i) pairs, got {got!r}"[:300]
    if norm == want:
        return None
    where = f"rank {rank} of p={p}, m={m}"
    for i, (a, b) in enumerate(zip(norm, want)):
        if a != b:
            return (f"{where}: action {i} is {b} in {source}, yours is {a} "
                    f"(torch: {' '.join(k + str(j) for k, j in want)})")
    return (f"{where}: {source} runs {len(want)} actions, yours has {len(norm)} "
            f"(torch: {' '.join(k + str(j) for k, j in want)})")


def check_one_f_one_b(fn: Callable | str, timeout: float = JOB_TIMEOUT_S) -> CheckResult:
    """Exercise 7.1: is ``fn(rank, p, m)`` the order torch's Schedule1F1B runs on that rank?"""
    try:
        order = load_learner(fn, function_name(fn, "one_f_one_b"))
        order(0, 2, 2)  # a stub fails here, before anything is launched
    except NotImplementedError as e:
        return CheckResult("7.1", False, [f"still a stub -- {e}"])
    except Exception as e:
        return CheckResult("7.1", False, [f"the function raised {type(e).__name__}: {e}"])
    # The modelled shapes first (no launch: a wrong order fails in a blink), then the real run.
    cases = []
    for pp, mm in MODELLED:
        orders = rank_orders(PipeSpec("1f1b", p=pp, m=mm))
        cases += [(r, pp, mm, [(a.kind, a.mb) for a in orders[r]], "torch's Schedule1F1B order")
                  for r in range(pp)]
    problem = _compare_all(order, cases)
    if problem:
        return CheckResult("7.1", False, [problem])
    p, m = LAUNCHED
    measured = [(r, p, m, want, "torch's Schedule1F1B measured on real ranks")
                for r, want in enumerate(measured_orders(p, m, timeout))]
    problem = _compare_all(order, measured)
    return CheckResult("7.1", problem is None, [problem] if problem else [])


def _compare_all(order: Callable, cases: list) -> str | None:
    for r, pp, mm, want, source in cases:
        try:
            got = order(r, pp, mm)
        except Exception as e:
            return f"rank {r} of p={pp}, m={mm}: the function raised {type(e).__name__}: {e}"
        problem = _first_difference(got, want, r, pp, mm, source)
        if problem:
            return problem
    return None
