"""Inside a rank: torchrun's environment, backend/device choice, process-group
setup and teardown, rank-aware printing, and results sent back as data.

Introduced in chapter 0. Every worker program in :mod:`disttutor.programs`
follows the same shape::

    from disttutor import runtime
    from disttutor.options import cli

    def run(cfg: Config) -> None:              # Config: the program's frozen dataclass
        with runtime.setup() as ctx:           # env -> backend/device -> group
            x = torch.ones(3, device=ctx.device) * ctx.rank
            dist.all_reduce(x)
            runtime.report(total=x.tolist())   # -> run_dir/rank{r}.json
        # the group is destroyed here, even after an exception

    main = cli(Config, run)                    # the command line comes from Config's fields

This module is the *only* place in the package that creates or destroys the
default process group. It knows nothing about Jupyter: the run directory
(``DISTTUTOR_RUN_DIR``, set by :func:`disttutor.launch`) is the one channel
back to the notebook.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import signal
import warnings
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
import torch.distributed as dist

from . import contract, procs
from .reports import run_dir, summarize, write_report  # run_dir, summarize: used by programs as runtime.*
from .results import blame_of

# Collectives that wait longer than this fail instead of hanging. Gloo's
# default is 30 minutes, far too long for a learner staring at a cell.
DEFAULT_COLLECTIVE_TIMEOUT_S = 60.0
# Joining the group is not a collective the program wrote: torchrun starts the ranks together, but on a
# loaded machine their imports end seconds apart (10-20 s seen at load 15 on 2 cores). A short collective
# timeout (the checkers' 10 s) must not fail the join, or the check reports a timeout, not the learner's mistake.
JOIN_TIMEOUT_S = DEFAULT_COLLECTIVE_TIMEOUT_S


@dataclass(frozen=True)
class DistEnv:
    """What torchrun tells each worker through environment variables."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    group_rank: int  # index of this node (torchrun agent) in the job
    master_addr: str
    master_port: int

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> "DistEnv":
        e = os.environ if environ is None else environ
        missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in e]
        if missing:
            raise RuntimeError(
                f"not running under torchrun: {', '.join(missing)} unset. Launch this program with "
                "disttutor.launch(...) from a notebook, `disttutor run` or `torchrun`."
            )
        return cls(
            rank=int(e["RANK"]),
            local_rank=int(e.get("LOCAL_RANK", e["RANK"])),
            world_size=int(e["WORLD_SIZE"]),
            local_world_size=int(e.get("LOCAL_WORLD_SIZE", e["WORLD_SIZE"])),
            group_rank=int(e.get("GROUP_RANK", "0")),
            master_addr=e["MASTER_ADDR"],
            master_port=int(e["MASTER_PORT"]),
        )


def pick_backend(requested: str | None, local_world_size: int, local_rank: int) -> tuple[str, torch.device]:
    """NCCL + ``cuda:LOCAL_RANK`` when every local rank has its own GPU, else gloo + CPU.

    ``requested`` ("nccl", "gloo", "auto" or None) overrides the choice; asking
    for NCCL without enough GPUs is an error here rather than a hang later.
    """
    requested = (requested or os.environ.get(contract.ENV_BACKEND) or "auto").lower()
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    enough = n_gpu >= local_world_size and dist.is_nccl_available()
    if requested == "auto":
        requested = "nccl" if enough else "gloo"
    if requested == "nccl":
        if not enough:
            raise RuntimeError(
                f"backend 'nccl' needs one GPU per local rank ({local_world_size}); this machine has {n_gpu}"
                + ("" if dist.is_nccl_available() else " and this torch build has no NCCL")
            )
        return "nccl", torch.device("cuda", local_rank)
    if requested == "gloo":
        return "gloo", torch.device("cpu")
    raise ValueError(f"unknown backend {requested!r}: use 'auto', 'nccl' or 'gloo'")


@dataclass
class Context:
    """What a rank needs to know inside ``with runtime.setup() as ctx``."""

    env: DistEnv
    backend: str
    device: torch.device
    timeout_s: float
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def local_rank(self) -> int:
        return self.env.local_rank


_CTX: Context | None = None


