"""RPC set-up (chapter 6): ``torch.distributed.rpc`` from torchrun's environment, always shut down.

Programs use it as ``with runtime.rpc_setup(...) as ctx`` (the name :mod:`disttutor.rank.runtime`
re-exports), like :func:`disttutor.rank.runtime.setup` for process groups.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import torch

from disttutor.rank.context import Context, DistEnv, activate, follow_agent
from disttutor.rank.reports import explain, write_report


@contextlib.contextmanager
def setup(names: list[str] | None = None, rpc_timeout: float = 20.0,
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
    from torch.distributed import rpc

    if rpc_timeout <= 0:
        raise ValueError(f"rpc_timeout must be > 0, got {rpc_timeout}")
    if num_worker_threads < 2:
        raise ValueError("num_worker_threads must be >= 2 (backward and optimizer RPCs nest)")
    if not rpc.is_available():
        raise RuntimeError("this torch build has no torch.distributed.rpc (missing on some Windows/macOS builds)")
    env = DistEnv.from_environ()
    follow_agent()
    names = names or [f"worker{r}" for r in range(env.world_size)]
    ctx = Context(env=env, backend="rpc/tensorpipe", device=torch.device("cpu"), timeout_s=rpc_timeout,
                  results={"warnings": []})
    activate(ctx)

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
        status, (error, blame) = "error", explain(exc, rpc_timeout)
        raise
    finally:
        with contextlib.suppress(Exception):
            rpc.shutdown(graceful=True)
        activate(None)
        write_report(ctx, status, error, blame)
