"""Code several puzzles show: a DDP comm hook that counts the all-reduces (one call per bucket)."""
from __future__ import annotations

DDP_IMPORTS = ("from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
               "from torch.nn.parallel import DistributedDataParallel as DDP\n")

COUNTED = ("calls = []\n"
           "def counted(state, bucket):                  # DDP calls its hook once per bucket it all-reduces\n"
           "    calls.append(bucket.index())\n"
           "    return default_hooks.allreduce_hook(state, bucket)\n"
           "model.register_comm_hook(None, counted)\n")

WORLD = 4  # every run puzzle runs on 4 ranks (disttutor.programs.puzzle_check under the tests)


def waiting(per_rank: list) -> list[int]:
    """A hang puzzle's reports -> the ranks that waited."""
    return [r for r, waited in enumerate(per_rank) if waited]