# One function, one meaning (procs.tie_to_parent): "get SIGKILL when my parent dies".
# Kept under this name for programs whose own children follow them (chapter 5's mp.spawn).
tie_to_parent = procs.tie_to_parent


def _follow_agent() -> None:
    """Die with torchrun: if the agent is SIGKILLed, its workers would otherwise
    live on in their own sessions, holding ports and CPU. SIGKILL, because no
    one is left to read a graceful exit. The agent told us its pid."""
    agent = os.environ.get(contract.ENV_AGENT_PID)
    procs.tie_to_parent(signal.SIGKILL, int(agent) if agent else None)


def _explain(exc: BaseException, timeout_s: float) -> tuple[str, str]:
    """``(message, blame)`` for a rank's report; blame is "wait", "peer" or "self".

    The message keeps the exception's full text (the launcher shows a readable
    one-line form and keeps this as ``RankResult.raw_error``).
    """
    msg = f"{type(exc).__name__}: {exc}".strip()
    blame = blame_of(msg)
    if blame == "wait":
        return (f"a collective waited more than {timeout_s:g}s for the other ranks (one of them never joined "
                f"it, or died) -- {msg.splitlines()[0]}"), blame
    if blame == "peer":
        return f"another rank died in the middle of a collective -- {msg.splitlines()[0]}", blame
    return msg, blame


def _restart_store(env: DistEnv, timeout_s: float) -> dict[str, Any]:
    """After an elastic restart (chapter 10), a store namespace of this attempt's own.

    torchrun keeps ONE store for every attempt of a job; without a prefix the new ranks read
    the dead attempt's keys (gloo's peer addresses) and connect to ports nobody listens on.
    """
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if not restart or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return {}
    store = dist.TCPStore(env.master_addr, env.master_port, env.world_size, is_master=False,
                          timeout=_dt.timedelta(seconds=timeout_s))
    return {"store": dist.PrefixStore(f"disttutor/attempt{restart}/", store), "rank": env.rank,
            "world_size": env.world_size}


@contextlib.contextmanager
def setup(backend: str | None = None, timeout_s: float | None = None, init_group: bool = True) -> Iterator[Context]:
    """Initialise the default process group for this rank; always tear it down.

    ``timeout_s`` (or ``DISTTUTOR_COLLECTIVE_TIMEOUT``) bounds every collective.
    An exception inside the block is recorded in this rank's report (status
    ``"error"``) and re-raised, so torchrun sees a failed rank.
    ``init_group=False`` reports without joining any group (chapter 5's
    ``mp.spawn`` parents, whose children make groups of their own).
    """
    global _CTX
    env = DistEnv.from_environ()
    _follow_agent()
    timeout_s = float(timeout_s or os.environ.get(contract.ENV_COLLECTIVE_TIMEOUT) or DEFAULT_COLLECTIVE_TIMEOUT_S)
    if init_group:
        be, device = pick_backend(backend, env.local_world_size, env.local_rank)
    else:
        be, device = "none", torch.device("cpu")
    ctx = Context(env=env, backend=be, device=device, timeout_s=timeout_s)
    _CTX = ctx
    write_report(ctx, "running")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        if init_group:
            # Join with the longer wait, then bound every collective by timeout_s (a torch without
            # ProcessGroup.set_timeout keeps one timeout for both).
            join_s = max(timeout_s, JOIN_TIMEOUT_S) if hasattr(dist.ProcessGroup, "set_timeout") else timeout_s
            dist.init_process_group(
                backend=be,
                timeout=_dt.timedelta(seconds=join_s),
                # NCCL binds the group to this device up front (no guessing later).
                device_id=device if device.type == "cuda" else None,
                **_restart_store(env, join_s),
            )
            if join_s != timeout_s:
                dist.group.WORLD.set_timeout(_dt.timedelta(seconds=timeout_s))
        yield ctx
        write_report(ctx, "ok")
    except BaseException as exc:  # KeyboardInterrupt/SIGTERM too: the report says why we stopped
        if isinstance(exc, SystemExit) and not exc.code:
            write_report(ctx, "ok")
            raise
        write_report(ctx, "error", *_explain(exc, timeout_s))
        raise  # Python prints the traceback once, in this rank's log
    finally:
        _CTX = None
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


