"""Zero-bubble pipelines beside 1F1B and interleaved 1F1B, on one model, in one launch (chapter 7).

The same model (``layers`` Linears, :class:`disttutor.workloads.models.MLP`)
is cut into ``p`` stages for 1F1B and into ``2p`` for the schedules with two
stages per rank: interleaved 1F1B, ``ScheduleInterleavedZeroBubble`` (looped
placement: rank ``r`` holds ``r, r+p``) and ``ScheduleZBVZeroBubble`` (a V:
rank ``r`` holds ``r`` and ``2p-1-r``). Each schedule trains ``steps`` steps;
every rank compares its stages with single-process training of the whole
model and reports the last step's measured actions (F, B, I, W)::

    disttutor run pipeline_zb -n 2 -- --schedules 1f1b interleaved_zb zbv --microbatches 8

:func:`train_split` is also :mod:`disttutor.programs.pipeline_balance`'s loop
(its ``counts`` say how many Linears each stage gets).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (Schedule1F1B, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
                                          ScheduleZBVZeroBubble)

from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt
from disttutor.pipeline.schedules import PipeSpec
from disttutor.pipeline.timed_stage import ActionLog, TimedPipelineStage
from disttutor.rank import runtime
from disttutor.workloads.data import regression
from disttutor.workloads.models import MLP, seeded

D_IN, D_OUT = 16, 4
KNOWN = ("1f1b", "interleaved", "interleaved_zb", "zbv")


@dataclass(frozen=True)
class ZeroBubbleConfig:
    schedules: tuple[str, ...] = opt(KNOWN, "schedules to run, one after another (1f1b, interleaved, "
                                            "interleaved_zb, zbv)")
    microbatches: int = opt(8, "m: micro-batches per mini-batch")
    layers: int = opt(8, "Linear layers of the whole model (a multiple of 2 x ranks)")
    width: int = opt(256, "hidden width")
    mb_size: int = opt(32, "rows per micro-batch")
    steps: int = opt(2, "optimizer steps per schedule; the last one is timed (the first infers shapes)")
    lr: float = opt(0.05, "SGD learning rate")
    seed: int = opt(0, "seed of the data and the weights")

    def __post_init__(self):
        require_positive(self, "microbatches", "layers", "width", "mb_size", "steps", flag_style=True)
        bad = [s for s in self.schedules if s not in KNOWN]
        if bad or not self.schedules:
            raise ValueError(f"--schedules must be some of {KNOWN}, got {self.schedules!r}")
        if self.lr <= 0:
            raise ValueError(f"--lr must be > 0, got {self.lr}")


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    # Mean per micro-batch; the schedules divide the summed gradients by m (scale_grads=True), so a step
    # equals full-batch training on equal micro-batches (chapter 7, section 4).
    return nn.functional.mse_loss(output, target)


def split_layers(model: nn.Sequential, counts: tuple[int, ...]) -> list[nn.Sequential]:
    """Cut ``Linear, ReLU, ..., Linear`` into stages holding ``counts[s]`` Linears each (a ReLU follows its Linear)."""
    blocks: list[list[nn.Module]] = []
    for layer in model:
        if isinstance(layer, nn.Linear):
            blocks.append([layer])
        else:
            blocks[-1].append(layer)
    if sum(counts) != len(blocks) or min(counts) < 1:
        raise ValueError(f"a split of {len(blocks)} Linears into stages of at least one each, got {counts}")
    edges = [sum(counts[:s]) for s in range(len(counts) + 1)]
    return [nn.Sequential(*[m for b in blocks[edges[s]:edges[s + 1]] for m in b]) for s in range(len(counts))]


# [teach zero_bubble]
def placement(schedule: str, rank: int, p: int) -> list[int]:
    """The stages this rank holds: 1F1B one; interleaved (ZB or not) r, r+p; ZB-V r and 2p-1-r (a V)."""
    if schedule == "1f1b":
        return [rank]
    if schedule == "zbv":
        return [rank, 2 * p - 1 - rank]   # stage 0 and the last stage both live on rank 0
    return [rank, rank + p]


def make_schedule(schedule: str, stages: list, m: int):
    if schedule == "1f1b":
        return Schedule1F1B(stages[0], n_microbatches=m, loss_fn=loss_fn)
    if schedule == "interleaved":
        return ScheduleInterleaved1F1B(stages, n_microbatches=m, loss_fn=loss_fn)
    if schedule == "interleaved_zb":   # backward split into I and W, W fills the bubbles (ZB1P)
        return ScheduleInterleavedZeroBubble(stages, n_microbatches=m, loss_fn=loss_fn)
    return ScheduleZBVZeroBubble(stages, n_microbatches=m, loss_fn=loss_fn)
# [/teach zero_bubble]


def train_split(ctx, schedule: str, counts: tuple[int, ...], m: int, width: int, mb_size: int, steps: int,
                lr: float, seed: int) -> dict:
    """Train ``steps`` steps of ``schedule`` on stages of ``counts`` Linears; compare with one process."""
    p, n = ctx.world_size, len(counts)
    n_linear = sum(counts)
    model = lambda: seeded(MLP, seed, D_IN, [width] * (n_linear - 1), D_OUT)  # noqa: E731  same weights everywhere
    parts, reference = split_layers(model(), counts), model()
    log = ActionLog()
    mine = placement(schedule, ctx.rank, p)
    stages = [TimedPipelineStage(parts[s].to(ctx.device), s, n, ctx.device, log) for s in mine]
    sched = make_schedule(schedule, stages, m)
    params = [q for st in stages for q in st.submod.parameters()]
    opt = torch.optim.SGD(params, lr=lr)
    x, y = regression(n=m * mb_size, d_in=D_IN, d_out=D_OUT, seed=seed).tensors
    first, last = 0 in mine, n - 1 in mine
    losses, events, step_s = [], [], 0.0
    for _ in range(steps):
        opt.zero_grad()
        t0 = runtime.barrier_time()  # every rank leaves the barrier together: one time zero
        log.start(t0)
        mb_losses: list[torch.Tensor] = []
        sched.step(*([x.to(ctx.device)] if first else []), target=y.to(ctx.device) if last else None,
                   losses=mb_losses if last else None)
        opt.step()
        step_s = time.perf_counter() - t0
        events = log.stop()
        if last:
            losses.append(torch.stack(mb_losses).mean().item())
    # The single-process reference: the whole model, the whole mini-batch, the same SGD steps.
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
    ref_losses = []
    for _ in range(steps):
        ref_opt.zero_grad()
        loss = loss_fn(reference(x), y)
        loss.backward()
        ref_opt.step()
        ref_losses.append(loss.item())
    ref_parts = split_layers(reference, counts)
    diff = max((a.detach().cpu() - b.detach()).abs().max().item()
               for st, s in zip(stages, mine) for a, b in zip(st.submod.parameters(), ref_parts[s].parameters()))
    return dict(schedule=schedule, counts=list(counts), stages=mine, m=m, events=events, cpu=log.cpu, step_s=step_s,
                max_weight_diff=diff, **(dict(losses=losses, ref_losses=ref_losses) if last else {}))


def run(cfg: ZeroBubbleConfig) -> None:
    with runtime.setup() as ctx:
        p, runs = ctx.world_size, []
        for schedule in cfg.schedules:
            n_stages = p if schedule == "1f1b" else 2 * p
            if cfg.layers % n_stages:
                raise ValueError(f"--layers {cfg.layers} must split evenly into {n_stages} stages for {schedule}")
            PipeSpec(schedule, p, cfg.microbatches, n_stages // p)  # the simulator's checks (interleaved: m % p == 0)
            counts = (cfg.layers // n_stages,) * n_stages
            runs.append(train_split(ctx, schedule, counts, cfg.microbatches, cfg.width, cfg.mb_size, cfg.steps,
                                    cfg.lr, cfg.seed))
            dist.barrier()  # the next schedule's stages start only when every rank is done with these
        runtime.report(runs=runs)


main = cli(ZeroBubbleConfig, run)

if __name__ == "__main__":
    main()
