"""What data, tensor, layer and pipeline parallelism each split (chapter 1).

One tiny model (:class:`disttutor.workloads.models.MLP`), one fixed dataset
(:func:`disttutor.workloads.data.regression`), four ways to spread the work over ranks.
Every rank reports *what it holds* (samples, layers, hidden units,
micro-batches) and the numbers it computed, so the notebook can check them
against a single-process reference::

    --mode data      every rank: the whole model, 1/N of the samples; gradients all-reduced
    --mode tensor    every rank: 1/N of the hidden units of every layer; outputs all-reduced
    --mode layer     rank r: a contiguous block of layers; activations sent rank to rank
    --mode pipeline  = layer, with the batch cut into micro-batches so the stages overlap
    --mode all       the four above, one after the other, in one job (used by the tests)

``layer`` is ``pipeline`` with one micro-batch: the two modes share one code
path, which is the whole point (pipeline parallelism *is* layer-wise model
parallelism plus micro-batching). Chapters 3-4 (data), 6 (model) and 7
(pipeline) build the real thing; here only the forward pass (and, for data
parallel, one backward) is shown.

    disttutor run parallelism -n 4 -- --mode pipeline --micro-batches 4
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DistributedSampler

from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt
from disttutor.workloads.data import regression
from disttutor.workloads.models import MLP, seeded

Mode = Literal["data", "tensor", "layer", "pipeline", "all"]
MODES = get_args(Mode)
D_IN, D_OUT = 16, 4
HIDDEN = (32, 32, 32)  # 4 Linear layers: up to 4 layer/pipeline stages


@dataclass(frozen=True)
class SplitConfig:
    mode: Mode = opt("data", "how the work is split ('all': each mode in turn, one job)")
    samples: int = opt(32, "samples in the batch")
    micro_batches: int = opt(4, "pipeline mode only ('layer' forces 1)")
    seed: int = opt(0, "seed of the data and the weights")

    def __post_init__(self):
        if self.mode not in MODES:  # the command line checks choices; a config made in Python is checked here
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        require_positive(self, "samples", "micro_batches")
        if self.samples % self.micro_batches:
            raise ValueError(f"micro_batches ({self.micro_batches}) must be >= 1 and divide samples ({self.samples})")


def build_model(cfg: SplitConfig) -> nn.Sequential:
    """The same weights on every rank and in the notebook's reference (fixed seed).

    Tensor mode uses one hidden layer (the classic Megatron MLP block); the
    others use three. A real system would build only its own shard (e.g. on
    the ``meta`` device); the model here is tiny, so every rank builds it all.
    """
    hidden = (HIDDEN[0],) if cfg.mode == "tensor" else HIDDEN
    return seeded(MLP, cfg.seed, D_IN, hidden, D_OUT)


def split_range(n: int, parts: int, index: int) -> range:
    """Contiguous, balanced block ``index`` of ``range(n)`` cut into ``parts`` (sizes differ by <= 1)."""
    base, extra = divmod(n, parts)
    start = index * base + min(index, extra)
    return range(start, start + base + (index < extra))


# --- communication (kept apart from the strategies that use it) -------------------------------

# [teach average]
def average_gradients(model: nn.Module, world: int) -> None:
    """Sum every gradient over the ranks, then divide: each rank ends with the full-batch mean."""
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
# [/teach average]


def recv_activation(src: int, rows: int, width: int) -> tuple[torch.Tensor, int]:
    """Receive a micro-batch's activation and the sender's logical clock (last column)."""
    buf = torch.empty(rows, width + 1)
    dist.recv(buf, src=src)
    return buf[:, :-1], int(buf[0, -1].item())


def send_activation(x: torch.Tensor, tick: int, dst: int) -> None:
    """Send an activation with this stage's logical clock appended (one message, not two)."""
    dist.send(torch.cat([x, torch.full((x.shape[0], 1), float(tick))], dim=1).contiguous(), dst=dst)


# --- the strategies --------------------------------------------------------------------------

def data_parallel(cfg: SplitConfig, ctx) -> dict:
    """Whole model on every rank; DistributedSampler hands each rank a disjoint 1/N of the samples."""
    if cfg.samples % ctx.world_size:
        raise ValueError(f"data mode: samples ({cfg.samples}) must divide evenly over {ctx.world_size} ranks, "
                         "or DistributedSampler pads with repeated samples and the mean gradient changes")
    # [teach data]
    ds = regression(n=cfg.samples, d_in=D_IN, d_out=D_OUT, seed=cfg.seed)
    mine = list(DistributedSampler(ds, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=False))
    model = build_model(cfg)
    x, y = ds.tensors[0][mine], ds.tensors[1][mine]
    loss = nn.functional.mse_loss(model(x), y)  # mean over *my* samples ...
    loss.backward()
    # ... so averaging the ranks' gradients gives the mean over *all* samples (equal shard sizes).
    average_gradients(model, ctx.world_size)
    # [/teach data]
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    return dict(samples=mine, layers=list(range(len(model))), params_held=sum(p.numel() for p in model.parameters()),
                local_loss=loss.item(), grad=grad.tolist())


