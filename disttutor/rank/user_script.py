"""Run a learner's own script with the course's safety nets (chapter 0, ``disttutor run my.py``).

    python -m disttutor.rank.user_script PATH [ARGS...]      # what disttutor.launch runs for a .py path

A script that calls ``dist.init_process_group()`` itself would otherwise get
gloo's 30-minute (NCCL's 10-minute) default timeout, and a hang would last
until the launcher's wall-clock limit. Before the script starts, this wrapper:

* makes ``init_process_group`` and ``new_group`` default their ``timeout=`` to
  the launcher's collective timeout (``DISTTUTOR_COLLECTIVE_TIMEOUT``, else
  the runtime's 60 s). A ``timeout=`` the script passes itself still wins;
* ties the rank to torchrun's agent (SIGKILL when the agent dies), as
  :func:`disttutor.rank.runtime.setup` does for the course's programs.

Then it runs the script exactly as ``python PATH ARGS`` would: as
``__main__``, with ``sys.argv = [PATH, *ARGS]`` and the script's directory
first on ``sys.path``. Nothing else about the script's meaning changes.
"""
from __future__ import annotations

import datetime as _dt
import functools
import inspect
import os
import runpy
import sys

from disttutor import contract


def collective_timeout_s() -> float:
    return float(os.environ.get(contract.ENV_COLLECTIVE_TIMEOUT) or contract.DEFAULT_COLLECTIVE_TIMEOUT_S)


def default_timeout(fn, seconds: float):
    """``fn`` with ``timeout=None`` (or absent) replaced by ``seconds``; every other argument untouched."""
    params = list(inspect.signature(fn).parameters)
    pos = params.index("timeout")  # the timeout may also be passed positionally

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if len(args) <= pos and kwargs.get("timeout") is None:
            kwargs["timeout"] = _dt.timedelta(seconds=seconds)
        return fn(*args, **kwargs)

    wrapper.__disttutor_default_timeout__ = seconds
    return wrapper


def install(seconds: float) -> None:
    """Patch the public entry points (``torch.distributed.X`` and ``distributed_c10d.X``)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    for name in ("init_process_group", "new_group"):
        wrapped = default_timeout(getattr(c10d, name), seconds)
        setattr(c10d, name, wrapped)
        setattr(dist, name, wrapped)  # `from torch.distributed import init_process_group` runs after this


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        raise SystemExit("usage: python -m disttutor.rank.user_script PATH [ARGS...]")
    path = os.path.abspath(argv[0])
    from disttutor.contract import procs

    agent = os.environ.get(contract.ENV_AGENT_PID)
    if agent:  # launched by disttutor.launcher.launch: follow the agent (SIGKILL when it dies)
        import signal

        procs.tie_to_parent(signal.SIGKILL, int(agent))
    install(collective_timeout_s())
    sys.argv = [argv[0], *argv[1:]]
    sys.path[0] = os.path.dirname(path)  # as `python PATH` would (with -m it was the cwd)
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        destroy_left_group()


def destroy_left_group() -> None:
    """Destroy a process group the script left behind, while the interpreter is still whole.

    Destroying the group joins gloo's worker threads. Left alive, a worker that still holds a tensor
    (one from a timed-out collective, say) lets go of it while Python is finalising, and the rank
    aborts ("terminate called without an active exception", SIGABRT) after the script printed its
    last line: seen 1 time in 2 with a script that caught its own timeout.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # a group broken by the script's own error: nothing left to stop
            pass


if __name__ == "__main__":
    from disttutor.contract.procs import quick_exit

    try:
        main()
    except SystemExit as exc:
        quick_exit(exc.code)
    except BaseException:  # the script's own error: its traceback, then exit 1 (as Python does)
        import traceback

        traceback.print_exc()
        quick_exit(1)
    quick_exit(0)
