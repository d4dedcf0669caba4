"""Inside a rank: the life of the default process group (chapter 0), and the names programs use.

Every worker program in :mod:`disttutor.programs` follows the same shape::

    from disttutor.rank import runtime
    from disttutor.contract.options import cli

    def run(cfg: Config) -> None:              # Config: the program's frozen dataclass
        with runtime.setup() as ctx:           # env -> backend/device -> group
            x = torch.ones(3, device=ctx.device) * ctx.rank
            dist.all_reduce(x)
            runtime.report(total=x.tolist())   # -> run_dir/rank{r}.json
        # the group is destroyed here, even after an exception

    main = cli(Config, run)                    # the command line comes from Config's fields

:func:`setup` is the *only* place in the package that creates or destroys the default process
group. The rest of a rank's life is in the modules beside this one, and a program reaches them
through this module (one import): who the rank is (:mod:`~disttutor.rank.context`), what it sends
back (:mod:`~disttutor.rank.reports`: ``report``, ``progress``, ``rank_print``, ``run_dir``,
``summarize``), elastic restarts (:mod:`~disttutor.rank.elastic`) and RPC
(:mod:`~disttutor.rank.rpc`, as ``rpc_setup``). Nothing here knows about Jupyter: the run
directory (``DISTTUTOR_RUN_DIR``, set by :func:`disttutor.launch`) is the one channel back.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
import time
from typing import Iterator

import torch
import torch.distributed as dist

from disttutor import contract
from disttutor.contract import procs
from disttutor.rank.arrival import arrive_together
from disttutor.rank.context import Context, DistEnv, activate, context, follow_agent, pick_backend
from disttutor.rank.elastic import restart_store
from disttutor.rank.reports import (PROGRESS_TAG, explain, progress, rank_print, report, run_dir, summarize,
                                    write_report)
from disttutor.rank.rpc import setup as rpc_setup

DEFAULT_COLLECTIVE_TIMEOUT_S = contract.DEFAULT_COLLECTIVE_TIMEOUT_S

# One function, one meaning (procs.tie_to_parent): "get SIGKILL when my parent dies".
# Kept under this name for programs whose own children follow them (chapter 5's mp.spawn).
tie_to_parent = procs.tie_to_parent

__all__ = ["Context", "DistEnv", "PROGRESS_TAG", "barrier_time", "context", "pick_backend", "progress",
           "rank_print", "report", "rpc_setup", "run_dir", "setup", "summarize", "tie_to_parent"]


@contextlib.contextmanager
def setup(backend: str | None = None, timeout_s: float | None = None, init_group: bool = True) -> Iterator[Context]:
    """Initialise the default process group for this rank; always tear it down.

    ``timeout_s`` (or ``DISTTUTOR_COLLECTIVE_TIMEOUT``) bounds every collective.
    An exception inside the block is recorded in this rank's report (status
    ``"error"``) and re-raised, so torchrun sees a failed rank.
    ``init_group=False`` reports without joining any group (chapter 5's
    ``mp.spawn`` parents, whose children make groups of their own).
    """
    env = DistEnv.from_environ()
    follow_agent()
    timeout_s = float(timeout_s or os.environ.get(contract.ENV_COLLECTIVE_TIMEOUT) or contract.DEFAULT_COLLECTIVE_TIMEOUT_S)
    if init_group:
        be, device = pick_backend(backend, env.local_world_size, env.local_rank)
    else:
        be, device = "none", torch.device("cpu")
    ctx = Context(env=env, backend=be, device=device, timeout_s=timeout_s)
    activate(ctx)
    write_report(ctx, "running")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        if init_group:
            # One timeout for joining and for every collective; it starts once every rank is there
            # (arrive_together waits for slow starters first, with a long wait of its own).
            arrive_together(env)
            dist.init_process_group(
                backend=be,
                timeout=_dt.timedelta(seconds=timeout_s),
                # NCCL binds the group to this device up front (no guessing later).
                device_id=device if device.type == "cuda" else None,
                **restart_store(env, timeout_s),
            )
        yield ctx
        write_report(ctx, "ok")
    except BaseException as exc:  # KeyboardInterrupt/SIGTERM too: the report says why we stopped
        if isinstance(exc, SystemExit) and not exc.code:
            write_report(ctx, "ok")
            raise
        write_report(ctx, "error", *explain(exc, timeout_s))
        raise  # Python prints the traceback once, in this rank's log
    finally:
        activate(None)
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def barrier_time() -> float:
    """A wall-clock instant all ranks agree on to within one barrier's latency."""
    dist.barrier()
    return time.perf_counter()
