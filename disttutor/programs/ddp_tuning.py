"""Tuning torch's DDP: ``bucket_cap_mb`` and overlap, ``gradient_as_bucket_view``, ``static_graph`` (chapter 8, §8.3).

One launch, three measurements, each checked against a single-process reference:

* **bucket sweep** -- for every ``--caps-mb`` value, each timed step measures, in turn,
  ``backward`` with DDP's all-reduces in flight (``t_ddp``), the same ``backward`` inside
  ``no_sync()`` (no communication: ``t_bwd``) and the same buckets all-reduced on their own
  (``t_comm``). What DDP hid behind the backward is ``t_bwd + t_comm - t_ddp``. The three
  are interleaved step by step, so a busy machine slows all three alike. Bucket counts and
  sizes come from a recording comm hook on an untimed copy (whose gradients are also compared
  with one process running the whole global batch).
* **gradient_as_bucket_view** -- after one step, which storages hold the gradients: their own
  (``False``: every gradient exists twice, in ``.grad`` and in its bucket) or the buckets
  (``True``: ``.grad`` is a view). The bytes are summed over distinct storages.
* **static_graph** -- a layer applied twice under reentrant activation checkpointing (one of
  the cases torch's documentation lists for ``static_graph=True``): gradients compared with
  the single-process reference, with and without the flag.

    disttutor run ddp_tuning -n 2 -- --caps-mb 0.5 2 4 25
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

from disttutor.data_parallel import perf
from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt


@dataclass(frozen=True)
class TuningConfig:
    caps_mb: tuple[float, ...] = opt((0.5, 2.0, 4.0, 25.0), "bucket_cap_mb values to sweep")
    width: int = opt(512, "width of the sweep's MLP (gradient bytes grow with width**2)")
    layers: int = opt(6, "Linear layers of the sweep's MLP")
    batch: int = opt(32, "per-rank batch")
    steps: int = opt(5, "timed steps per bucket size (after one untimed warm-up)")
    seed: int = opt(0, "model and data seed")

    def __post_init__(self):
        require_positive(self, "width", "layers", "batch", "steps")
        if not self.caps_mb or any(not c > 0 for c in self.caps_mb):
            raise ValueError(f"caps_mb must be one or more positive sizes in MB, got {list(self.caps_mb)}")


def mlp(cfg: TuningConfig) -> nn.Module:
    torch.manual_seed(cfg.seed)  # the same weights on every rank and in the reference
    return nn.Sequential(*[m for _ in range(cfg.layers) for m in (nn.Linear(cfg.width, cfg.width), nn.ReLU())])


class Recorder:
    """A comm hook doing the default all-reduce, keeping each bucket's buffer (its size, its storage)."""

    def __init__(self):
        self.buffers: list[torch.Tensor] = []

    def hook(self, state, bucket):  # DDP wants a function (it logs hook.__name__): a bound method is one
        self.buffers.append(bucket.buffer())
        return default_hooks.allreduce_hook(state, bucket)


