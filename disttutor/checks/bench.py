"""Checker for Exercise 13.2: the learner writes the collective benchmark (chapter 13).

``bench_all_reduce(x, warmup, iters)`` runs on every rank and returns, on every rank, the median over
``iters`` timed all-reduces of ``x`` of the *slowest* rank's time (seconds), after ``warmup`` untimed
calls, each timed call started right after a barrier: what ``scale_bench`` measures.

Rank side (``python -m disttutor.checks.bench``), two passes on real gloo ranks:

1. **Scripted clock.** ``time.perf_counter`` (and ``perf_counter_ns``, ``time``, ``monotonic``) return a
   per-rank clock that only an all-reduce of ``x`` moves, by a scripted duration per rank and call (a
   slow warm-up, then per-call times that differ between ranks, one outlier). Every all-reduce,
   barrier and clock reading is recorded, so each mistake is seen in the calls, not guessed from
   noisy times: a rank that never reads the clock (timing rank 0 only), a clock read before the
   warm-up is over, a timed call with no barrier since the previous one, a whole loop timed at once.
   The returned value must equal the script's answer, the median over calls of the slowest rank's
   time, which is what ``scale_bench``'s own timing code returns under the same script (asserted
   where scale_bench is present; exactly, up to float rounding); a miss is matched against the mean, one rank's own median, the
   slowest rank's median, the fastest rank, milliseconds.
2. **Real clock.** The learner's function and ``scale_bench``'s timing, alternately, on 1 MiB: it must
   return a positive number of seconds; both medians and their ratio go into the report (``details``).
   The ratio is not graded: on shared cores other processes stretch one timed run several times over
   (seen here: 5.96 ms against 0.90 and 1.08 ms for the same call), so only the scripted pass can tell
   a mistake from load.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from disttutor.contract.options import cli, opt
from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, run_check

EXERCISE = "13.2"
NUMEL = 1 << 16         # the scripted pass's x: 256 KiB of float32, divisible by any small world size
SETUP_S = 0.2           # a scripted warm-up call: connection and buffer set-up
TIMED_MS = ((1.0, 1.2, 9.0, 1.1, 1.0),   # rank 0: one slow outlier at the third call
            (2.0, 1.5, 1.0, 2.5, 1.8))   # rank 1 (and any other): slower on most calls
REAL_ROUNDS = 2  # real-clock runs of the learner's function, each followed by one of scale_bench's
CLOCKS = ("perf_counter", "time", "monotonic")


class Script:
    """A rank's scripted clock and the record of its calls."""

    def __init__(self, rank: int, warmup: int):
        self.rank, self.warmup = rank, warmup
        self.now, self.calls, self.events = 1000.0, 0, []  # events: "x" all-reduce of x, "b" barrier, "t" clock

    def clock(self) -> float:
        self.events.append("t")
        return self.now

    def advance(self):
        k = self.calls
        row = TIMED_MS[min(self.rank, len(TIMED_MS) - 1)]
        self.now += SETUP_S if k < self.warmup else row[(k - self.warmup) % len(row)] / 1e3
        self.calls += 1


def scripted(fn: Callable, x, script: Script):
    """Run ``fn`` with the clock and the calls instrumented; restore everything afterwards."""
    import torch.distributed as dist

    real = {name: getattr(time, name) for name in CLOCKS + tuple(c + "_ns" for c in CLOCKS)}
    real_ar, real_barrier = dist.all_reduce, dist.barrier

    def all_reduce(tensor, *a, **k):
        payload = tensor.numel() == x.numel()
        if payload:
            script.events.append("x")
        out = real_ar(tensor, *a, **k)
        if payload:
            script.advance()
        return out

    def barrier(*a, **k):
        script.events.append("b")
        return real_barrier(*a, **k)

    for name in CLOCKS:
        setattr(time, name, script.clock)
        setattr(time, name + "_ns", lambda: int(script.clock() * 1e9))
    dist.all_reduce, dist.barrier = all_reduce, barrier
    try:
        return fn(x)
    finally:
        for name, f in real.items():
            setattr(time, name, f)
        dist.all_reduce, dist.barrier = real_ar, real_barrier


def structure_problem(ev: list[str], warmup: int, iters: int) -> str | None:
    """What the record of one rank's calls says is wrong, or None."""
    calls = ev.count("x")
    if "t" not in ev:
        return ("this rank never read the clock: time on every rank (the call ends when the slowest rank's "
                "does, and only a rank that times itself knows its time)")
    before = ev[:ev.index("t")].count("x")
    if before < warmup:
        return (f"the clock started after {before} of the {warmup} warm-up calls: the first calls pay for "
                "set-up (connections, buffers), so warm up before timing")
    if calls != warmup + iters:
        return f"{calls} all-reduces of x, expected warmup + iters = {warmup + iters}"
    xs = [i for i, e in enumerate(ev) if e == "x"]
    for j in range(iters):
        i = xs[warmup + j]
        prev = xs[warmup + j - 1] if warmup + j else -1
        gap, after = ev[prev + 1:i], ev[i + 1:xs[warmup + j + 1] if j + 1 < iters else len(ev)]
        if "t" not in gap or "t" not in after:
            return (f"timed call {j + 1} of {iters} has no clock reading right before and after it: time each "
                    "call on its own (a whole loop timed at once gives a mean, and no slowest rank per call)")
        start = len(gap) - 1 - gap[::-1].index("t")  # the clock reading that starts this call's timing
        if "b" not in gap[:start]:
            return (f"timed call {j + 1} of {iters}: no barrier between the previous all-reduce and the clock's "
                    "start -- the ranks start apart, and the first to arrive times its wait for the others")
    return None


