"""Process-tree lifecycle for launched jobs (chapter 0): tie torchrun to the
kernel's life, and kill a whole job tree on timeout or interrupt.

Why both: torchrun starts its workers in their own sessions, so killing
torchrun's process group misses them, and a SIGKILLed kernel runs no cleanup
code at all. The kernel-side answer is ``PR_SET_PDEATHSIG`` (Linux); the
launcher-side answer is :func:`kill_tree`, which snapshots the tree first.
"""
from __future__ import annotations

import signal
import sys
from typing import Iterable


def _make_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Looked up once, in the parent: between fork and exec the child should do as little as possible.
PRCTL = _make_prctl()


def die_with_parent(sig: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux only).

    Returns whether it could. Note: "parent" is the *thread* that forked us.
    """
    if PRCTL is None:
        return False
    PRCTL(1, sig)  # PR_SET_PDEATHSIG
    return True


def tie_to_parent() -> None:
    """``preexec_fn`` for torchrun: SIGTERM it when the kernel dies.

    torchrun handles SIGTERM by stopping its workers, so the whole job follows the kernel.
    """
    die_with_parent(signal.SIGTERM)


def tree(pids: Iterable[int]):
    import psutil

    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs += [p, *p.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return procs


def kill_tree(pids: Iterable[int], grace: float = 3.0) -> int:
    """SIGTERM torchrun agents (they forward it to workers), then SIGKILL what is left.

    Returns how many processes had to be SIGKILLed.
    """
    import psutil

    pids = list(pids)
    victims = tree(pids)  # snapshot first: workers live in their own sessions
    for p in victims:
        if p.pid in pids:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
    _, alive = psutil.wait_procs(victims, timeout=grace)
    for p in alive + [q for q in tree(pids) if q not in victims]:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    return len(alive)


