"""Checkers for Exercises 7.1 (the order in which one rank runs a 1F1B schedule) and 7.2 (the
bubble of a measured pipeline run) -- chapter 7.

Exercise 7.1.

The learner writes ``one_f_one_b(rank, p, m)``: the list of ``("F", i)`` / ``("B", i)``
actions rank ``rank`` of a ``p``-stage pipeline runs for ``m`` micro-batches. The checker

1. runs torch's own ``Schedule1F1B`` on real ranks once (chapter 7's program,
   :mod:`disttutor.programs.pipeline`, 3 ranks, 4 micro-batches) and compares every rank's
   *measured* order of forwards and backwards with the learner's list;
2. then compares with :func:`disttutor.pipeline.schedules.rank_orders` (the chapter's model of torch's
   schedule, itself tested against torch's runs) for shapes not launched here: more ranks,
   more micro-batches, and fewer micro-batches than stages.
Orders are lists of small integers: the comparison is exact.

Exercise 7.2. The learner writes ``bubble_fraction(events)``: from every rank's reported
events ``[kind, mb, stage, start_s, end_s]`` (what :mod:`disttutor.programs.pipeline` reports),
the fraction of the run's window that the ranks spent not computing. Checked here, without
ranks, against :func:`disttutor.pipeline.schedules.bubble_stats` on drawn schedules and on event lists
that look like measurements: absolute clock times, uneven slots, gaps, events out of order.
"""
from __future__ import annotations

from typing import Callable

import random

from disttutor.pipeline.schedules import PipeSpec, bubble_stats, formula, rank_orders, simulate, slots_from_events
from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, function_name, load_learner, run_local

LAUNCHED = (3, 4)  # p ranks, m micro-batches run on real ranks
MODELLED = ((4, 8), (4, 2), (2, 5), (1, 3))


def measured_orders(p: int, m: int, timeout: float = JOB_TIMEOUT_S) -> list[list[tuple[str, int]]]:
    """Each rank's order of F and B on a real run of torch's Schedule1F1B (events sorted by start time)."""
    from disttutor.launcher.launch import launch

    res = launch("pipeline", p, {"schedule": "1f1b", "microbatches": m, "steps": 1, "batch": 4 * m, "width": 8,
                                 "no_reference": True}, stream=False, timeout=timeout)
    return [[(k, int(mb)) for k, mb, _stage, _t0, _t1 in sorted(r["events"], key=lambda e: e[3])]
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
        order = load_learner(fn, function_name(fn, "one_f_one_b"), "7.1")
        order(0, 2, 2)  # a stub fails here, before anything is launched
    except NotImplementedError as e:
        return CheckResult("7.1", False, [f"still a stub -- {e}"])
    except Exception as e:
        return CheckResult("7.1", False, [f"the function raised {type(e).__name__}: {e}"])
    # The modelled shapes first (no launch: a wrong order fails in a blink), then the real run.
    cases = []
    for pp, mm in MODELLED:
        orders = rank_orders(PipeSpec("1f1b", p=pp, m=mm))
        cases += [(r, pp, mm, [(a.kind, a.mb) for a in orders[r]], "the model of torch's Schedule1F1B order")
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


# Sums of a few dozen float64 durations, in the learner's order instead of ours: ~1e-15 relative;
# 1e-9 is far below any real mistake (a per-rank window, a window from 0, the formula: > 1e-2).
BUBBLE_TOL = 1e-9
DRAWN = (PipeSpec("gpipe", p=4, m=8), PipeSpec("1f1b", p=4, m=4), PipeSpec("interleaved", p=2, m=4, v=2),
         PipeSpec("1f1b", p=1, m=3))


def bubble_cases() -> list[tuple[str, list[list[list]], int, float]]:
    """(what, timelines, p, the formula's value) -- drawn schedules, then measured-looking ones."""
    rng = random.Random(7)
    cases = []
    for spec in DRAWN:
        tl = [[[s.kind, s.mb, s.stage, s.start, s.end] for s in simulate(spec).slots if s.rank == r]
              for r in range(spec.p)]
        cases.append((f"the drawn {spec.schedule} schedule, p={spec.p}, m={spec.m}", tl, spec.p, formula(spec)))
    for spec in (PipeSpec("1f1b", p=3, m=4), PipeSpec("gpipe", p=2, m=3)):
        # Like a real report: perf_counter times (large offsets), uneven slots, gaps, ranks starting
        # at different moments, events listed out of order.
        tl = []
        for r in range(spec.p):
            t, evs = 5000.0 + 0.01 * r, []
            for s in (x for x in simulate(spec).slots if x.rank == r):
                t = max(t, 5000.0 + s.start * 0.02) + rng.uniform(0, 0.003)
                evs.append([s.kind, s.mb, s.stage, t, t + (s.end - s.start) * 0.02 * rng.uniform(0.7, 1.6)])
                t = evs[-1][4]
            rng.shuffle(evs)
            tl.append(evs)
        cases.append((f"measured-looking {spec.schedule} events, p={spec.p}, m={spec.m}", tl, spec.p, formula(spec)))
    return cases


def _bubble_problem(fn: Callable) -> str | None:
    for what, tl, p, drawn_formula in bubble_cases():
        want = bubble_stats(slots_from_events(tl), p)["bubble"]
        got = fn([[list(e) for e in evs] for evs in tl])  # a copy: a learner may sort in place
        try:
            got = float(got)
        except (TypeError, ValueError):
            return f"{what}: expected a number (the fraction), got {got!r}"[:300]
        if abs(got - want) <= BUBBLE_TOL:
            continue
        evs = [e for r in tl for e in r]
        busy, last = sum(e[4] - e[3] for e in evs), max(e[4] for e in evs)
        per_rank = [1 - sum(e[4] - e[3] for e in r) / (max(e[4] for e in r) - min(e[3] for e in r)) for r in tl]
        why = ""
        if abs(got - (1 - busy / (p * last))) <= 1e-9:
            why = " -- the window starts at the earliest event, not at time 0 (the times are clock readings)"
        elif abs(got - sum(per_rank) / p) <= 1e-9:
            why = (" -- one window for all ranks (first start to last end anywhere): a rank that starts late "
                   "or ends early is idle in the rest of it")
        elif abs(got - drawn_formula) <= 1e-9 and abs(want - drawn_formula) > 1e-9:
            why = " -- that is the formula (p-1)/(m+p-1), a drawing's value: measure the events instead"
        elif not 0.0 <= got <= 1.0:
            why = " -- a fraction of the window lies between 0 and 1"
        return f"{what}: yours is {got:.6f}, the events give {want:.6f}{why}"
    return None


def check_bubble_fraction(fn: Callable | str) -> CheckResult:
    """Exercise 7.2: is ``fn(events)`` the bubble fraction of the events, measured?"""
    return run_local("7.2", fn, function_name(fn, "bubble_fraction"), _bubble_problem)
