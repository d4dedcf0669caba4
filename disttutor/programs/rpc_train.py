"""The article's RPC model parallelism, corrected and trained (chapter 6).

Same shape as :mod:`disttutor.programs.rpc_article` (a master and worker1..3,
each worker holding one stage behind an RRef), with the three fixes:

1. stages exchange *tensors* (``rref.rpc_sync().forward(x)``), not RRefs;
2. ``(batch, seq, d_model)`` layout (``batch_first=True``) -- see
   :class:`disttutor.workloads.models.TransformerStage`;
3. it trains: forward and backward inside ``dist_autograd.context()``,
   ``dist_autograd.backward(ctx_id, [loss])`` follows the graph across the RPCs,
   and ``DistributedOptimizer`` updates each parameter on the worker that owns
   it, through parameter RRefs.

Each worker reports its own parameters at the end, so the notebook and the
tests can check that every worker's stage changed and matches
:func:`reference`, the same model trained in a single process::

    disttutor run rpc_train -n 4 -- --steps 5
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.nn.functional as F
from torch import nn, optim
from torch.distributed.rpc import RRef

from disttutor.rank import runtime
from disttutor.workloads.data import tokens
from disttutor.workloads.models import article_rpc_stage
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt

N_STAGES = 3  # worker1: embedding, worker2: transformer, worker3: classifier


@dataclass(frozen=True)
class RpcTrainConfig:
    steps: int = opt(5, "training steps")
    batch: int = opt(8, "sequences per batch")
    seq: int = opt(12, "tokens per sequence")
    vocab: int = opt(50, "vocabulary size")
    d_model: int = opt(16, "model width")
    nhead: int = opt(2, "attention heads")
    classes: int = opt(10, "output classes")
    lr: float = opt(0.3, "SGD learning rate (DistributedOptimizer)")
    seed: int = opt(0, "seed of the weights and the data")
    rpc_timeout: float = opt(20.0, "seconds an RPC may take")

    def __post_init__(self):
        require_positive(self, "steps", "batch", "seq", "vocab", "d_model", "nhead", "classes")
        if self.d_model % self.nhead:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by nhead ({self.nhead})")
        if self.lr <= 0 or self.rpc_timeout <= 0:
            raise ValueError("lr and rpc_timeout must be > 0")

    def stage(self, i: int) -> nn.Module:
        return article_rpc_stage(i, self.vocab, self.d_model, self.nhead, self.classes, self.seed)


def batch(cfg: RpcTrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed data: token sequences, and for every token its class ``token % classes``."""
    x = tokens(n_seq=cfg.batch, seq_len=cfg.seq, vocab=cfg.vocab, seed=cfg.seed)[:, :cfg.seq]
    return x, x % cfg.classes


def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


# -- functions that run on the workers (called by the master through RPC) ------------------------------
_INITIAL: dict[int, torch.Tensor] = {}


def _flat(m: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def build_stage(i: int, cfg: dict) -> nn.Module:
    """Runs on worker ``i + 1``: the stage lives (and stays) in that worker's memory."""
    m = RpcTrainConfig(**cfg).stage(i)
    _INITIAL[i] = _flat(m).clone()
    return m


def param_rrefs(module_rref: RRef) -> list[RRef]:
    """Runs on the owner: one RRef per parameter, what DistributedOptimizer needs to find them."""
    return [RRef(p) for p in module_rref.local_value().parameters()]


def report_stage(i: int, module_rref: RRef) -> None:
    """Runs on the owner: this worker reports its own stage (not the master on its behalf)."""
    m = module_rref.local_value()
    flat = _flat(m)
    runtime.report(stage=i, stage_type=type(m).__name__, n_params=int(flat.numel()), params=flat.tolist(),
               changed=bool((flat != _INITIAL[i]).any()), max_change=float((flat - _INITIAL[i]).abs().max()),
               # the gradients lived in the dist-autograd context, never in .grad:
               grad_attr_none=all(p.grad is None for p in m.parameters()))


# -- the master ------------------------------------------------------------------------------------------
class RemoteStages:
    """The master's handle on a model whose stages live on worker1..3."""

    def __init__(self, cfg: RpcTrainConfig):
        # rpc.remote returns at once; each worker builds its stage in the background.
        self.rrefs = [rpc.remote(f"worker{i + 1}", build_stage, args=(i, asdict(cfg))) for i in range(N_STAGES)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # rpc_sync().forward(x) runs the stage on its owner and returns the *tensor*
        # (fix 1). Inside a dist_autograd context each RPC also records a
        # send/recv pair in the graph, which is how backward finds its way back.
        for rref in self.rrefs:
            x = rref.rpc_sync().forward(x)
        return x

    def parameter_rrefs(self) -> list[RRef]:
        return [p for r in self.rrefs for p in rpc.rpc_sync(r.owner(), param_rrefs, args=(r,))]


def train_master(cfg: RpcTrainConfig) -> list[float]:
    # imported here, not at the top: torch.distributed.optim pulls in FSDP & co (seconds), and the
    # notebook imports this module only for reference() and the config
    from torch.distributed.optim import DistributedOptimizer

    # [teach master]
    model = RemoteStages(cfg)
    x, y = batch(cfg)
    opt = DistributedOptimizer(optim.SGD, model.parameter_rrefs(), lr=cfg.lr)
    losses = []
    for step in range(cfg.steps):
        # every iteration gets its own context: gradients accumulate per context id,
        # on the worker that owns each parameter, and vanish with the context.
        with dist_autograd.context() as ctx_id:
            loss = loss_fn(model.forward(x), y)
            dist_autograd.backward(ctx_id, [loss])  # not loss.backward(): that stops at the first RPC
            opt.step(ctx_id)                        # each worker applies SGD to its own parameters
        losses.append(loss.item())
        # [/teach master]
        print(f"step {step + 1}/{cfg.steps}  loss {losses[-1]:.4f}", flush=True)
    for i, r in enumerate(model.rrefs):
        rpc.rpc_sync(r.owner(), report_stage, args=(i, r))
    return losses


def reference(cfg: RpcTrainConfig) -> tuple[list[float], list[list[float]]]:
    """The same model, data and SGD in one process: losses and each stage's final parameters."""
    stages = [cfg.stage(i) for i in range(N_STAGES)]
    model = nn.Sequential(*stages)
    opt = optim.SGD(model.parameters(), lr=cfg.lr)
    x, y = batch(cfg)
    losses = []
    for _ in range(cfg.steps):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [_flat(s).tolist() for s in stages]


def run(cfg: RpcTrainConfig) -> None:
    names = ["master"] + [f"worker{i + 1}" for i in range(N_STAGES)]
    with runtime.rpc_setup(names, rpc_timeout=cfg.rpc_timeout) as env:
        if env.world_size != len(names):
            raise ValueError(f"rpc_train needs {len(names)} ranks (master + {N_STAGES} workers), got {env.world_size}")
        if env.rank == 0:
            runtime.report(losses=train_master(cfg))
        # workers do nothing here: they serve the master's RPCs until rpc.shutdown() in runtime.rpc_setup


main = cli(RpcTrainConfig, run)  # the command line is derived from RpcTrainConfig's fields



if __name__ == "__main__":
    # RPC pickles functions by module path: use the copy imported as disttutor.programs.rpc_train
    from disttutor.programs.rpc_train import main as _main

    _main()
