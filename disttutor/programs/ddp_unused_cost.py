"""What ``find_unused_parameters=True`` costs per step when nothing is unused (chapter 4).

With the flag, DDP walks the autograd graph from the outputs after every
forward, to find parameters that will get no gradient this step. This program
measures that cost: the same model (same weights on every rank, every
parameter used) wrapped twice, once without and once with the flag, trained
on the same batch. Blocks of ``steps`` steps alternate between the two, in
pairs, so a burst of load hits both alike; each block's time is the slowest
rank's. The forward alone is timed too (the walk is part of DDP's forward).
The paired ratio (with / without) of each repeat is reported::

    disttutor run ddp_unused_cost -n 2 -- --repeats 7 --layers 24
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.workloads.models import MLP, seeded
from disttutor.contract.options import cli, opt


@dataclass(frozen=True)
class UnusedCostConfig:
    layers: int = opt(24, "Linear layers (the walk visits every autograd node: more layers, longer walk)")
    width: int = opt(32, "hidden width (small: a step is mostly per-layer overhead, where a walk shows)")
    batch: int = opt(16, "rows per rank per step")
    steps: int = opt(10, "steps per timed block")
    repeats: int = opt(7, "pairs of blocks (without, with)")

    def __post_init__(self):
        require_positive(self, "layers", "width", "batch", "steps", "repeats")


def _block(ddp: DDP, opt_: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, steps: int) -> tuple[float, float]:
    """Mean (step, forward) seconds over ``steps`` steps, each the slowest rank's."""
    dist.barrier()  # both ranks start the block together
    fwd = 0.0
    t0 = time.perf_counter()
    for _ in range(steps):
        opt_.zero_grad()
        f0 = time.perf_counter()
        out = ddp(x)  # with the flag, DDP's forward ends with the walk over the autograd graph
        fwd += time.perf_counter() - f0
        nn.functional.mse_loss(out, y).backward()  # DDP all-reduces gradients during backward
        opt_.step()
    t = torch.tensor([time.perf_counter() - t0, fwd])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a step is over when the slowest rank is done
    return t[0].item() / steps, t[1].item() / steps


def run(cfg: UnusedCostConfig) -> None:
    with runtime.setup() as ctx:
        base = seeded(MLP, 0, cfg.width, [cfg.width] * (cfg.layers - 1), cfg.width).to(ctx.device)
        device_ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
        models = {flag: DDP(copy.deepcopy(base), device_ids=device_ids, find_unused_parameters=flag)
                  for flag in (False, True)}
        opts = {flag: torch.optim.SGD(m.parameters(), lr=1e-3) for flag, m in models.items()}
        g = torch.Generator().manual_seed(ctx.rank)
        x = torch.randn(cfg.batch, cfg.width, generator=g).to(ctx.device)
        y = torch.randn(cfg.batch, cfg.width, generator=g).to(ctx.device)
        for flag in (False, True):  # warm-up: first steps build buckets and allocate
            _block(models[flag], opts[flag], x, y, 2)
        pairs, fwd_pairs = [], []
        for i in range(cfg.repeats):
            order = (False, True) if i % 2 == 0 else (True, False)  # alternate who goes first
            t = {flag: _block(models[flag], opts[flag], x, y, cfg.steps) for flag in order}
            pairs.append([t[False][0], t[True][0]])
            fwd_pairs.append([t[False][1], t[True][1]])
            runtime.progress(i + 1, cfg.repeats, desc="find_unused_parameters cost")
        # [without, with] per repeat: whole step, and forward alone (where the walk happens)
        runtime.report(pairs_s=pairs, forward_pairs_s=fwd_pairs, layers=cfg.layers,
                       n_params=sum(p.numel() for p in base.parameters()))


main = cli(UnusedCostConfig, run)

if __name__ == "__main__":
    main()
