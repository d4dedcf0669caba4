"""Pipeline-parallel training with ``torch.distributed.pipelining`` (chapter 7).

The model (:class:`disttutor.workloads.models.MLP`) is cut into ``world_size * v``
stages; rank ``r`` holds stages ``r, r + p, ...`` (one stage for GPipe and
1F1B, ``v`` for interleaved 1F1B). Each step splits one mini-batch into
``m`` micro-batches, runs the chosen schedule (every forward and backward of
every micro-batch), then takes **one** optimizer step -- the same update
single-process training on the full mini-batch would make, which every rank
checks against a reference it computes itself.

Each stage's forward and backward are timed (:class:`TimedStage`) so the notebook can draw the measured Gantt chart next to the theoretical one::

    disttutor run pipeline -n 4 -- --schedule 1f1b --microbatches 8
    disttutor run pipeline -n 2 -- --schedule interleaved --stages-per-rank 2 --microbatches 4
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                          ScheduleInterleaved1F1B)

from disttutor.rank import runtime
from disttutor.workloads.data import regression
from disttutor.workloads.models import MLP, seeded
from disttutor.pipeline.schedules import SCHEDULES, ScheduleName
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt


@dataclass(frozen=True)
class PipeConfig:
    schedule: ScheduleName = opt("1f1b", "pipeline schedule")
    microbatches: int = opt(4, "m: micro-batches per mini-batch (per optimizer step)")
    stages_per_rank: int = opt(1, "v: > 1 only for the interleaved schedule")
    steps: int = opt(3, "optimizer steps; the timeline is recorded on the last one")
    batch: int = opt(32, "mini-batch size (split into m equal micro-batches)")
    width: int = opt(32, "hidden width: bigger = more compute per stage")
    layers_per_stage: int = opt(1, "Linear layers in each stage")
    lr: float = opt(0.05, "SGD learning rate")
    seed: int = opt(0, "seed of the data and the weights")
    bad_shape: bool = opt(False, "trap: stage 1 expects a different activation width than stage 0 sends")
    reference: bool = opt(True, "also train the whole model in one process and compare (off: benchmarks)")

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"--schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        require_positive(self, "microbatches", "stages_per_rank", "steps", "batch", "width", "layers_per_stage", flag_style=True)
        if self.schedule != "interleaved" and self.stages_per_rank != 1:
            raise ValueError(f"schedule {self.schedule!r} holds one stage per rank; "
                             "--stages-per-rank > 1 needs --schedule interleaved")
        if self.batch % self.microbatches:
            # Equal micro-batches make "mean of the micro-batch means" equal the full-batch mean.
            raise ValueError(f"--batch {self.batch} must be divisible by --microbatches {self.microbatches} "
                             "(equal micro-batches)")
        if self.lr <= 0:
            raise ValueError(f"--lr must be > 0, got {self.lr}")


# --- timing: when did each stage compute each micro-batch? -------------------------------------

class Recorder:
    """Collects ``[kind, microbatch, stage, t0, t1]`` for one optimizer step, relative to a shared zero."""

    def __init__(self, microbatches: int):
        self.m = microbatches
        self.t_zero: float | None = None
        self.raw: list[tuple[str, int, float, float, float]] = []
        self.slot_cpu: list[float] = []  # CPU seconds of each slot of :meth:`stop`'s timeline, same order

    def start(self, t_zero: float) -> None:
        self.t_zero, self.raw = t_zero, []

    def add(self, kind: str, stage: int, t0: float, t1: float, cpu: float = 0.0) -> None:
        # cpu: the process's CPU seconds during the slot. Wall time / CPU time > 1 means the rank was
        # waiting for a core (ranks time-share the cores): the overhead model needs the two apart.
        if self.t_zero is not None:
            self.raw.append((kind, stage, t0 - self.t_zero, t1 - self.t_zero, cpu))

    def stop(self) -> list[list]:
        """Every stage runs its forwards, and its backwards, in micro-batch order 0..m-1 (all three
        schedules), so the i-th of the *last* m events of a kind is micro-batch i. ("Last": on the
        first step torch runs extra passes to infer the shapes between stages; they are not slots.)"""
        out = []
        for kind in ("F", "B"):
            for stage in sorted({e[1] for e in self.raw}):
                evs = sorted((e for e in self.raw if e[0] == kind and e[1] == stage), key=lambda e: e[2])
                for mb, (_, _, t0, t1, cpu) in enumerate(evs[-self.m:]):
                    out.append([kind, mb, stage, round(t0, 6), round(t1, 6), round(cpu, 6)])
        self.t_zero = None
        out.sort(key=lambda e: e[3])
        self.slot_cpu = [e.pop() for e in out]
        return out


class _Mark(torch.autograd.Function):
    """Identity whose *backward* calls ``hook()``: autograd reaches it exactly when the gradient
    passes that point, which is how we timestamp a backward without touching torch internals."""

    @staticmethod
    def forward(ctx, x, hook):
        ctx.hook = hook
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.hook()
        return grad, None


class TimedStage(nn.Module):
    """Wraps a stage's layers: times each forward, and each backward from the gradient's arrival at the
    output to its departure from the input. Numerically the identity."""

    def __init__(self, inner: nn.Module, stage: int, recorder: Recorder):
        super().__init__()
        self.inner, self.stage, self.rec = inner, stage, recorder

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled() or x.device.type == "meta":
            return self.inner(x)  # shape inference or evaluation: not a scheduled slot
        if not x.requires_grad:
            # First stage: data needs no gradient, so nothing would mark the end of backward.
            # A grad-requiring copy costs one small extra matmul and changes no weight gradient.
            x = x.detach().requires_grad_()
        t_b = {}
        x = _Mark.apply(x, lambda: self.rec.add("B", self.stage, t_b["start"], time.perf_counter(),
                                                time.process_time() - t_b["cpu"]))
        t0, c0 = time.perf_counter(), time.process_time()
        y = self.inner(x)
        self.rec.add("F", self.stage, t0, time.perf_counter(), time.process_time() - c0)
        return _Mark.apply(y, lambda: t_b.update(start=time.perf_counter(), cpu=time.process_time()))


D_IN, D_OUT = 16, 4


def full_model(cfg: PipeConfig, n_stages: int) -> MLP:
    """The whole model, same weights on every rank (fixed seed): ``n_stages * layers_per_stage`` Linears."""
    n_linear = n_stages * cfg.layers_per_stage
    return seeded(MLP, cfg.seed, D_IN, [cfg.width] * (n_linear - 1), D_OUT)


def split_stages(model: nn.Sequential, n_stages: int) -> list[nn.Sequential]:
    """Cut ``Linear, ReLU, Linear, ReLU, ..., Linear`` into ``n_stages`` equal runs of layers."""
    blocks: list[list[nn.Module]] = []
    for layer in model:
        if isinstance(layer, nn.Linear):
            blocks.append([layer])
        else:
            blocks[-1].append(layer)  # a ReLU belongs to the Linear before it
    k = len(blocks) // n_stages
    return [nn.Sequential(*[m for b in blocks[s * k:(s + 1) * k] for m in b]) for s in range(n_stages)]


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """MSE *mean* over one micro-batch. The schedule divides each stage's summed gradient by m
    (``scale_grads=True``), so the step sees mean over micro-batches of micro-batch means =
    the full-batch mean, exactly as the single-process reference."""
    return nn.functional.mse_loss(output, target)


def make_schedule(cfg: PipeConfig, stages: list[PipelineStage]):
    if cfg.schedule == "gpipe":
        return ScheduleGPipe(stages[0], n_microbatches=cfg.microbatches, loss_fn=loss_fn)
    if cfg.schedule == "1f1b":
        return Schedule1F1B(stages[0], n_microbatches=cfg.microbatches, loss_fn=loss_fn)
    return ScheduleInterleaved1F1B(stages, n_microbatches=cfg.microbatches, loss_fn=loss_fn)


def build(cfg: PipeConfig, pp_rank: int, pp_size: int, device: torch.device, group=None):
    """This rank's stages (modules wrapped for timing) and the reference model they come from."""
    n_stages = pp_size * cfg.stages_per_rank
    reference = full_model(cfg, n_stages)
    parts = split_stages(full_model(cfg, n_stages), n_stages)
    if cfg.bad_shape and n_stages > 1:
        # The trap: stage 1 was written for a different width than stage 0 produces.
        parts[1][0] = nn.Linear(cfg.width + 1, parts[1][0].out_features)
    recorder = Recorder(cfg.microbatches)
    mine = list(range(pp_rank, n_stages, pp_size))  # looped placement: rank r holds r, r+p, ...
    stages = [PipelineStage(TimedStage(parts[s].to(device), s, recorder), s, n_stages, device, group=group)
              for s in mine]
    return stages, mine, reference, recorder


