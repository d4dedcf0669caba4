"""Every rank times its share of a training step's forward and backward *alone*: the same layers on the
same rows as the run, every rank at the same time, no communication, no optimizer step.

Chapter 13 profiles a run this way before predicting what distribution adds (PipeDream's planner likewise
starts from a per-layer profile). Each of ``--models`` is one run's model, on the ``--rows`` of the same
position:

* ``mlp``: chapter 4's MLP ``16 -> hidden -> 4``, MSE loss;
* ``tinylm``: chapter 11's TinyLM (``--dim``, ``--ff``), rows are sequences, cross-entropy;
* ``stage``: chapter 7's MLP (``--width``, ``--layers-per-stage``) cut into one stage per rank; rank r
  runs stage r's ``--microbatches`` forwards, then their backwards (GPipe's order), ``rows`` rows each
  (the last stage computes the loss; the others backpropagate a gradient of their output's shape).

A timed block is one step's compute: gradients cleared (untimed), then every micro-batch's forward and
backward. The report is, per model, the median over ``--iters`` blocks of the slowest rank's seconds.
The TinyLM's subnormal floats are flushed to zero, as ``sharding --time`` does::

    disttutor run compute_bench -n 2 -- --models mlp stage --rows 256 64 --microbatches 4
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from disttutor.rank import runtime
from disttutor.contract.config import require_non_negative, require_positive
from disttutor.contract.options import cli, opt
from disttutor.programs.scale_bench import slowest

MODELS = ("mlp", "tinylm", "stage")


@dataclass(frozen=True)
class ComputeBenchConfig:
    models: tuple[str, ...] = opt(("mlp",), f"the runs' models, of {', '.join(MODELS)}")
    rows: tuple[int, ...] = opt((256,), "rows (tinylm: sequences) per micro-batch on each rank, one per model")
    microbatches: int = opt(1, "stage: forwards, then as many backwards, per timed block")
    hidden: tuple[int, ...] = opt((512, 512, 512), "mlp: the hidden widths of 16 -> hidden -> 4")
    dim: int = opt(512, "tinylm: the width")
    ff: int = opt(2048, "tinylm: the MLP width")
    width: int = opt(1024, "stage: the pipeline MLP's width")
    layers_per_stage: int = opt(2, "stage: Linear layers per stage")
    warmup: int = opt(3, "untimed blocks first (allocator, page faults)")
    iters: int = opt(5, "timed blocks")

    def __post_init__(self):
        bad = [m for m in self.models if m not in MODELS]
        if bad or not self.models:
            raise ValueError(f"unknown model(s) {bad or self.models}; choose from {', '.join(MODELS)}")
        if len(self.rows) != len(self.models) or any(r < 1 for r in self.rows):
            raise ValueError(f"--rows needs one count >= 1 per model ({len(self.models)}), got {self.rows}")
        require_positive(self, "microbatches", "dim", "ff", "width", "layers_per_stage", "iters")
        require_non_negative(self, "warmup")
        if not self.hidden or any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden widths must be >= 1, got {self.hidden}")


def build(cfg: ComputeBenchConfig, model: str, rows: int, rank: int, world: int, device: torch.device):
    """``(module, inputs, finish)``: this rank's layers, one input per micro-batch, and ``finish(out, i)``
    that turns micro-batch i's output into the backward the run does (a loss, or an output gradient)."""
    from disttutor.programs.pipeline import D_IN, D_OUT, split_stages
    from disttutor.sharding import model as S
    from disttutor.workloads.models import MLP, seeded

    g = torch.Generator().manual_seed(rank)
    m = cfg.microbatches if model == "stage" else 1
    if model == "tinylm":
        module = seeded(S.TinyLM, 0, dim=cfg.dim, ff=cfg.ff).to(device)
        xs = [torch.randint(0, S.VOCAB, (rows, S.SEQ), generator=g).to(device) for _ in range(m)]
        ys = [torch.randint(0, S.VOCAB, (rows, S.SEQ), generator=g).to(device) for _ in range(m)]
        return module, xs, lambda out, i: S.loss_fn(out, ys[i]).backward()
    if model == "mlp":
        module = seeded(MLP, 0, D_IN, list(cfg.hidden), D_OUT).to(device)
        d_in, last = D_IN, True
    else:
        n_linear = world * cfg.layers_per_stage
        full = seeded(MLP, 0, D_IN, [cfg.width] * (n_linear - 1), D_OUT)
        module = split_stages(full, world)[rank].to(device)
        d_in, last = (D_IN if rank == 0 else cfg.width), rank == world - 1
    xs = [torch.randn(rows, d_in, generator=g).to(device).requires_grad_(model == "stage" and rank > 0)
          for _ in range(m)]
    if last:
        ys = [torch.randn(rows, D_OUT, generator=g).to(device) for _ in range(m)]
        return module, xs, lambda out, i: nn.functional.mse_loss(out, ys[i]).backward()
    return module, xs, lambda out, i: out.backward(torch.ones_like(out) / out.numel())


def time_blocks(cfg: ComputeBenchConfig, model: str, rows: int, ctx) -> list[float]:
    module, xs, finish = build(cfg, model, rows, ctx.rank, ctx.world_size, ctx.device)
    own = []
    for it in range(cfg.warmup + cfg.iters):
        for p in module.parameters():
            p.grad = None
        for x in xs:
            x.grad = None
        dist.barrier()                       # every rank computes at the same time, as in the run
        t0 = time.perf_counter()
        outs = [module(x) for x in xs]       # every forward, then every backward (GPipe's order)
        for i, out in enumerate(outs):
            finish(out, i)
        if ctx.device.type == "cuda":
            torch.cuda.synchronize()         # kernels run asynchronously: the block ends when they do
        if it >= cfg.warmup:
            own.append(time.perf_counter() - t0)
    return slowest(own, ctx)                 # each block's slowest rank


def _params(cfg: ComputeBenchConfig, model: str, ctx) -> int:
    """This rank's parameters (the tied TinyLM weight once): what chapter 13's model counts."""
    return sum(p.numel() for p in build(cfg, model, 1, ctx.rank, ctx.world_size, torch.device("cpu"))[0].parameters())


def run(cfg: ComputeBenchConfig) -> None:
    with runtime.setup() as ctx:
        torch.set_num_threads(1)             # one core per rank, as every rank of the course runs
        times = {}
        for m, rows in zip(cfg.models, cfg.rows):
            torch.set_flush_denormal(m == "tinylm")  # as the runs: only sharding --time flushes subnormals
            times[m] = time_blocks(cfg, m, rows, ctx)
        torch.set_flush_denormal(False)
        runtime.report(seconds={m: statistics.median(t) for m, t in times.items()}, times_s=times,
                       params={m: _params(cfg, m, ctx) for m in cfg.models}, world_size=ctx.world_size)


main = cli(ComputeBenchConfig, run)  # the command line is derived from ComputeBenchConfig's fields


if __name__ == "__main__":
    main()
