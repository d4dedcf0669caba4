"""Checker for Exercise 9.1 (find the straggler from the profiler's traces) -- chapter 9.

How the checker knows the answer: it launches :mod:`disttutor.programs.profile_ddp`
with ``slow_rank=-2``, so rank 0 draws the slow rank *at random* during the run
and writes it to ``answer.json`` in the run directory. The learner's function
gets only the traces. It is then asked again with the ranks relabelled (a
rotation of the trace dict's keys): a right answer follows the rotation, a
constant guess cannot.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Callable

from disttutor.checks.adapter import CheckResult, function_name, run_local, stub_problem, to_source

NPROC = 3  # a blind guess is right 1 time in 3; the relabelled rounds make it 1 in 27


def check_straggler(fn: Callable | str, nproc: int = NPROC, slow_ms: float = 40.0) -> CheckResult:
    """Exercise 9.1: ``fn(traces) -> rank``, ``traces = {rank: [trace events]}``."""
    from disttutor.launcher.launch import launch
    from disttutor.programs.profile_ddp import ANSWER, ProfileConfig
    from disttutor.troubleshoot.traces import load

    stub = stub_problem(to_source(fn))
    if stub:  # no ranks needed to say so
        return CheckResult("9.1", False, [stub])
    run_dir = tempfile.mkdtemp(prefix="disttutor-run-")
    try:
        print(f"checking Exercise 9.1: profiling {nproc} ranks, one of them slow ...", end="", flush=True)
        res = launch("profile_ddp", nproc, ProfileConfig(slow_rank=-2, slow_ms=slow_ms), run_dir=run_dir,
                     stream=False, check=False, timeout=240)
        print(f" done in {res.wall_s:.0f} s", flush=True)
        if not res.ok:
            return CheckResult("9.1", False, [f"the profiled run failed: {res.headline()}"])
        answer = json.load(open(os.path.join(run_dir, ANSWER)))["slow_rank"]
        traces = load(run_dir)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)

    def check(learner: Callable) -> str | None:
        for shift in range(nproc):  # relabel rank r as (r + shift) % n: the straggler moves with it
            relabelled = {(r + shift) % nproc: ev for r, ev in traces.items()}
            expected = (answer + shift) % nproc
            got = learner({r: list(ev) for r, ev in relabelled.items()})
            if got != expected:
                which = "the traces as recorded" if shift == 0 else f"the same traces with ranks relabelled (+{shift})"
                return (f"for {which} you answered {got!r}; the slow rank is {expected}. The slow rank spends "
                        f"longer in its own work; the others wait for it inside backward's all-reduce")
        return None

    return run_local("9.1", fn, function_name(fn, "find_straggler"), check)
