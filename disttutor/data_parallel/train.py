"""One small training loop, shared by every data-parallel program and its single-process reference.

Introduced in chapter 4 (DDP): :mod:`disttutor.programs.ddp_scratch` and the
exercise checker :mod:`disttutor.checks.ddp` train with it, and its
:class:`TrainConfig` fields are ``ddp_scratch``'s flags. The point of sharing it:
a distributed run and the reference it is compared with execute *the same*
code, so any difference is the parallelism, not a drifted copy of the loop.

The recipe that makes data parallelism provably equal to one big process:

* every rank builds the same dataset from the same seed (:func:`build_data`);
* step ``s`` uses the global batch ``rows [s*B, (s+1)*B)`` and rank ``r`` takes
  the ``r``-th equal, contiguous slice of it (:func:`local_batch`);
* the loss is a *mean* over the local slice, and gradients are *averaged* over
  ranks: the mean of equal-sized means is the mean of the whole batch, so the
  averaged gradient is the full-batch gradient (up to float summation order).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from disttutor.workloads.data import regression
from disttutor.workloads.models import MLP, seeded
from disttutor.contract.config import require_positive
from disttutor.contract.options import opt


@dataclass(frozen=True)
class TrainConfig:
    """The model, data and optimiser of a small regression run (all fixed by ``seed``)."""

    samples: int = opt(256, "samples in the dataset")
    d_in: int = opt(16, "input features")
    hidden: tuple[int, ...] = opt((32, 32), "hidden layer widths")
    d_out: int = opt(4, "outputs")
    batch: int = opt(32, "GLOBAL batch per step, split evenly over the ranks")
    steps: int = opt(4, "optimizer steps")
    lr: float = opt(0.05, "SGD learning rate")
    seed: int = opt(0, "seed of the weights and the data")

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        require_positive(self, "samples", "d_in", "d_out", "batch", "steps")
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden sizes must be >= 1, got {self.hidden}")
        if self.batch > self.samples:
            raise ValueError(f"batch ({self.batch}) cannot exceed the dataset size samples ({self.samples})")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")

    def check_world(self, world_size: int) -> None:
        """The global batch must split into equal shards, or averaging gradients is not the full-batch mean."""
        if self.batch % world_size:
            raise ValueError(f"global batch {self.batch} does not split evenly over {world_size} ranks: "
                             f"pick a batch that is a multiple of the world size")


def build_model(cfg: TrainConfig) -> nn.Module:
    """The same initial weights on every rank and in the reference (seeded)."""
    return seeded(MLP, cfg.seed, cfg.d_in, list(cfg.hidden), cfg.d_out)


def build_data(cfg: TrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    ds = regression(cfg.samples, cfg.d_in, cfg.d_out, seed=cfg.seed + 1)
    return ds.tensors[0], ds.tensors[1]


def global_batch(cfg: TrainConfig, x: torch.Tensor, y: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``[step*B, (step+1)*B)`` of the dataset, wrapping around its end."""
    idx = (torch.arange(cfg.batch) + step * cfg.batch) % cfg.samples
    return x[idx], y[idx]


def local_batch(x: torch.Tensor, y: torch.Tensor, rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s equal, contiguous slice of a global batch."""
    return x.chunk(world_size)[rank], y.chunk(world_size)[rank]


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               before_step: Callable[[], None] | None = None) -> float:
    """zero_grad -> forward -> mean loss -> backward -> ``before_step()`` -> optimiser step.

    ``before_step`` is where a from-scratch data-parallel wrapper finishes its
    gradient all-reduce (torch's DDP needs nothing: it has finished by the
    time ``backward()`` returns).
    """
    opt.zero_grad(set_to_none=True)
    loss = F.mse_loss(model(x), y)  # a MEAN over the local batch: see the module docstring
    loss.backward()
    if before_step is not None:
        before_step()
    opt.step()
    return loss.item()


def make_optimizer(cfg: TrainConfig, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    # Plain SGD: the update is a linear function of the gradient, so equal
    # gradients give equal parameters (no per-rank optimiser state to drift).
    return torch.optim.SGD(params, lr=cfg.lr)


class Reference:
    """The single-process model trained on full global batches, stepped in lockstep with a run."""

    def __init__(self, cfg: TrainConfig, device: torch.device | str = "cpu"):
        self.cfg = cfg
        self.model = build_model(cfg).to(device)
        self.opt = make_optimizer(cfg, self.model.parameters())
        self.x, self.y = (t.to(device) for t in build_data(cfg))

    def step(self, step: int) -> float:
        return train_step(self.model, self.opt, *global_batch(self.cfg, self.x, self.y, step))


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module inside a DDP-style wrapper (``.module``), or the model itself."""
    return getattr(model, "module", model)


def compare(model: nn.Module, reference: nn.Module) -> list[tuple[str, float]]:
    """Per parameter: ``max|p - p_ref| / max|p_ref|`` (a scale-free error), by name."""
    out = []
    ref = dict(reference.named_parameters())
    for name, p in unwrap(model).named_parameters():
        r = ref[name].detach()
        err = (p.detach() - r).abs().max().item() / max(r.abs().max().item(), 1e-12)
        out.append((name, err))
    return out
