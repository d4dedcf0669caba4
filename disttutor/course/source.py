"""Quote the *installed* torch source, so a notebook shows what your PyTorch really does.

Introduced in chapter 3 (``nn.DataParallel``'s forward, its threads, its
broadcast and reduce); any chapter that explains torch by its code uses it.
A quote is looked up by the lines it must contain, not by line numbers, and a
missing line raises: when a torch release changes the code a chapter
describes, the notebook fails loudly instead of quoting something else.
"""
from __future__ import annotations

import inspect
import os
from typing import Callable

import torch

__all__ = ["source_lines"]


def source_lines(obj: Callable | type, *needles: str, context: int = 0) -> list[str]:
    """Lines of ``obj``'s installed source that contain any of ``needles`` (``file:line: code``).

    Raises if a needle is missing, so a notebook that quotes torch fails loudly
    when a torch release changes the code it describes.
    """
    lines, start = inspect.getsourcelines(obj)
    where = os.path.relpath(inspect.getsourcefile(obj) or "?", os.path.dirname(os.path.dirname(torch.__file__)))
    hits: list[int] = []
    for needle in needles:
        found = [i for i, ln in enumerate(lines) if needle in ln]
        if not found:
            raise LookupError(f"{needle!r} not found in the source of {getattr(obj, '__qualname__', obj)}")
        hits += found
    keep = sorted({j for i in hits for j in range(max(0, i - context), min(len(lines), i + context + 1))})
    return [f"{where}:{start + i}: {lines[i].rstrip()}" for i in keep]
