"""Every rank reaches the process group before anyone's join timeout starts.

``init_process_group`` uses ONE timeout for joining and for every collective (the course keeps it
short so a learner's hang ends in seconds). But joining waits for the slowest rank to *start*:
under load, two ranks of the same job finished ``import torch`` more than a 10 s checker timeout
apart, and the early rank's join failed -- a checker then reported a timeout instead of the
learner's mistake. Waiting for every rank at torchrun's own store first, with a long wait, makes
the short timeout count only from the moment all ranks are there. (A longer join timeout followed
by ``ProcessGroup.set_timeout(short)`` was tried: gloo's send/recv ignore it, so a recv with no
sender waited far longer than the lesson's timeout.)

A rank that crashes while starting does not leave the others waiting out :data:`ARRIVAL_WAIT_S`:
torchrun's agent stops the whole job when one worker fails.
"""
from __future__ import annotations

import datetime as _dt
import os

import torch.distributed as dist

from disttutor.rank.context import DistEnv

#: How long a rank waits for the job's other ranks to start (import torch, parse options) before the
#: process group's own, short, timeout begins. Generous: a loaded 2-core machine running 4 ranks
#: took over 30 s to start them all; a rank that dies stops the job sooner through the agent.
ARRIVAL_WAIT_S = 180.0


def arrive_together(env: DistEnv, wait_s: float = ARRIVAL_WAIT_S) -> None:
    """Block until every rank of this job (this restart attempt) has called it.

    Only under torchrun's agent store (``TORCHELASTIC_USE_AGENT_STORE``): elsewhere there is no
    store that outlives a slow rank's start, and init_process_group's own rendezvous is all there is.
    """
    if env.world_size <= 1 or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return
    wait = _dt.timedelta(seconds=wait_s)
    store = dist.TCPStore(env.master_addr, env.master_port, is_master=False, timeout=wait)
    # A key per rank and restart attempt: an elastic restart keeps the agent's store, and the dead
    # attempt's keys must not count as arrivals of the new one.
    prefix = f"disttutor/arrived/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
    store.set(f"{prefix}{env.rank}", "1")
    keys = [f"{prefix}{r}" for r in range(env.world_size)]
    try:
        store.wait(keys, wait)
    except Exception as exc:  # DistStoreError: say which ranks never came, not the store's text
        missing = [r for r, k in enumerate(keys) if not store.check([k])]
        raise RuntimeError(f"rank {env.rank}: rank(s) {missing} did not start within {wait_s:g}s "
                           "(still importing on a very busy machine, or stuck before joining)") from exc
