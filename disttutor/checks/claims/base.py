"""Named one-line checks for the claims a chapter makes about its runs (kernel side).

A chapter cell reads ``check_resumed_bitwise(ref, resumed)`` instead of five ``assert`` lines of
plumbing: each check states one claim, raises an :class:`AssertionError` whose message says what
failed and with which values, and returns a one-line verdict the cell prints. Tolerances are
arguments with the reason beside the call (or here, where the claim fixes them).
"""
from __future__ import annotations


def claim(ok: bool, message: str) -> None:
    """``assert ok, message`` that survives ``python -O`` and reads as a sentence."""
    if not ok:
        raise AssertionError(message)
