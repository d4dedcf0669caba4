"""Who am I? Every rank reports the identity torchrun gave it (chapter 5, multi-node).

torchrun tells each worker where it sits through environment variables:
``RANK`` (global, 0..WORLD_SIZE-1), ``LOCAL_RANK`` (index on its node, picks the
GPU), ``GROUP_RANK`` (index of its node = torchrun agent), ``ROLE_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_WORLD_SIZE``, ``MASTER_ADDR`` /
``MASTER_PORT`` (the agents' shared store) and ``TORCHELASTIC_*`` bookkeeping.
After reading them, the ranks check the picture with two tiny collectives
that cross the "node" boundary::

    disttutor.launch("whoami", nproc=2, nnodes=2)          # two agents on loopback
    torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d \
             --rdzv-endpoint=HEAD:29500 -m disttutor.programs.whoami   # on each real node
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt

#: The variables torchrun sets for every worker (torch/distributed/elastic/agent/server/api.py).
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "WORLD_SIZE",
                 "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                 "TORCHELASTIC_USE_AGENT_STORE")


@dataclass(frozen=True)
class WhoamiConfig:
    size: int = opt(1, "length of the tensor all-reduced across nodes")

    def __post_init__(self):
        require_positive(self, "size")


def read_identity(environ=None) -> dict[str, str | None]:
    """The torchrun variables of this process (``None`` where one is unset)."""
    e = os.environ if environ is None else environ
    return {k: e.get(k) for k in TORCHRUN_VARS}


def run(cfg: WhoamiConfig) -> None:
    ident = read_identity()
    with runtime.setup() as ctx:
        nnodes = int(ident["GROUP_WORLD_SIZE"] or 1)
        group_rank = int(ident["GROUP_RANK"] or 0)
        # All-reduce a one-hot "which node am I on" vector: afterwards every rank
        # knows how many ranks each node holds -- data that had to cross nodes.
        per_node = torch.zeros(nnodes, device=ctx.device)
        per_node[group_rank] = 1.0
        dist.all_reduce(per_node)
        # Sum of global ranks: 0+1+...+(W-1) only if every RANK is distinct and
        # none is missing (duplicate or skipped ranks would change it).
        rank_sum = torch.full((cfg.size,), float(ctx.rank), device=ctx.device)
        dist.all_reduce(rank_sum)
        # Gather (GROUP_RANK, LOCAL_RANK) of everyone: a rank can check the layout itself.
        layout: list = [None] * ctx.world_size
        dist.all_gather_object(layout, (group_rank, ctx.local_rank))
        # One line per rank: in a cluster job's output file, where nothing else shows who is who.
        runtime.rank_print(f"RANK {ctx.rank} = GROUP_RANK {group_rank} x {ident['LOCAL_WORLD_SIZE']} + LOCAL_RANK "
                           f"{ctx.local_rank}; ranks per node {per_node.tolist()}, sum of ranks {rank_sum[0].item()}")
        # Under Slurm: the node this rank's task runs on (the rendezvous, not Slurm, picks GROUP_RANK).
        runtime.report(env=ident, ranks_per_node=per_node.tolist(), rank_sum=rank_sum[0].item(),
                       layout=layout, agent_pid=os.getppid(), host=socket.gethostname(),
                       slurm_node=os.environ.get("SLURMD_NODENAME"))


main = cli(WhoamiConfig, run)  # the command line is derived from WhoamiConfig's fields



if __name__ == "__main__":
    main()