def tensor_parallel(cfg: SplitConfig, ctx) -> dict:
    """Each rank holds 1/N of the hidden units: rows of the first Linear, columns of the second."""
    full = build_model(cfg)  # Linear(16, 32) -> ReLU -> Linear(32, 4)
    fc1, fc2 = full[0], full[2]
    if fc1.out_features % ctx.world_size:
        raise ValueError(f"tensor mode: {fc1.out_features} hidden units do not split over {ctx.world_size} ranks")
    units = split_range(fc1.out_features, ctx.world_size, ctx.rank)
    sl = slice(units.start, units.stop)
    w1, b1, w2 = fc1.weight[sl].detach(), fc1.bias[sl].detach(), fc2.weight[:, sl].detach()
    x = regression(n=cfg.samples, d_in=D_IN, d_out=D_OUT, seed=cfg.seed).tensors[0]
    # [teach tensor]
    # Column-parallel first layer: my hidden units only, no communication (ReLU is elementwise).
    h = torch.relu(x @ w1.T + b1)
    # Row-parallel second layer: a partial sum over my hidden units; one all-reduce adds the parts.
    out = h @ w2.T
    dist.all_reduce(out)
    out += fc2.bias.detach()  # the bias is added once, after the sum (not N times)
    # [/teach tensor]
    return dict(hidden_units=list(units), params_held=w1.numel() + b1.numel() + w2.numel() + fc2.bias.numel(),
                out=out.tolist())


def pipeline_parallel(cfg: SplitConfig, ctx) -> dict:
    """Rank r is stage r: a contiguous block of the Linear layers; micro-batches flow stage to stage."""
    model = build_model(cfg)
    linears = [i for i, m in enumerate(model) if isinstance(m, nn.Linear)]
    if ctx.world_size > len(linears):
        raise ValueError(f"{cfg.mode} mode: {len(linears)} layers cannot fill {ctx.world_size} stages")
    blocks = split_range(len(linears), ctx.world_size, ctx.rank)
    first = linears[blocks.start]
    last = linears[blocks.stop] if blocks.stop < len(linears) else len(model)  # up to the next stage's Linear
    # This Linear (+ its ReLU) ...: the only layers this rank keeps. (Not ``model[first:last]``:
    # slicing a Sequential subclass calls MLP.__init__ with an OrderedDict and fails.)
    stage = nn.Sequential(*list(model)[first:last])
    m = 1 if cfg.mode == "layer" else cfg.micro_batches
    rows = cfg.samples // m
    x = regression(n=cfg.samples, d_in=D_IN, d_out=D_OUT, seed=cfg.seed).tensors[0]
    prev, nxt = ctx.rank - 1, ctx.rank + 1
    is_first, is_last = ctx.rank == 0, ctx.rank == ctx.world_size - 1
    ticks, outs, seen, clock = [], [], [], -1
    with torch.no_grad():
        for mb in range(m):
            if is_first:
                inp, sender = x[mb * rows:(mb + 1) * rows], -1
            else:
                # Blocks until the previous stage has finished this micro-batch: the data dependency.
                inp, sender = recv_activation(prev, rows, model[first].in_features)
            # Lamport clock: one tick per micro-batch of work, after both my last one and the sender's.
            clock = max(clock, sender) + 1
            out = stage(inp)
            ticks.append(clock)
            seen.extend(range(mb * rows, mb * rows + inp.shape[0]))  # the samples this stage really processed
            if is_last:
                outs.append(out)
            else:
                send_activation(out, clock, nxt)
            runtime.progress(mb + 1, m, desc=f"stage 0, {cfg.mode}")
    return dict(layers=list(range(first, last)), params_held=sum(p.numel() for p in stage.parameters()),
                micro_batches=list(range(m)), ticks=ticks, samples=seen,
                out=torch.cat(outs).tolist() if is_last else None)


STRATEGIES = {"data": data_parallel, "tensor": tensor_parallel, "layer": pipeline_parallel,
              "pipeline": pipeline_parallel}


def run(cfg: SplitConfig) -> None:
    """Run one mode (its results reported flat) or ``all`` four in one job (results keyed by mode)."""
    with runtime.setup() as ctx:
        if cfg.mode != "all":
            runtime.report(**STRATEGIES[cfg.mode](cfg, ctx))
            return
        for mode, strategy in STRATEGIES.items():  # one job instead of four: ~4x less start-up time
            runtime.report(**{mode: strategy(replace(cfg, mode=mode), ctx)})


main = cli(SplitConfig, run)  # the command line is derived from SplitConfig's fields



if __name__ == "__main__":
    main()
