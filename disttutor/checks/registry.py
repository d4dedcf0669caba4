"""One list of every exercise in the course (each chapter adds its own entries).

Tests iterate :data:`EXERCISES`: every solution passes its checker, every
untouched stub (taken from the chapter's notebook source) fails with a message
naming its exercise. The grader (``disttutor grade``) reads the learner's code
for ``stub`` out of a notebook and runs ``checker`` on it. :func:`hint` gives
the hints one at a time (a nudge, the idea, the path), the solution file last (each call one step further).
"""
from __future__ import annotations

import os

from disttutor.checks.exercise import DIFFICULTIES, KINDS, Exercise  # noqa: F401  (re-exported)
from disttutor.checks.exercise_sets import early, late

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXERCISES: tuple[Exercise, ...] = early.EXERCISES + late.EXERCISES



def exercise(exercise_id: str) -> Exercise:
    for e in EXERCISES:
        if e.id == exercise_id:
            return e
    raise ValueError(f"no exercise {exercise_id!r}; exercises are {', '.join(e.id for e in EXERCISES)}")


_SHOWN: dict[str, int] = {}  # exercise id -> the last hint level shown in this kernel


def hint(exercise_id: str, level: int | None = None) -> str:
    """The next hint of an exercise: a nudge, the idea, the path, then where the solution is.

    Each call without ``level`` goes one step further than the last hint shown for that exercise
    (in this kernel); ``level`` (1, 2, ...) asks for one directly, and later calls go on from it.
    """
    e = exercise(exercise_id)
    if level is None:
        level = min(_SHOWN.get(e.id, 0) + 1, len(e.hints) + 1)
    elif isinstance(level, bool) or not isinstance(level, int) or level < 1:
        raise ValueError(f"hint levels start at 1, got {level!r}")
    _SHOWN[e.id] = max(_SHOWN.get(e.id, 0), level)
    if level <= len(e.hints):
        return f"Exercise {e.id}, hint {level}/{len(e.hints)}: {e.hints[level - 1]}"
    if not os.path.exists(os.path.join(ROOT, e.solution)):  # a classroom copy (disttutor export) has no solutions/
        return f"Exercise {e.id}: no more hints -- this copy of the course has no solutions: ask your teacher."
    return f"Exercise {e.id}: no more hints -- the solution is {e.solution} (in the course's root)."