def value_problem(got: list, want: float, script_times: list[list[float]]) -> str | None:
    """The returned values (one per rank) against ``want``; the likely slip by name."""
    if any(not isinstance(g, (int, float)) or isinstance(g, bool) for g in got):
        return f"returned {[type(g).__name__ for g in got]}: return one number, seconds, on every rank"
    if len({float(g) for g in got}) > 1:
        return (f"the ranks returned different times ({', '.join(f'{g * 1e3:.3g} ms' for g in got)}): each "
                "rank timed only itself; a call ends when its slowest rank does, so combine the ranks' times "
                "per call and return the same number on every rank")
    g = float(got[0])
    if abs(g - want) <= 1e-9 + 1e-6 * want:
        return None
    per_call = list(zip(*script_times))
    known = {
        statistics.mean(max(c) for c in per_call): "the mean, not the median: one slow call pulls the mean",
        max(statistics.median(t) for t in script_times): "the slowest rank's median: take the slowest rank "
        "per call first, then the median over calls",
        statistics.median(min(c) for c in per_call): "the fastest rank per call: a call ends when its slowest "
        "rank does",
        statistics.median(statistics.mean(c) for c in per_call): "the ranks' average per call: a call ends "
        "when its slowest rank does",
        want * 1e3: "milliseconds: return seconds",
    }
    why = next((m for v, m in known.items() if abs(g - v) <= 1e-6 * v), None)
    return f"returned {g * 1e3:.4g} ms, scale_bench's timing gives {want * 1e3:.4g} ms" + (f" -- {why}" if why else "")


@dataclass(frozen=True)
class BenchCheckConfig(LearnerCode):
    warmup: int = opt(2, "untimed calls the learner's function is asked for")
    iters: int = opt(5, "timed calls the learner's function is asked for")


def has_scale_bench() -> bool:
    """The grader's sandbox leaves out the exercise's references (scale_bench among them)."""
    import importlib.util

    return importlib.util.find_spec("disttutor.programs.scale_bench") is not None


def bench_reference(ctx, numel: int, warmup: int, iters: int) -> float:
    """``scale_bench``'s own timing of one all-reduce size: its median of the slowest rank per call."""
    from disttutor.programs.scale_bench import ScaleBenchConfig, time_collectives

    cfg = ScaleBenchConfig(sizes=(numel * 4,), ops=("all_reduce",), iters=iters, warmup=warmup,
                           matmul=(128,), checkpoint_mb=0.0)
    return time_collectives(cfg, ctx)[0]["time_s"]


def run(cfg: BenchCheckConfig) -> None:
    import torch
    import torch.distributed as dist

    from disttutor.checks.adapter import load_exercise
    from disttutor.rank import runtime

    with runtime.setup() as ctx:
        torch.set_num_threads(1)
        fn = load_exercise(cfg.source, cfg.name)
        learner = lambda x: fn(x, cfg.warmup, cfg.iters)  # noqa: E731
        rows = [[t / 1e3 for t in TIMED_MS[min(r, len(TIMED_MS) - 1)][:cfg.iters]] for r in range(ctx.world_size)]
        want = statistics.median(max(call) for call in zip(*rows))  # the script's answer, by hand
        if has_scale_bench():  # and scale_bench's own timing code under the same script (absent when graded)
            by_bench = scripted(lambda x: bench_reference(ctx, x.numel(), cfg.warmup, cfg.iters),
                                torch.zeros(NUMEL), Script(ctx.rank, cfg.warmup))
            assert abs(by_bench - want) <= 1e-9, f"internal: scale_bench gives {by_bench}, the script {want}"
        mine = Script(ctx.rank, cfg.warmup)
        got = scripted(learner, torch.zeros(NUMEL), mine)
        problem = structure_problem(mine.events, cfg.warmup, cfg.iters)
        everyone: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(everyone, {"got": got, "problem": problem})
        if problem is None and not any(e["problem"] for e in everyone):
            problem = value_problem([e["got"] for e in everyone], want, rows)
        flag = torch.tensor([int(any(e["problem"] for e in everyone) or problem is not None)])
        dist.all_reduce(flag)
        if int(flag):
            runtime.report(passed=problem is None, problem=problem, note=None if problem else "another rank failed")
            return
        x = torch.zeros(1 << 18)  # real clock: 1 MiB, the learner's function between scale_bench's runs
        timing = has_scale_bench()
        real, bench = [], [bench_reference(ctx, x.numel(), 2, 5)] if timing else []
        for _ in range(REAL_ROUNDS):
            real.append(float(fn(x, 2, 5)))
            if timing:
                bench.append(bench_reference(ctx, x.numel(), 2, 5))
        ok = all(math.isfinite(t) and t > 0 for t in real)
        runtime.report(passed=ok, scripted_s=got, real_s=real, scale_bench_s=bench,
                       ratio=statistics.median(real) / statistics.median(bench) if bench else None,
                       problem=None if ok else f"on the real clock it returned {real}: seconds, a positive number")

def check_bench(fn: Callable | str, nproc: int = 2, timeout: float = JOB_TIMEOUT_S) -> CheckResult:
    """Exercise 13.2: does ``fn(x, warmup, iters)`` time an all-reduce as ``scale_bench`` does?"""
    return run_check(EXERCISE, "disttutor.checks.bench", fn, function_name(fn, "bench_all_reduce"), nproc=nproc,
                     timeout=timeout, collective_timeout=10.0,
                     hint="a rank waits in a collective the other ranks never call: every rank must call every "
                          "all-reduce and barrier")


main = cli(BenchCheckConfig, run)


if __name__ == "__main__":
    main()
