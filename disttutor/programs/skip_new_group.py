"""What really breaks when one rank skips ``dist.new_group`` (chapter 2).

``new_group`` is collective over the *default* group: every rank must call it,
with the same ranks, in the same order -- members or not. This program has
every rank call ``new_group([0, 1])`` (``--skip-rank r`` leaves it out on rank
``r``), then all-reduce over the whole world. Each rank prints where it is
before each call, so the log shows who waits where::

    disttutor run skip_new_group -n 2 -- --skip-rank 1
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from disttutor.rank import runtime
from disttutor.contract.options import cli, opt


@dataclass(frozen=True)
class SkipConfig:
    skip_rank: int = opt(-1, "this rank does not call new_group (-1: nobody skips)")


def run(cfg: SkipConfig) -> None:
    with runtime.setup() as ctx:
        if ctx.rank != cfg.skip_rank:
            runtime.rank_print("entering new_group([0, 1])")
            group = dist.new_group([0, 1])
            runtime.rank_print("left new_group")
        else:
            runtime.rank_print("skipping new_group on purpose")
            group = None
        x = torch.ones(1, device=ctx.device)
        runtime.rank_print("entering all_reduce over the world")
        dist.all_reduce(x)
        runtime.rank_print(f"left all_reduce: {x.item():g}")
        if group is not None and ctx.rank in (0, 1):
            y = torch.ones(1, device=ctx.device)
            dist.all_reduce(y, group=group)
        runtime.report(world_sum=x.item())


main = cli(SkipConfig, run)

if __name__ == "__main__":
    main()
