"""Which edition a kernel shows: English, or the Chinese edition (``chapters/zh/``, ``workspace/zh/``).

The notebooks of both editions run the same code cells, so the language of the course's own cards
(the chapter header, exercise cards, hints, answers, predictions) is decided where the cell runs:
``DISTTUTOR_LANG`` (``en`` or ``zh``) when set, otherwise the kernel's folder, which JupyterLab makes
the notebook's own: a folder named ``zh`` is the Chinese edition. Kernel side; imports no torch.
"""
from __future__ import annotations

import os

LANGS = ("en", "zh")


def current() -> str:
    env = os.environ.get("DISTTUTOR_LANG", "").strip().lower()
    if env:
        if env not in LANGS:
            raise ValueError(f"DISTTUTOR_LANG={env!r}: the course's languages are {', '.join(LANGS)}")
        return env
    return "zh" if os.path.basename(os.getcwd()) == "zh" else "en"


def checked(lang: str | None) -> str:
    """``lang``, or the current language when None; a clear error for any other language."""
    lang = current() if lang is None else lang
    if lang not in LANGS:
        raise ValueError(f"language {lang!r}: the course's languages are {', '.join(LANGS)}")
    return lang
