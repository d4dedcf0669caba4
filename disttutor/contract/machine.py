"""How many cores a job really has (chapter 0): what both the launcher and the ranks size runs from.

``os.cpu_count()`` counts the machine's cores, not the ones this process may use: under
``taskset``, a Slurm allocation, a container's CPU limit or a classroom's cgroup it over-counts,
and a timed experiment sized from it puts several ranks on one core. Torch-free.
"""
from __future__ import annotations

import math
import os

from disttutor import contract


def _cgroup_quota(path: str = "/sys/fs/cgroup/cpu.max") -> float | None:
    """cgroup v2's CPU limit in cores (``"200000 100000"`` -> 2.0); None when unlimited or unknown."""
    try:
        quota, period = open(path).read().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup CPU limit (at least 1).

    ``DISTTUTOR_CORES`` overrides it (a teacher sizing 30 laptops alike, or a test faking a machine).
    """
    forced = os.environ.get(contract.ENV_CORES, "").strip()
    if forced:
        if not forced.isdigit() or int(forced) < 1:
            raise ValueError(f"{contract.ENV_CORES}={forced!r}: give a whole number of cores >= 1 (or unset it)")
        return int(forced)
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        n = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        n = min(n, max(1, math.floor(quota)))
    return max(1, n)


def real_cores() -> int:
    """The cores this process may really run on: :func:`usable_cores` without the ``DISTTUTOR_CORES`` override."""
    saved = os.environ.pop(contract.ENV_CORES, None)
    try:
        return usable_cores()
    finally:
        if saved is not None:
            os.environ[contract.ENV_CORES] = saved


def quiet(*loads: float, ranks: int = 1) -> bool:
    """May a timing claim be asserted? Every rank has a real core of its own and every load average given
    (default: now) is under half the real cores. Judged on the real cores, never on a faked ``DISTTUTOR_CORES``:
    sized for 8 cores on a 2-core machine, 4 ranks share 2 cores, and no timing claim about them holds."""
    n = real_cores()
    return ranks <= n and max(loads or (os.getloadavg()[0],)) < 0.5 * n
