"""A small DDP run profiled on every rank: one Chrome trace per rank (chapter 9).

``torch.profiler`` with a schedule (skip 1 step, warm up 1, record ``active``),
``record_function`` regions of our own (``forward``, ``backward``, ``optimizer``),
and ``export_chrome_trace`` into the run directory as ``trace_rank{r}.json``
(open them in https://ui.perfetto.dev or chrome://tracing). Each rank reports
its top operators and its peak memory as the profiler saw it.

``--slow-rank -2`` makes a *random* rank a straggler (it sleeps ``slow_ms`` in
every forward): rank 0 draws it, and writes it to ``answer.json`` in the run
directory, which the exercise's checker reads and the learner does not::

    disttutor run profile_ddp -n 2 -- --slow-rank 1
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from disttutor.rank import runtime
from disttutor.contract.config import require_non_negative, require_positive
from disttutor.workloads.models import MLP
from disttutor.contract.options import cli, opt

ANSWER = "answer.json"


@dataclass(frozen=True)
class ProfileConfig:
    active: int = opt(3, "profiled steps (after 1 skipped and 1 warm-up step)")
    hidden: int = opt(256, "width of the MLP's two hidden layers")
    batch: int = opt(64, "samples per rank per step")
    slow_rank: int = opt(-1, "this rank sleeps slow_ms in each forward (-1: none, -2: a random rank)")
    slow_ms: float = opt(40.0, "the straggler's extra milliseconds per step")

    def __post_init__(self):
        require_positive(self, "active", "hidden", "batch")
        require_non_negative(self, "slow_ms")
        if self.slow_rank < -2:
            raise ValueError(f"slow_rank must be a rank, -1 (none) or -2 (random), got {self.slow_rank}")


def _slow_rank(cfg: ProfileConfig, world: int, run_dir: str | None) -> int:
    if cfg.slow_rank != -2:
        return cfg.slow_rank
    pick = torch.tensor([random.SystemRandom().randrange(world)])  # rank 0's draw is everyone's
    dist.broadcast(pick, src=0)
    if dist.get_rank() == 0 and run_dir:
        with open(os.path.join(run_dir, ANSWER), "w") as f:
            json.dump({"slow_rank": int(pick)}, f)
    return int(pick)


def _peak_memory_bytes(trace_path: str) -> int:
    """The largest 'Total Allocated' of the profiler's [memory] events (CPU allocator, this rank)."""
    events = json.load(open(trace_path)).get("traceEvents", [])
    return max((int(e["args"].get("Total Allocated", 0)) for e in events
                if e.get("name") == "[memory]" and "args" in e), default=0)


def run(cfg: ProfileConfig) -> None:
    with runtime.setup() as ctx:
        if cfg.slow_rank >= ctx.world_size:  # every rank says it: none waits for a rank that gave up
            raise ValueError(f"slow_rank {cfg.slow_rank} is not a rank of this {ctx.world_size}-rank job")
        slow = _slow_rank(cfg, ctx.world_size, runtime.run_dir())
        torch.manual_seed(0)  # same weights everywhere (DDP would broadcast them anyway)
        model = DDP(MLP(64, (cfg.hidden, cfg.hidden), 8).to(ctx.device))
        opt_ = torch.optim.SGD(model.parameters(), lr=0.01)
        g = torch.Generator().manual_seed(ctx.rank)  # each rank its own data shard
        trace = os.path.join(runtime.run_dir() or ".", f"trace_rank{ctx.rank}.json")
        steps = 2 + cfg.active
        # [teach profile]
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                     schedule=schedule(wait=1, warmup=1, active=cfg.active, repeat=1),
                     on_trace_ready=lambda p: p.export_chrome_trace(trace)) as prof:
            for step in range(steps):
                x, y = torch.randn(cfg.batch, 64, generator=g), torch.randn(cfg.batch, 8, generator=g)
                with record_function("forward"):
                    if ctx.rank == slow:
                        time.sleep(cfg.slow_ms / 1000)  # the straggler: slow data loading, a slow core, ...
                    loss = F.mse_loss(model(x), y)
                with record_function("backward"):
                    loss.backward()  # DDP's gradient all-reduces run inside (gloo: in its own threads)
                with record_function("optimizer"):
                    opt_.step()
                    opt_.zero_grad()
                prof.step()
                # [/teach profile]
                runtime.progress(step + 1, steps, desc="profiled steps")
        top = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:5]
        runtime.report(trace=os.path.basename(trace), peak_bytes=_peak_memory_bytes(trace),
                       top_ops=[{"name": e.key, "self_ms": round(e.self_cpu_time_total / 1000, 2),
                                 "calls": e.count} for e in top])


main = cli(ProfileConfig, run)

if __name__ == "__main__":
    main()
