"""One list of every exercise in the course (each chapter adds its own entries).

Introduced with chapter 2's first exercise. Tests iterate :data:`EXERCISES`:
every solution passes its checker, every untouched stub (taken from the
chapter's notebook source) fails with a message naming its exercise. The
grader (``disttutor grade``) reads the learner's code for ``stub`` out of a
notebook and runs ``checker`` on it.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Exercise:
    id: str                    # "2.1": chapter.number, as the stub's NotImplementedError names it
    chapter: int
    title: str
    stub: str                  # the function/class the learner writes in the notebook
    checker: str               # "module:function" called as function(learner_obj) -> CheckResult
    solution: str              # path relative to the repository root
    hints: tuple[str, ...] = ()  # progressive: a first nudge, then a stronger one

    def check_function(self) -> Callable[..., Any]:
        module, func = self.checker.split(":")
        return getattr(importlib.import_module(module), func)


EXERCISES: tuple[Exercise, ...] = (
    Exercise("2.1", 2, "ring all-reduce from send/recv", "ring_all_reduce",
             "disttutor.checks.allreduce:check_ring_allreduce", "solutions/ex2_1_ring_allreduce.py"),
    Exercise("4.1", 4, "naive DDP: all-reduce every gradient", "sync_gradients",
             "disttutor.checks.ddp:check_naive_ddp", "solutions/ex4_1_naive_ddp.py"),
    Exercise("4.2", 4, "bucketed, overlapped DDP", "OverlappedDDP",
             "disttutor.checks.ddp:check_bucketed_ddp", "solutions/ex4_2_bucketed_ddp.py"),
    Exercise("8.1", 8, "no_sync() for the from-scratch bucketed DDP", "NoSyncDDP",
             "disttutor.checks.perf:check_no_sync", "solutions/ex8_1_no_sync.py",
             ("a flag set by no_sync() and restored when it exits (contextlib.contextmanager, try/finally)",
              "override _grad_ready: while the flag says 'no sync', return without super()._grad_ready(p)")),
    Exercise("8.2", 8, "a gradient-compression communication hook", "fp16_compress_hook",
             "disttutor.checks.perf:check_compress_hook", "solutions/ex8_2_compress_hook.py",
             ("divide by the world size, convert to fp16, dist.all_reduce(t, async_op=True).get_future()",
              "fut.then(fn): copy fut.value()[0] back into bucket.buffer() and return the buffer")),
)


def exercise(exercise_id: str) -> Exercise:
    for e in EXERCISES:
        if e.id == exercise_id:
            return e
    raise ValueError(f"no exercise {exercise_id!r}; exercises are {', '.join(e.id for e in EXERCISES)}")
