"""Elastic restarts (chapter 10): a fresh store namespace for each attempt of a job.

When a rank dies, torchrun's agent (``--max-restarts``) starts the job's ranks again; the new
ranks join :func:`disttutor.rank.runtime.setup` like the first ones did, with the arguments
:func:`restart_store` returns.
"""
from __future__ import annotations

import datetime as _dt
import os
from typing import Any

import torch.distributed as dist

from disttutor.rank.context import DistEnv


def restart_store(env: DistEnv, timeout_s: float) -> dict[str, Any]:
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
