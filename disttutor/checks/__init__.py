"""Exercise checkers: run learner code on real ranks and compare with a reference.

Learner code reaches the ranks as *source* (see :mod:`disttutor.checks.adapter`),
never as a pickle from the kernel's ``__main__``. Every exercise is listed once
in :data:`EXERCISES` (:mod:`disttutor.checks.registry`).
"""
from disttutor.checks.adapter import CheckResult, load_exercise, write_exercise
from disttutor.checks.registry import EXERCISES, Exercise, exercise, hint


def check(exercise_id: str, obj):
    """Run exercise ``exercise_id``'s checker on ``obj`` (a function/class, a .py path, or source)."""
    return exercise(exercise_id).check_function()(obj)


__all__ = ["CheckResult", "EXERCISES", "Exercise", "check", "exercise", "hint", "load_exercise", "write_exercise"]
