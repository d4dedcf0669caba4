"""Exercise checkers: run learner code on real ranks and compare with a reference.

Learner code reaches the ranks as *source* (see :mod:`disttutor.checks.adapter`),
never as a pickle from the kernel's ``__main__``.
"""
from .adapter import CheckResult, load_exercise, write_exercise

__all__ = ["CheckResult", "load_exercise", "write_exercise"]
