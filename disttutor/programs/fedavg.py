"""Federated averaging (FedAvg) on CPU ranks, next to data parallelism, on the same model and data.

Introduced in chapter 11 (the article's outlook item 联邦学习). Each rank is a
*client* that owns its data (rank r's fixed slice; it never leaves the rank).
One FedAvg round: start from the global model, take ``--local-steps`` SGD
steps on the client's own data, then average the *weights* (one all-reduce).
Data parallelism instead averages *gradients* after every step.

Measured in the same run: with one local step FedAvg is exactly one data-parallel
step (the average of ``w - lr*g_r`` is ``w - lr*mean(g_r)``); with more local
steps it drifts from centralised training (each client follows its own data) but
communicates ``local_steps`` times less::

    disttutor run fedavg -n 2
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt
from disttutor.data_parallel.train import TrainConfig, build_data, build_model


@dataclass(frozen=True)
class FedAvgConfig:
    local_steps: int = opt(5, "SGD steps each client takes between two averagings")
    rounds: int = opt(4, "FedAvg rounds")
    lr: float = opt(0.05, "SGD learning rate")

    def __post_init__(self):
        require_positive(self, "local_steps", "rounds")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


def client_data(rank: int, world: int):
    """Client ``rank``'s own rows: a contiguous block, so clients see differently distributed data."""
    x, y = build_data(TrainConfig(samples=64))
    return x.chunk(world)[rank], y.chunk(world)[rank]


def average_weights_(model) -> int:
    """The one communication of a round: every client's weights, averaged (equal-sized clients)."""
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p)
            p.div_(dist.get_world_size())
    return len(list(model.parameters()))


def fedavg(cfg: FedAvgConfig, local_steps: int, rank: int, world: int) -> tuple[torch.nn.Module, int]:
    model, (x, y) = build_model(TrainConfig()), client_data(rank, world)
    calls = 0
    for _ in range(cfg.rounds):
        sgd = torch.optim.SGD(model.parameters(), lr=cfg.lr)  # plain SGD: no state carried across rounds
        for _ in range(local_steps):
            sgd.zero_grad(set_to_none=True)
            F.mse_loss(model(x), y).backward()  # the client's own data only
            sgd.step()
        calls += average_weights_(model)
    return model, calls


def centralised(cfg: FedAvgConfig, steps: int) -> torch.nn.Module:
    """One process, all data, ``steps`` SGD steps: what data parallelism reproduces exactly."""
    model, (x, y) = build_model(TrainConfig()), build_data(TrainConfig(samples=64))
    sgd = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    for _ in range(steps):
        sgd.zero_grad(set_to_none=True)
        F.mse_loss(model(x), y).backward()
        sgd.step()
    return model


def max_diff(a, b) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def run(cfg: FedAvgConfig) -> None:
    with runtime.setup() as ctx:
        x, y = build_data(TrainConfig(samples=64))
        one, calls_one = fedavg(cfg, 1, ctx.rank, ctx.world_size)
        many, calls_many = fedavg(cfg, cfg.local_steps, ctx.rank, ctx.world_size)
        ref_one, ref_many = centralised(cfg, cfg.rounds), centralised(cfg, cfg.rounds * cfg.local_steps)
        with torch.no_grad():
            loss = {name: F.mse_loss(m(x), y).item() for name, m in
                    (("fedavg_1", one), ("fedavg_k", many), ("central_rounds", ref_one),
                     ("central_k", ref_many), ("start", build_model(TrainConfig())))}
        runtime.report(diff_one_step=max_diff(one, ref_one), diff_k_steps=max_diff(many, ref_many),
                       loss=loss, allreduces_fedavg=calls_many,
                       allreduces_data_parallel=cfg.rounds * cfg.local_steps * len(list(one.parameters())),
                       local_steps=cfg.local_steps, rounds=cfg.rounds)


main = cli(FedAvgConfig, run)

if __name__ == "__main__":
    main()
