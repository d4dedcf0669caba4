"""What an exercise is: :class:`Exercise` (its checker, stub, solution, hints, kind), validated on creation.

The exercises themselves are listed in :mod:`disttutor.checks.exercise_sets` and gathered, in chapter
order, by :mod:`disttutor.checks.registry`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

DIFFICULTIES = ("warm-up", "core", "stretch")
# build: the learner writes real distributed code, graded on ranks; fix: a broken program to repair
# (``broken``); puzzle: a small computation or reading (a schedule, bytes, a trace), graded at once
KINDS = ("build", "fix", "puzzle")


@dataclass(frozen=True)
class Exercise:
    id: str                    # "2.1": chapter.number, as the stub's NotImplementedError names it
    chapter: int
    title: str
    stub: str                  # the function/class the learner writes in the notebook
    checker: str               # "module:function" called as function(learner_obj) -> CheckResult
    solution: str              # path relative to the repository root
    hints: tuple[str, ...] = ()  # three: a nudge, the idea, the path (never the formula or the code)
    # "fix the bug" exercises start from a broken program, not a NotImplementedError stub: the path
    # of that program (its checker says "still the broken program" while the learner's code equals it)
    broken: str = ""
    difficulty: str = ""       # "warm-up", "core" or "stretch": shown above the stub
    minutes: int = 0           # the time a learner should plan for it, shown above the stub
    kind: str = ""             # "build", "fix" or "puzzle" (KINDS): shown above the stub, listed by grade
    # the course's own implementations of the answer (modules): the learner's code may not call them
    # (disttutor.checks.guard refuses it, naming the module), and a graded check runs where they are absent
    references: tuple[str, ...] = ()

    def __post_init__(self):
        if f"{self.chapter}." != self.id[:len(str(self.chapter)) + 1] or ":" not in self.checker:
            raise ValueError(f"exercise {self.id!r}: id must start with its chapter and checker be 'module:function'")
        # A nudge (where to look, a question), the idea (the mechanism in words), the path (the steps in
        # words, the APIs to read about): never the formula or a line of the solution (tests/test_hints.py).
        if len(self.hints) != 3:
            raise ValueError(f"exercise {self.id}: give three hints (a nudge, the idea, the path), "
                             f"got {len(self.hints)}")
        # Shown above the stub (disttutor.course.shape.card) and planned with in TEACHING.md; grade lists the kind.
        if self.difficulty not in DIFFICULTIES:
            raise ValueError(f"exercise {self.id}: difficulty must be one of {', '.join(DIFFICULTIES)}, "
                             f"got {self.difficulty!r}")
        if isinstance(self.minutes, bool) or not isinstance(self.minutes, int) or self.minutes <= 0:
            raise ValueError(f"exercise {self.id}: minutes must be a positive whole number, got {self.minutes!r}")
        if self.kind not in KINDS:
            raise ValueError(f"exercise {self.id}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if (self.kind == "fix") != bool(self.broken):
            raise ValueError(f"exercise {self.id}: a 'fix' exercise starts from a broken program, and only it")

    def check_function(self) -> Callable[..., Any]:
        module, func = self.checker.split(":")
        return getattr(importlib.import_module(module), func)
