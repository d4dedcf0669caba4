"""Plain model parallelism: an MLP split by layers across ranks (chapter 6).

Rank ``r`` holds stage ``r`` (``layers_per_stage`` consecutive ``Linear`` layers
of :class:`disttutor.workloads.models.MLP`). Each step pushes the *whole* batch through
the stages one after another, then the gradient back through them in reverse
(:mod:`disttutor.pipeline.p2p` does the sends and receives). While one stage computes,
every other stage waits: each rank records when it was busy and when it
waited, and reports that timeline so the notebook can draw it::

    disttutor run model_parallel -n 4 -- --steps 4 --width 256
    python -m torch.distributed.run --nproc-per-node 4 -m disttutor.programs.model_parallel
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from disttutor.rank import runtime
from disttutor.workloads.data import regression
from disttutor.workloads.models import MLP, seeded
from disttutor.pipeline.p2p import StageLink
from disttutor.pipeline.timeline import Timeline
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt


@dataclass(frozen=True)
class MPConfig:
    steps: int = opt(4, "full-batch training steps")
    warmup: int = opt(1, "first steps not timed (they also open the sender/receiver connections)")
    batch: int = opt(128, "samples per step")
    width: int = opt(128, "every hidden layer is width x width, so stages are balanced")
    d_out: int = opt(4, "outputs")
    layers_per_stage: int = opt(2, "Linear layers each rank holds")
    lr: float = opt(0.05, "SGD learning rate")
    seed: int = opt(0, "seed of the data and the weights")
    report_params: bool = opt(False, "send every parameter back (small models only: tests compare element-wise)")

    def __post_init__(self):
        require_positive(self, "steps", "batch", "width", "d_out", "layers_per_stage")
        if not 0 <= self.warmup < self.steps:
            raise ValueError(f"warmup must be in [0, steps) = [0, {self.steps}), got {self.warmup}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


def full_model(cfg: MPConfig, world_size: int) -> torch.nn.Sequential:
    """The unsplit model: ``world_size * layers_per_stage`` Linear layers (same weights on every rank)."""
    n_linear = world_size * cfg.layers_per_stage
    return seeded(MLP, cfg.seed, cfg.width, [cfg.width] * (n_linear - 1), cfg.d_out)


def stage_of(model: torch.nn.Sequential, rank: int, world_size: int, layers_per_stage: int) -> torch.nn.Sequential:
    """Stage ``rank`` of ``model``: its Linear layers and the ReLU after each (MLP is Linear, ReLU, ...)."""
    lo = 2 * rank * layers_per_stage
    hi = len(model) if rank == world_size - 1 else 2 * (rank + 1) * layers_per_stage
    # list(...) then a plain Sequential: slicing an MLP directly calls MLP(OrderedDict), which fails
    return torch.nn.Sequential(*list(model)[lo:hi])


def reference(cfg: MPConfig, world_size: int) -> tuple[torch.nn.Sequential, list[float]]:
    """The single-process reference: the unsplit model trained ``cfg.steps`` full-batch SGD steps.

    Same weights (:func:`full_model`), same batch and loss as :func:`run`, in one process. Returns
    the trained model (compare rank ``r`` with :func:`stage_of` of it) and the loss of every step
    (the last rank reports the same losses). The notebook and the tests both compare against it.
    """
    model = full_model(cfg, world_size)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    x, y = regression(n=cfg.batch, d_in=cfg.width, d_out=cfg.d_out, seed=cfg.seed).tensors
    losses = []
    for _ in range(cfg.steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, losses


# [teach step]
def train_step(stage, link: StageLink, x, y, act_shape, out_shape, opt) -> float | None:
    """One forward + backward + update through all stages. Returns the loss on the last stage."""
    tl, loss = link.timeline, None
    opt.zero_grad(set_to_none=True)
    # forward: first stage reads data, the others wait for their predecessor
    inp = x if link.prev is None else link.recv_forward(act_shape)
    with tl.span("fwd"):
        out = stage(inp)
    if link.next is not None:
        link.send_forward(out)
        grad_out = link.recv_backward(out_shape)  # waits for *all* later stages: forward and backward
        with tl.span("bwd"):
            out.backward(grad_out)  # continue the chain rule from where the next rank stopped
    else:
        with tl.span("bwd"):
            loss_t = F.mse_loss(out, y)
            loss_t.backward()
        loss = loss_t.item()
    if link.prev is not None:
        link.send_backward(inp)  # inp.grad = d loss / d (our input), the previous stage's output
    with tl.span("opt"):
        opt.step()  # each rank updates only the layers it holds: no all-reduce, nothing is replicated
    return loss
# [/teach step]


def run(cfg: MPConfig) -> None:
    with runtime.setup() as ctx:
        world = ctx.world_size
        # Every rank builds the full (tiny) model from the same seed and keeps its slice,
        # so the split model starts exactly where a single-process reference starts.
        # A really big model would build only its own stage (e.g. on the "meta" device).
        stage = stage_of(full_model(cfg, world), ctx.rank, world, cfg.layers_per_stage).to(ctx.device)
        opt = torch.optim.SGD(stage.parameters(), lr=cfg.lr)
        data = regression(n=cfg.batch, d_in=cfg.width, d_out=cfg.d_out, seed=cfg.seed)
        # only the first stage needs inputs and only the last needs targets
        x, y = data.tensors[0].to(ctx.device), data.tensors[1].to(ctx.device)
        act_shape = (cfg.batch, cfg.width)  # what crosses every stage boundary
        out_shape = act_shape if ctx.rank < world - 1 else (cfg.batch, cfg.d_out)
        losses: list[float] = []

        warm = StageLink(ctx.rank, world, Timeline(0.0), ctx.device)
        for step in range(cfg.warmup):
            loss = train_step(stage, warm, x, y, act_shape, out_shape, opt)
            losses += [] if loss is None else [loss]
            runtime.progress(step + 1, cfg.steps, desc="model parallel")
        timeline = Timeline(runtime.barrier_time())  # one start instant for every rank
        link = StageLink(ctx.rank, world, timeline, ctx.device)
        for step in range(cfg.warmup, cfg.steps):
            loss = train_step(stage, link, x, y, act_shape, out_shape, opt)
            losses += [] if loss is None else [loss]
            runtime.progress(step + 1, cfg.steps, desc="model parallel")
        wall = runtime.barrier_time() - timeline.t0
        compute = timeline.total("fwd", "bwd")
        busy = compute + timeline.total("opt")

        flat = torch.cat([p.detach().reshape(-1) for p in stage.parameters()])
        runtime.report(
            stage_layers=[f"{m.in_features}->{m.out_features}" for m in stage if isinstance(m, torch.nn.Linear)],
            n_params=int(flat.numel()), param_sum=float(flat.double().sum()), param_abs_sum=float(flat.double().abs().sum()),
            losses=losses, timeline=timeline.as_rows(), timed_steps=cfg.steps - cfg.warmup,
            # perf_counter is the system-wide monotonic clock on Linux: t0 lets the notebook
            # put every rank's spans on one time axis (exact on one machine, not across nodes)
            t0=timeline.t0, wall_s=wall, compute_s=compute, busy_s=busy, wait_s=timeline.total("send", "recv"),
            idle_frac=1.0 - busy / wall,
            **({"params": flat.tolist()} if cfg.report_params else {}),
        )


main = cli(MPConfig, run)  # the command line is derived from MPConfig's fields


if __name__ == "__main__":
    main()
