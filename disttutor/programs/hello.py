"""Hello, all-reduce: the first distributed program of the course (chapter 0).

Every rank starts with ``[rank+1, rank+1, rank+1]``; after ``all_reduce`` (sum)
each holds ``[S, S, S]`` with ``S = 1 + 2 + ... + world_size``. The fault flags
let chapter 0 and the tests show what a hung collective and a crashed rank
look like::

    python -m torch.distributed.run --nproc-per-node 4 -m disttutor.programs.hello
    disttutor run hello -n 2 -- --skip-rank 1      # rank 1 never joins: rank 0 times out
"""
from __future__ import annotations

import argparse
import os
import socket
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from disttutor import runtime


@dataclass(frozen=True)
class HelloConfig:
    size: int = 3
    skip_rank: int = -1    # this rank never joins the all-reduce (a hang)
    crash_rank: int = -1   # this rank dies hard before the all-reduce (a crash)
    sleep: float = 0.0     # extra seconds before the collective

    def __post_init__(self):
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")
        if self.sleep < 0:
            raise ValueError(f"sleep must be >= 0, got {self.sleep}")


def run(cfg: HelloConfig) -> None:
    with runtime.setup() as ctx:
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
        runtime.report(before=before, after=x.tolist(), expected=expected, backend=ctx.backend,
                       device=str(ctx.device), host=socket.gethostname())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="hello", description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=3)
    p.add_argument("--skip-rank", type=int, default=-1)
    p.add_argument("--crash-rank", type=int, default=-1)
    p.add_argument("--sleep", type=float, default=0.0)
    a = p.parse_args(argv)
    run(HelloConfig(size=a.size, skip_rank=a.skip_rank, crash_rank=a.crash_rank, sleep=a.sleep))


if __name__ == "__main__":
    main()
