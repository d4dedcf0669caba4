"""Small validation helpers for the programs' typed configs (``__post_init__``).

Introduced in chapter 0's house style: every program's config is a frozen
dataclass that rejects bad values with a clear message before any process
group exists, so a learner never sees a deep torch traceback instead.
"""
from __future__ import annotations

from typing import Any


def require_positive(cfg: Any, *names: str, flag_style: bool = False) -> None:
    """Raise ``ValueError("<name> must be >= 1, got <v>")`` for the first field below 1 (or not an int).

    ``flag_style`` names the field as its command-line flag (``--layers-per-stage``).
    """
    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            label = "--" + name.replace("_", "-") if flag_style else name
            raise ValueError(f"{label} must be >= 1, got {value!r}")


def require_non_negative(cfg: Any, *names: str) -> None:
    """Raise ``ValueError("<name> must be >= 0, got <v>")`` for the first numeric field below 0."""
    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")
