"""Hello, all-reduce: the first distributed program of the course (chapter 0).

Every rank starts with ``[rank+1, rank+1, rank+1]``; after ``all_reduce`` (sum)
each holds ``[S, S, S]`` with ``S = 1 + 2 + ... + world_size``. The fault flags
let chapter 0 and the tests show what a hung collective and a crashed rank
look like::

    python -m torch.distributed.run --nproc-per-node 4 -m disttutor.programs.hello
    disttutor run hello -n 2 -- --skip-rank 1      # rank 1 never joins: rank 0 times out
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from disttutor.rank import runtime
from disttutor.contract.config import require_non_negative, require_positive
from disttutor.contract.options import cli, opt


@dataclass(frozen=True)
class HelloConfig:
    size: int = opt(3, "elements in each rank's tensor")
    skip_rank: int = opt(-1, "this rank never joins the all-reduce (a hang)")
    crash_rank: int = opt(-1, "this rank dies hard before the all-reduce (a crash)")
    sleep: float = opt(0.0, "extra seconds before the collective")

    def __post_init__(self):
        require_positive(self, "size")
        require_non_negative(self, "sleep")


def run(cfg: HelloConfig) -> None:
    with runtime.setup() as ctx:
        # [teach allreduce]
        x = torch.full((cfg.size,), float(ctx.rank + 1), device=ctx.device)
        before = x.tolist()
        runtime.rank_print(f"rank {ctx.rank}/{ctx.world_size} on {ctx.device} ({ctx.backend}): before {before}")
        if cfg.sleep:
            time.sleep(cfg.sleep)
        if ctx.rank == cfg.crash_rank:
            runtime.rank_print("crashing on purpose (os._exit(3))")
            os._exit(3)  # no cleanup, no report: what a segfault or OOM-kill looks like
        if ctx.rank == cfg.skip_rank:
            runtime.rank_print("skipping the all-reduce on purpose")
            time.sleep(3600)  # never joins: the other ranks wait in the collective
        dist.all_reduce(x)  # sum over ranks, result on every rank
        expected = ctx.world_size * (ctx.world_size + 1) / 2
        runtime.rank_print(f"after all_reduce: {x.tolist()}")
        # [/teach allreduce]
        runtime.report(before=before, after=x.tolist(), expected=expected, backend=ctx.backend,
                       device=str(ctx.device), host=socket.gethostname())


main = cli(HelloConfig, run)  # the command line is derived from HelloConfig's fields


if __name__ == "__main__":
    main()