def reference_step(reference: nn.Module, opt, x, y) -> float:
    """Single-process training on the whole mini-batch: what the pipeline must reproduce."""
    opt.zero_grad()
    loss = loss_fn(reference(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def compare(stages, mine, reference, cfg: PipeConfig, n_stages: int) -> float:
    """Largest |pipeline weight - reference weight| over this rank's stages."""
    ref_parts = split_stages(reference, n_stages)
    diff = 0.0
    for st, s in zip(stages, mine):
        for a, b in zip(st.submod.parameters(), ref_parts[s].parameters()):
            diff = max(diff, (a.detach().cpu() - b.detach()).abs().max().item())
    return diff


def train(cfg: PipeConfig, ctx, x, y, pp_rank: int, pp_size: int, group=None, after_backward=None) -> dict:
    """The training loop shared by :mod:`pipeline` and :mod:`pipeline_hybrid`.

    ``x, y`` is this pipeline's mini-batch; ``after_backward(params)`` runs
    between the schedule and the optimizer step (the hybrid program
    all-reduces gradients across pipeline replicas there).
    """
    n_stages = pp_size * cfg.stages_per_rank
    stages, mine, reference, recorder = build(cfg, pp_rank, pp_size, ctx.device, group)
    sched = make_schedule(cfg, stages)
    params = [p for st in stages for p in st.submod.parameters()]
    opt = torch.optim.SGD(params, lr=cfg.lr)
    is_first, is_last = 0 in mine, n_stages - 1 in mine
    x, y = x.to(ctx.device), y.to(ctx.device)
    losses, events, t_step, cpu_step, steps_s = [], [], 0.0, 0.0, []
    for step in range(cfg.steps):
        opt.zero_grad()
        t_start = runtime.barrier_time()  # every rank leaves the barrier together: a shared time zero
        c_start = time.process_time()
        recorder.start(t_start)
        mb_losses: list[torch.Tensor] = []
        # First stage feeds the data, last stage gets the targets; the others only talk to neighbours.
        sched.step(*([x] if is_first else []), target=y if is_last else None,
                   losses=mb_losses if is_last else None)
        if after_backward is not None:
            after_backward(params)
        opt.step()
        t_step, cpu_step = time.perf_counter() - t_start, time.process_time() - c_start
        steps_s.append(t_step)
        events = recorder.stop()
        if is_last:
            losses.append(torch.stack(mb_losses).mean().item())  # mean of equal micro-batch means
        runtime.progress(step + 1, cfg.steps, desc=f"{cfg.schedule} pipeline")
    return dict(stages=mine, losses=losses, events=events, step_s=t_step, steps_s=steps_s, step_cpu_s=cpu_step,
                slot_cpu=recorder.slot_cpu,
                stages_obj=stages, reference=reference, n_stages=n_stages, is_last=is_last)


def reference_losses(cfg: PipeConfig, reference: nn.Module, x, y) -> list[float]:
    opt = torch.optim.SGD(reference.parameters(), lr=cfg.lr)
    return [reference_step(reference, opt, x, y) for _ in range(cfg.steps)]


def run(cfg: PipeConfig) -> None:
    with runtime.setup() as ctx:
        data = regression(n=cfg.batch, d_in=D_IN, d_out=D_OUT, seed=cfg.seed)
        x, y = data.tensors
        out = train(cfg, ctx, x, y, pp_rank=ctx.rank, pp_size=ctx.world_size)
        report = dict(schedule=cfg.schedule, stages=out["stages"], events=out["events"], step_s=out["step_s"],
                      steps_s=out["steps_s"], step_cpu_s=out["step_cpu_s"], slot_cpu=out["slot_cpu"])
        if cfg.reference:
            report.update(ref_losses=reference_losses(cfg, out["reference"], x, y),
                          max_weight_diff=compare(out["stages_obj"], out["stages"], out["reference"], cfg,
                                                  out["n_stages"]))
        if out["is_last"]:
            report["losses"] = out["losses"]
        runtime.report(**report)
        dist.barrier()  # nobody tears down the group while a neighbour still sends


main = cli(PipeConfig, run)  # the command line is derived from PipeConfig's fields



if __name__ == "__main__":
    main()
