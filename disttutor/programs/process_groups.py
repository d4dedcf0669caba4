"""Process groups: who am I, who are we, and smaller groups inside the world (chapter 2).

Each rank reports what torchrun told it through environment variables, the
backend/device :func:`disttutor.rank.runtime.setup` picked (NCCL + ``cuda:LOCAL_RANK``
on GPUs, gloo + CPU otherwise: no edit needed), and then builds subgroups:

* ``dist.new_group([...])`` twice -- the even ranks and the odd ranks;
* ``dist.new_subgroups(group_size=k)`` -- consecutive blocks of ``k`` ranks
  (``[0, 1], [2, 3]`` for ``k=2``), the shape of "one group per node".

An all-reduce inside a subgroup only adds up that subgroup's members::

    python -m torch.distributed.run --nproc-per-node 4 -m disttutor.programs.process_groups
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt

#: Variables torchrun sets for every worker whose values are the same on every
#: run; MASTER_PORT and TORCHELASTIC_RUN_ID change each launch (shown by name only).
STABLE_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
               "ROLE_WORLD_SIZE", "MASTER_ADDR", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")
VARYING_VARS = ("MASTER_PORT", "TORCHELASTIC_RUN_ID")


@dataclass(frozen=True)
class GroupsConfig:
    group_size: int = opt(2, "block size for dist.new_subgroups")

    def __post_init__(self):
        require_positive(self, "group_size")


def run(cfg: GroupsConfig) -> None:
    with runtime.setup() as ctx:
        if ctx.world_size % cfg.group_size:
            raise ValueError(f"group_size={cfg.group_size} must divide the world size {ctx.world_size}")
        env = {k: os.environ.get(k) for k in STABLE_VARS}
        varying = [k for k in VARYING_VARS if k in os.environ]

        # new_group is itself a collective: EVERY rank must call it, with the same
        # ranks, in the same order -- even ranks that will not be members.
        # Otherwise the group ids disagree and the next collective hangs.
        even = dist.new_group(list(range(0, ctx.world_size, 2)))
        odd = dist.new_group(list(range(1, ctx.world_size, 2))) if ctx.world_size > 1 else None
        mine = even if ctx.rank % 2 == 0 else odd
        x = torch.tensor([float(ctx.rank + 1)], device=ctx.device)
        dist.all_reduce(x, group=mine)  # adds up only the members of my group

        # new_subgroups: one call makes all blocks and returns the caller's own.
        block, _all_blocks = dist.new_subgroups(group_size=cfg.group_size)
        y = torch.tensor([float(ctx.rank + 1)], device=ctx.device)
        dist.all_reduce(y, group=block)

        w = torch.tensor([float(ctx.rank + 1)], device=ctx.device)
        dist.all_reduce(w)  # the default group: everybody

        runtime.report(
            rank=ctx.rank, local_rank=ctx.local_rank, world_size=ctx.world_size,
            backend=ctx.backend, device=str(ctx.device), env=env, varying_env=varying,
            parity_group=dist.get_process_group_ranks(mine), parity_rank=dist.get_rank(mine),
            parity_sum=x.item(),
            block_group=dist.get_process_group_ranks(block), block_rank=dist.get_rank(block),
            block_sum=y.item(), world_sum=w.item(),
        )


main = cli(GroupsConfig, run)  # the command line is derived from GroupsConfig's fields



if __name__ == "__main__":
    main()
