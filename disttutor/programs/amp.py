"""Mixed precision under DDP: fp32 and autocast trained side by side (chapter 8, article §8.1).

Two DDP replicas of the same seeded model train on the same batches; their steps are
*interleaved* (fp32 step, autocast step, fp32 step, ...) so that a loaded machine
slows both alike and the step-time ratio stays meaningful.

The article's ``from torch.cuda.amp import GradScaler, autocast`` is deprecated: it
only ever meant CUDA. Today's API names the device: ``torch.autocast(device_type,
dtype)`` and ``torch.amp.GradScaler(device_type)``, so the same loop runs on CPU
(bf16) and GPU (fp16 + scaler, or bf16)::

    disttutor run amp -n 2 -- --steps 40
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from disttutor.data_parallel import perf
from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt


@dataclass(frozen=True)
class AMPConfig:
    steps: int = opt(40, "optimiser steps per precision")
    batch: int = opt(64, "GLOBAL batch per step (split over ranks)")
    samples: int = opt(1024, "dataset size")
    lr: float = opt(0.1, "SGD learning rate")
    clip: float = opt(1.0, "max gradient norm (clipped after unscaling)")
    bf16_on_cuda: bool = opt(False, "on CUDA use bf16 instead of fp16 + GradScaler")
    seed: int = opt(0, "model and data seed")

    def __post_init__(self):
        require_positive(self, "steps", "batch", "samples")
        if not self.lr > 0 or not self.clip > 0:
            raise ValueError(f"lr and clip must be > 0, got lr={self.lr}, clip={self.clip}")


class Trainer:
    """One DDP replica and its optimiser; ``dtype=None`` means plain fp32."""

    def __init__(self, cfg: AMPConfig, ctx: runtime.Context, prec: perf.Precision | None):
        self.cfg, self.ctx, self.prec = cfg, ctx, prec
        ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
        self.ddp = DDP(perf.model(cfg.seed).to(ctx.device), device_ids=ids)
        self.opt = torch.optim.SGD(self.ddp.parameters(), lr=cfg.lr)
        # enabled=False makes the scaler a no-op (fp32, or bf16 which needs no scaling): one loop for all cases.
        self.scaler = torch.amp.GradScaler(ctx.device.type, enabled=bool(prec and prec.scaler))
        self.losses: list[float] = []
        self.times: list[float] = []
        self.clipped_norms: list[float] = []

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(self.ctx.device.type, dtype=self.prec.dtype if self.prec else torch.float32,
                            enabled=self.prec is not None):
            out = self.ddp(x)                       # matmuls run in bf16/fp16 inside autocast
            loss = F.mse_loss(out.float(), y)       # the loss itself in fp32 (autocast would too)
        self.scaler.scale(loss).backward()          # DDP all-reduces the (scaled) gradients here
        # Unscale BEFORE clipping: clipping scaled gradients would compare a norm ~2**16 times too big.
        self.scaler.unscale_(self.opt)
        norm = torch.nn.utils.clip_grad_norm_(self.ddp.parameters(), self.cfg.clip)
        self.scaler.step(self.opt)                  # skipped if an inf/NaN was found while unscaling
        self.scaler.update()
        if self.ctx.device.type == "cuda":
            torch.cuda.synchronize()                # time the work, not its queueing
        self.times.append(time.perf_counter() - t0)
        self.losses.append(loss.item())
        self.clipped_norms.append(float(norm))


def run(cfg: AMPConfig) -> None:
    with runtime.setup() as ctx:
        prec = perf.precision(ctx.device, cfg.bf16_on_cuda)
        x, y = (t.to(ctx.device) for t in perf.dataset(cfg.samples, cfg.seed + 1))
        fp32, amp = Trainer(cfg, ctx, None), Trainer(cfg, ctx, prec)
        for s in range(cfg.steps):
            xb, yb = perf.batch(x, y, s, cfg.batch, ctx.rank, ctx.world_size)
            # Alternate which goes first, so neither always runs on a "warmer" cache.
            for t in ((fp32, amp) if s % 2 == 0 else (amp, fp32)):
                t.step(xb, yb)
            runtime.progress(s + 1, cfg.steps, desc=f"fp32 vs {prec.name} autocast", loss=fp32.losses[-1])
        # The curve a learner sees: each step's loss averaged over ranks (one collective at the end).
        curves = torch.tensor([fp32.losses, amp.losses], dtype=torch.float64, device=ctx.device)
        dist.all_reduce(curves)
        curves /= ctx.world_size
        same = [torch.equal(p, q) for p, q in zip(fp32.ddp.parameters(), amp.ddp.parameters())]
        warm = slice(min(3, cfg.steps - 1), None)  # the first steps include one-off allocation and kernel choice
        runtime.report(
            device=str(ctx.device), autocast_dtype=prec.name, scaler=prec.scaler,
            loss_fp32=curves[0].tolist(), loss_amp=curves[1].tolist(),
            step_ms_fp32=perf.median_ms(fp32.times[warm]), step_ms_amp=perf.median_ms(amp.times[warm]),
            max_grad_norm=max(fp32.clipped_norms + amp.clipped_norms), any_param_identical=any(same),
            peak_mem_mb=(torch.cuda.max_memory_allocated() / 2**20 if ctx.device.type == "cuda" else None))


main = cli(AMPConfig, run)


if __name__ == "__main__":
    main()
