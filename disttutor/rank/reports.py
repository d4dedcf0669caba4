"""The rank's side of the report channel (chapter 0): ``rank{r}.json`` in the run directory.

:func:`disttutor.launch` gives every job a run directory (``DISTTUTOR_RUN_DIR``); each rank
rewrites its own report there, atomically, whenever something changes (status, results), so
the launcher can read it at any moment -- even after the rank was killed mid-job. The
launcher's side is :mod:`disttutor.launcher.collect`; the file names are :mod:`disttutor.contract`'s.
:mod:`disttutor.rank.runtime` (``setup()``, ``report()``) is the only caller of :func:`write_report`.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from typing import Any

import torch

from disttutor import contract
from disttutor.contract.errors import blame_of
from disttutor.rank.context import Context, context


def run_dir() -> str | None:
    """The launcher's run directory for this job (``None`` when not launched by :func:`disttutor.launch`)."""
    return os.environ.get(contract.ENV_RUN_DIR) or None


def write_report(ctx: Context, status: str, error: str | None = None, blame: str | None = None) -> None:
    """Write ``rank{r}.json`` atomically (the launcher may read it at any moment; a reader never
    sees half a file: it is written aside and renamed)."""
    directory = run_dir()
    if directory is None:
        return
    payload = {
        "rank": ctx.env.rank,
        "local_rank": ctx.env.local_rank,
        "group_rank": ctx.env.group_rank,
        "world_size": ctx.env.world_size,
        "backend": ctx.backend,
        "device": str(ctx.device),
        "pid": os.getpid(),
        "agent": int(os.environ.get(contract.ENV_AGENT, "0")),  # which torchrun agent (simulated node)
        "status": status,
        "error": error,
        "blame": blame,  # who caused the error, as far as this rank can tell
        "results": ctx.results,
    }
    path = contract.report_path(directory, ctx.env.rank)
    tmp = f"{path}.{threading.get_ident()}.tmp"  # RPC handlers may report from several threads
    with open(tmp, "w") as f:
        json.dump(payload, f, default=jsonable)
    os.replace(tmp, path)


def jsonable(obj: Any) -> Any:
    """json.dump's fallback: tensors become :func:`summarize` fingerprints, never their data."""
    if isinstance(obj, torch.Tensor):
        return summarize(obj)
    if isinstance(obj, torch.device | torch.dtype):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"report(): {type(obj).__name__} is not JSON-serialisable; report numbers, lists or summaries")


def summarize(t: torch.Tensor) -> dict[str, Any]:
    """A small, JSON-able fingerprint of a tensor: big tensors never leave the rank."""
    c = t.detach().to("cpu").contiguous()
    return {
        "shape": list(c.shape),
        "dtype": str(c.dtype).replace("torch.", ""),
        "sum": float(c.double().sum()) if c.numel() else 0.0,
        "sha1": hashlib.sha1(c.view(torch.uint8).numpy().tobytes() if c.numel() else b"").hexdigest()[:12],
    }


def explain(exc: BaseException, timeout_s: float) -> tuple[str, str]:
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