def storages_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (two views of one storage count once)."""
    seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(seen.values())


def reference_grads(make, x: torch.Tensor) -> list[torch.Tensor]:
    """One process, the whole global batch: the gradients every DDP rank must end with."""
    ref = make()
    F.mse_loss(ref(x), torch.zeros_like(ref(x))).backward()
    return [p.grad for p in ref.parameters()]


def max_err(module: nn.Module, ref: list[torch.Tensor]) -> float:
    return max((p.grad - g).abs().max().item() for p, g in zip(module.parameters(), ref))


def sweep_one(cap: float, cfg: TuningConfig, ctx, xg: torch.Tensor, ref) -> dict:
    x = xg.chunk(ctx.world_size)[ctx.rank]
    loss = lambda m: F.mse_loss(m(x), torch.zeros(len(x), cfg.width, device=x.device))  # noqa: E731
    # Untimed copy with a recording hook: how many buckets, how large, and are the numbers right.
    probe, rec = DDP(mlp(cfg).to(ctx.device), bucket_cap_mb=cap), Recorder()
    probe.register_comm_hook(None, rec.hook)
    loss(probe).backward()  # DDP's first step runs one big bucket, then rebuilds them in gradient-ready order
    rec.buffers.clear()
    probe.zero_grad()
    loss(probe).backward()  # the buckets every later step uses
    sizes = [b.numel() * b.element_size() for b in rec.buffers]
    err = max_err(probe.module, ref)
    del probe
    # Timed copy: DDP's own C++ all-reduce path, as a user gets it.
    ddp = DDP(mlp(cfg).to(ctx.device), bucket_cap_mb=cap)
    bufs = [torch.ones(n // 4, device=ctx.device) for n in sizes]  # fp32 buckets of the same sizes
    t_ddp, t_bwd, t_comm = [], [], []
    for step in range(cfg.steps + 1):  # step 0 warms up (allocations, the first bucket rebuild)
        ddp.zero_grad(set_to_none=False)
        l1 = loss(ddp)
        dist.barrier()  # every rank starts the timed part together: a late rank's wait is not "communication"
        _, s1 = perf.timed(l1.backward)  # DDP launches each bucket's all-reduce as the bucket fills
        with ddp.no_sync():
            l2 = loss(ddp)
            dist.barrier()
            _, s2 = perf.timed(l2.backward)  # the same backward, nothing sent
        dist.barrier()

        def comm_alone():
            # DDP's pattern without the backward: all buckets async, then wait for all of them.
            for w in [dist.all_reduce(b, async_op=True) for b in bufs]:
                w.wait()
        _, s3 = perf.timed(comm_alone)
        if step:
            t_ddp.append(s1), t_bwd.append(s2), t_comm.append(s3)
    ms = dict(ddp=perf.median_ms(t_ddp), bwd=perf.median_ms(t_bwd), comm=perf.median_ms(t_comm))
    hidden = ms["bwd"] + ms["comm"] - ms["ddp"]
    return dict(cap_mb=cap, buckets=len(sizes), bucket_bytes=sizes, max_err=err, ddp_ms=ms["ddp"],
                bwd_ms=ms["bwd"], comm_ms=ms["comm"], hidden_ms=hidden, overlap=hidden / ms["comm"])


def bucket_view(flag: bool, cfg: TuningConfig, ctx, xg: torch.Tensor, ref) -> dict:
    ddp, rec = DDP(mlp(cfg).to(ctx.device), gradient_as_bucket_view=flag), Recorder()
    ddp.register_comm_hook(None, rec.hook)
    x = xg.chunk(ctx.world_size)[ctx.rank]
    F.mse_loss(ddp(x), torch.zeros(len(x), cfg.width, device=x.device)).backward()
    grads = [p.grad for p in ddp.parameters()]
    bucket_ptrs = {b.untyped_storage().data_ptr() for b in rec.buffers}
    return dict(flag=flag, grads_in_buckets=sum(g.untyped_storage().data_ptr() in bucket_ptrs for g in grads),
                params=len(grads), grad_bytes=sum(g.numel() * g.element_size() for g in grads),
                held_bytes=storages_bytes(grads + rec.buffers), max_err=max_err(ddp.module, ref))


class TwiceCheckpointed(nn.Module):
    """The same layer applied twice, each under reentrant checkpointing: its gradient arrives in two parts."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.shared, self.head = nn.Linear(16, 16), nn.Linear(16, 1)

    def forward(self, x):
        h = checkpoint(self.shared, x, use_reentrant=True)
        h = checkpoint(self.shared, torch.relu(h), use_reentrant=True)
        return self.head(h)


def static_graph(flag: bool, ctx, steps: int = 3) -> dict:
    xg = torch.randn(8 * ctx.world_size, 16, generator=torch.Generator().manual_seed(3)).to(ctx.device)
    ref = TwiceCheckpointed().to(ctx.device)
    ref(xg.requires_grad_()).mean().backward()
    ddp = DDP(TwiceCheckpointed().to(ctx.device), static_graph=flag)
    x = xg.detach().chunk(ctx.world_size)[ctx.rank]
    # Record every warning the steps raise (torch's C++ TORCH_WARN arrives as a Python warning too),
    # so the chapter states what was seen rather than assuming "nothing warns".
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            for _ in range(steps):  # static_graph learns the graph in step 1: check a later step
                ddp.zero_grad()
                ddp(x.clone().requires_grad_()).mean().backward()
        except RuntimeError as e:
            # DDP raises on every rank alike (same model, same graph), so no rank is left waiting.
            return dict(flag=flag, error=str(e).split("\n")[0][:200], warnings=_firsts(seen))
    return dict(flag=flag, warnings=_firsts(seen), max_err=max(
        (p.grad - q.grad).abs().max().item() for p, q in zip(ddp.module.parameters(), ref.parameters())))


def _firsts(seen) -> list[str]:
    """Each distinct warning once: its category and the first line of its message."""
    return sorted({f"{w.category.__name__}: {str(w.message).splitlines()[0][:160]}" for w in seen})


def run(cfg: TuningConfig) -> None:
    with runtime.setup() as ctx:
        g = torch.Generator().manual_seed(cfg.seed + 1)
        xg = torch.randn(cfg.batch * ctx.world_size, cfg.width, generator=g).to(ctx.device)
        # The reference divides by the global batch; DDP averages per-rank means: equal for equal shards.
        ref = reference_grads(lambda: mlp(cfg).to(ctx.device), xg)
        total = len(cfg.caps_mb) + 4
        rows = []
        for cap in cfg.caps_mb:
            rows.append(sweep_one(cap, cfg, ctx, xg, ref))
            runtime.progress(len(rows), total, desc="ddp tuning", cap_mb=cap)
        views = []
        for flag in (False, True):
            views.append(bucket_view(flag, cfg, ctx, xg, ref))
            runtime.progress(len(rows) + len(views), total, desc="ddp tuning")
        statics = []
        for flag in (True, False):
            statics.append(static_graph(flag, ctx))
            runtime.progress(total - 2 + len(statics), total, desc="ddp tuning")
        runtime.report(rows=rows, bucket_view=views, static_graph=statics, backend=ctx.backend, device=str(ctx.device),
                       grad_mb=sum(p.numel() * 4 for p in mlp(cfg).parameters()) / 2**20)


main = cli(TuningConfig, run)


if __name__ == "__main__":
    main()
