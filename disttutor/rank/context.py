"""Who this rank is (chapter 0): torchrun's environment, the backend and device it gets, and
the active :class:`Context` of ``with runtime.setup() as ctx``.

Torch is imported (device and backend checks), but no process group is created here: that is
:mod:`disttutor.rank.runtime`'s (and, for RPC, :mod:`disttutor.rank.rpc`'s) one job.
"""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from disttutor import contract
from disttutor.contract import procs


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


def activate(ctx: Context | None) -> None:
    """Make ``ctx`` the rank's active context (``None``: no context, after teardown)."""
    global _CTX
    _CTX = ctx


def context() -> Context:
    """The active :class:`Context` (inside ``with setup()``)."""
    if _CTX is None:
        raise RuntimeError("no process group: call this inside `with runtime.setup() as ctx:`")
    return _CTX


def follow_agent() -> None:
    """Die with torchrun: if the agent is SIGKILLed, its workers would otherwise
    live on in their own sessions, holding ports and CPU. SIGKILL, because no
    one is left to read a graceful exit. The agent told us its pid."""
    agent = os.environ.get(contract.ENV_AGENT_PID)
    procs.tie_to_parent(signal.SIGKILL, int(agent) if agent else None)
