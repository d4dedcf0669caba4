"""The rank's side of the report channel (chapter 0): ``rank{r}.json`` in the run directory.

:func:`disttutor.launch` gives every job a run directory (``DISTTUTOR_RUN_DIR``); each rank
rewrites its own report there, atomically, whenever something changes (status, results), so
the launcher can read it at any moment -- even after the rank was killed mid-job. The
launcher's side is :mod:`disttutor.collect`; the file names are :mod:`disttutor.contract`'s.
:mod:`disttutor.runtime` (``setup()``, ``report()``) is the only caller of :func:`write_report`.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from typing import TYPE_CHECKING, Any

import torch

from . import contract

if TYPE_CHECKING:
    from .runtime import Context


def run_dir() -> str | None:
    """The launcher's run directory for this job (``None`` when not launched by :func:`disttutor.launch`)."""
    return os.environ.get(contract.ENV_RUN_DIR) or None


def write_report(ctx: "Context", status: str, error: str | None = None, blame: str | None = None) -> None:
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
