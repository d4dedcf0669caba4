"""Process-tree lifecycle for launched jobs (chapter 0): tie torchrun to the
kernel's life, and kill a whole job tree on timeout or interrupt.

Why both: torchrun starts its workers in their own sessions, so killing
torchrun's process group misses them, and a SIGKILLed kernel runs no cleanup
code at all. The kernel-side answer is :func:`tie_to_parent`
(``PR_SET_PDEATHSIG``, Linux) plus :func:`watch_parent` inside the agent; the
launcher-side answer is :func:`kill_tree`, which snapshots the tree first.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Callable, Iterable


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


def tie_to_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """This process gets ``sig`` when its parent dies, and exits now if it already has.

    The one way every process of a job follows the one that started it:
    torchrun follows the kernel (``sig=SIGTERM``, so it can stop its ranks, and
    :func:`watch_parent` in case that stop never finishes); ranks follow
    torchrun (``SIGKILL``: nobody is left to read a graceful exit).
    ``parent`` is the pid we expect as parent (None: any but init). Checking it
    after ``prctl`` closes the race where the parent died just before the
    request took effect: then no signal would ever come.
    Safe as a ``preexec_fn`` (``functools.partial(tie_to_parent, SIGTERM, os.getpid())``).
    """
    ok = die_with_parent(sig)
    ppid = os.getppid()
    if (ppid != parent) if parent is not None else ppid == 1:
        os._exit(1)
    return ok


def watch_parent(parent: int, on_orphan: Callable[[], None], poll_s: float = 0.1) -> threading.Thread:
    """Call ``on_orphan()`` from a daemon thread as soon as ``parent`` is no longer our parent.

    Why a thread on top of ``PR_SET_PDEATHSIG``: the signal only *starts* a
    shutdown, which runs in the main thread and can get stuck (torchrun's
    ``--tee`` tail threads are joined at exit and never stop once the kernel's
    pipe is gone). A polling daemon thread keeps running while the main thread
    waits, so it can end the job whatever the main thread is doing.
    """
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        on_orphan()

    t = threading.Thread(target=watch, name="disttutor-parent-watch", daemon=True)
    t.start()
    return t


def kill_descendants_and_exit(code: int = 1) -> None:
    """SIGKILL every descendant of this process (ranks and their children), then ``os._exit``."""
    import psutil

    try:
        kids = psutil.Process().children(recursive=True)  # snapshot first: ranks live in their own sessions
    except psutil.Error:
        kids = []
    for p in kids:
        try:
            p.kill()
        except psutil.Error:
            pass
    os._exit(code)  # no atexit, no thread joins: they are what can hang


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


def quick_exit(code: object = 0) -> None:
    """End the rank the way ``sys.exit(code)`` would, minus interpreter finalisation.

    A rank that used torch's DDP leaves gloo objects that the interpreter's and C++'s exit-time
    destructors free while gloo's threads still run: the rank then aborts after its last line
    ("terminate called without an active exception", SIGABRT; chapter 5's script, 3 runs in 12 under
    load), and torchrun reports a finished job as failed. So: run the atexit handlers, flush the
    streams, and leave with ``os._exit`` -- the rank's own work is done and its files are closed.
    Used by the script wrapper (:mod:`disttutor.rank.user_script`) and by every program run as
    ``python -m disttutor.programs.NAME`` (:func:`disttutor.contract.options.cli`).
    """
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): Python prints it and exits 1
        print(code, file=sys.stderr)
        code = 1
    try:
        import atexit

        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed or broken pipe: nothing more can be said
                pass
        os._exit(code)
