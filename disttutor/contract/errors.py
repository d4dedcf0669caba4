"""How both sides read an error's text (chapter 0): one readable line, and whose fault it was.

A rank classifies its own exception (:func:`blame_of`) when it writes its report; the launcher
classifies what a rank that could not report left in its log, and shows every error as one
:func:`readable_error` line. Torch-free.
"""
from __future__ import annotations

import re

# Gloo's C++ messages: "[/__w/pytorch/.../pair.cc:537] Read error ... Check the logs ... GLHF! 🏖️"
_CPP_WHERE = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp):\d+\]\s*")
_CPP_BOILERPLATE = re.compile(r"\s*This is typically caused by .*$", re.S)
_ARGPARSE = re.compile(r"^\S+: error: ")


def readable_error(raw: str | None, width: int = 240) -> str | None:
    """One line a learner can read: no C++ source locations, no "GLHF!" boilerplate, bounded length.

    The raw text stays in :attr:`RankResult.raw_error` (and the rank's log).
    """
    if raw is None:
        return None
    text = _CPP_BOILERPLATE.sub("", _CPP_WHERE.sub("", raw)).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return raw.strip()
    first = " ".join(lines[0].split())
    # A header such as RPC's "TypeError: On WorkerInfo(id=3, name=worker3):" says where, not what:
    # the cause is the last exception line of the remote traceback below it.
    if first.endswith(":") and len(lines) > 1:
        cause = next((ln.strip() for ln in reversed(lines[1:]) if is_exception_line(ln)), None)
        if cause:
            first = f"{first} {' '.join(cause.split())}"
    text = first
    return text if len(text) <= width else text[: width - 3] + "..."


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b(?::\s.*)?$")


def is_exception_line(line: str) -> bool:
    """``"RuntimeError: ..."``: the last line of a Python traceback."""
    return bool(_EXCEPTION_LINE.match(line.strip()))


def is_usage_error(line: str) -> bool:
    """``"hello.py: error: unrecognized arguments: --x"``: argparse rejected the command line."""
    return bool(_ARGPARSE.match(line))


def blame_of(text: str) -> str:
    """Who caused an error, judged from its text: "wait" (a peer never came to a
    collective), "peer" (a peer died in one) or "self". Used by the ranks
    (the rank runtime) and, for ranks that could not report, by the launcher."""
    low = text.lower()
    if "timed out" in low or "timeout" in low:
        return "wait"
    if "connection closed by peer" in low or "connection reset" in low or "broken pipe" in low:
        return "peer"
    return "self"