@contextlib.contextmanager
def rpc_setup(names: list[str] | None = None, rpc_timeout: float = 20.0,
              num_worker_threads: int = 8) -> Iterator[Context]:
    """Like :func:`setup`, for ``torch.distributed.rpc`` programs (chapter 6).

    ``init_rpc`` from torchrun's environment (``env://``: no hard-coded port),
    TensorPipe with a short ``rpc_timeout`` (default 60 s is long for a cell),
    warnings recorded into the report (RPC's deprecations are part of the
    lesson), and ``rpc.shutdown(graceful=True)`` whatever happens: graceful
    waits until every worker has served the others, so no worker exits while
    the master still holds its RRefs. ``names[rank]`` is this rank's RPC name
    (default ``worker{rank}``).
    """
    global _CTX
    from torch.distributed import rpc

    if rpc_timeout <= 0:
        raise ValueError(f"rpc_timeout must be > 0, got {rpc_timeout}")
    if num_worker_threads < 2:
        raise ValueError("num_worker_threads must be >= 2 (backward and optimizer RPCs nest)")
    if not rpc.is_available():
        raise RuntimeError("this torch build has no torch.distributed.rpc (missing on some Windows/macOS builds)")
    env = DistEnv.from_environ()
    _follow_agent()
    names = names or [f"worker{r}" for r in range(env.world_size)]
    ctx = Context(env=env, backend="rpc/tensorpipe", device=torch.device("cpu"), timeout_s=rpc_timeout,
                  results={"warnings": []})
    _CTX = ctx

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        text = f"{category.__name__}: {str(message).splitlines()[0]}"
        if text not in ctx.results["warnings"]:  # the same warning fires once per call site
            ctx.results["warnings"].append(text)
            print(text, flush=True)

    warnings.simplefilter("always")
    warnings.showwarning = record
    write_report(ctx, "running")
    options = rpc.TensorPipeRpcBackendOptions(init_method="env://", rpc_timeout=rpc_timeout,
                                              num_worker_threads=num_worker_threads)
    status, error, blame = "running", None, None
    try:
        rpc.init_rpc(names[env.rank], rank=env.rank, world_size=env.world_size, rpc_backend_options=options)
        yield ctx
        status = "ok"
    except BaseException as exc:
        status, (error, blame) = "error", _explain(exc, rpc_timeout)
        raise
    finally:
        with contextlib.suppress(Exception):
            rpc.shutdown(graceful=True)
        _CTX = None
        write_report(ctx, status, error, blame)


def context() -> Context:
    """The active :class:`Context` (inside ``with setup()``)."""
    if _CTX is None:
        raise RuntimeError("no process group: call this inside `with runtime.setup() as ctx:`")
    return _CTX


def report(**values: Any) -> None:
    """Send small, JSON-able values back to the launcher (merged per rank).

    Tensors are summarised (shape, dtype, sum, hash); call it as often as you
    like, the file is rewritten atomically each time.
    """
    ctx = context()
    ctx.results.update(values)
    write_report(ctx, "running")


def rank_print(*args: Any, **kwargs: Any) -> None:
    """``print`` that flushes at once (the launcher prefixes the rank itself)."""
    kwargs.setdefault("flush", True)
    print(*args, **kwargs)


PROGRESS_TAG = contract.PROGRESS_TAG


def progress(step: int, total: int, desc: str = "", **metrics: float) -> None:
    """Advance the launcher's progress bar (rank 0 only; other ranks are ignored).

    Prints one tagged line that :func:`disttutor.launch` turns into a tqdm bar
    in the cell instead of showing it as text.
    """
    ctx = context()
    if ctx.rank != 0:
        return
    payload = {"step": int(step), "total": int(total), "desc": desc,
               "metrics": {k: float(v) for k, v in metrics.items()}}
    print(PROGRESS_TAG + json.dumps(payload), flush=True)


def barrier_time() -> float:
    """A wall-clock instant all ranks agree on to within one barrier's latency."""
    dist.barrier()
    return time.perf_counter()
