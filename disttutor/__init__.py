"""disttutor: a hands-on course on PyTorch distributed training.

Notebooks use a few names from here; importing this package does not import
torch (the launcher runs torch in subprocesses only).
"""
from __future__ import annotations

__version__ = "0.1.0"

from disttutor.contract.machine import usable_cores as cores  # noqa: E402
from disttutor.contract.machine import quiet  # noqa: E402
from disttutor.launcher.launch import default_backend, free_port, launch, resolve_program  # noqa: E402
from disttutor.launcher.results import LaunchError, LaunchInterrupted, LaunchTimeout, RankResult, RunResult  # noqa: E402


def doctor(**kwargs):
    """Check this machine: torch, cores, GPUs, built backends, a 2-rank all-reduce."""
    from disttutor.course.doctor import doctor as _doctor

    return _doctor(**kwargs)


def load_ipython_extension(ipython):
    """``%load_ext disttutor``: the ``%ranks`` / ``%%ranks`` live-ranks magics (chapter 0)."""
    from disttutor.live.magics import load

    load(ipython)


__all__ = ["launch", "cores", "quiet", "default_backend", "doctor", "free_port", "resolve_program", "RunResult", "RankResult",
           "LaunchError", "LaunchTimeout", "LaunchInterrupted", "__version__"]
