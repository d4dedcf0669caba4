"""Chapter 11's shared pieces: a tiny language model with every trap, its data, and how to measure it.

Introduced in chapter 11 (beyond DDP). The sharding program, the exercise
checkers and the tests all train :func:`tiny_lm` with :func:`train_step` on
the same data, so a sharded run and its single-process reference execute the
same code and any difference is the sharding.

The model has the parts real language models have and that trip up a sharder:

* ``emb.weight`` is ``head.weight`` (tied input/output embeddings): one
  parameter used twice, its gradient the sum of both uses;
* ``pos`` (positional embedding) is frozen: no gradient, no optimiser state,
  must never move -- not even through AdamW's weight decay;
* a ``LayerNorm`` (normalisation) and an MLP of ``Linear`` layers.
"""
from __future__ import annotations

from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from disttutor.sharding.memory import bytes_per_param

VOCAB, SEQ, DIM, FF = 64, 8, 32, 64


class TinyLM(nn.Module):
    def __init__(self, vocab: int = VOCAB, seq: int = SEQ, dim: int = DIM, ff: int = FF):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.pos.weight.requires_grad_(False)  # frozen
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, ff), nn.GELU(), nn.Linear(ff, dim))
        self.head = nn.Linear(dim, vocab)
        self.head.weight = self.emb.weight  # tied

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.emb(tokens) + self.pos.weight[: tokens.shape[1]]
        h = h + self.mlp(self.norm(h))
        return self.head(h)


def tiny_lm(seed: int = 0) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM()


def data(samples: int = 64, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences and their next-token targets (a fixed random permutation to learn)."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(VOCAB, generator=g)
    x = torch.randint(0, VOCAB, (samples, SEQ), generator=g)
    return x, perm[x]


def batch(x: torch.Tensor, y: torch.Tensor, step: int, size: int, rank: int = 0, world: int = 1):
    """Step ``step``'s global batch (rows wrap around), then rank ``rank``'s equal contiguous slice."""
    idx = (torch.arange(size) + step * size) % x.shape[0]
    return x[idx].chunk(world)[rank], y[idx].chunk(world)[rank]


def loss_fn(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # A MEAN over the local batch: averaging equal-sized ranks' gradients gives the full-batch gradient.
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


def adamw(params: Iterable[torch.Tensor], lr: float = 1e-2) -> torch.optim.Optimizer:
    # weight_decay > 0 on purpose: it moves every parameter that has a gradient, so a frozen
    # parameter that sneaked into the optimiser with a zero gradient is caught moving.
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.1)


def cast_forward(model: nn.Module, tokens: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """``model(tokens)`` with every parameter cast to ``dtype`` first (the mixed-precision reference).

    The casts are part of the autograd graph, so the gradients land, in fp32, on the fp32
    parameters: exactly what a sharded run with fp32 master shards and ``dtype`` compute does.
    """
    if dtype is None or dtype == torch.float32:
        return model(tokens)
    params = {n: p.to(dtype) for n, p in model.named_parameters()}
    return torch.func.functional_call(model, params, (tokens,)).float()


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """What this rank really stores of ``t`` (a DTensor's local shard, or ``t`` itself)."""
    return t.to_local() if hasattr(t, "to_local") else t


def nbytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes this rank stores for ``tensors``, each tensor once (a tied weight is one tensor)."""
    seen, total = set(), 0
    for t in tensors:  # dedupe on the (long-lived) tensor itself: to_local() makes a new object per call
        if id(t) not in seen:
            seen.add(id(t))
            loc = local_tensor(t)
            total += loc.numel() * loc.element_size()
    return total


def state_bytes(*optimizers: torch.optim.Optimizer) -> int:
    """Bytes of optimiser state tensors (Adam's exp_avg, exp_avg_sq), without the scalar step counters."""
    return nbytes(v for o in optimizers for s in o.state.values() for k, v in s.items()
                  if torch.is_tensor(v) and k != "step")


def memory_row(params: Iterable[torch.Tensor], optimizers: Iterable[torch.optim.Optimizer]) -> dict[str, int]:
    params = list(params)
    return {"params": nbytes(params), "grads": nbytes(p.grad for p in params if p.grad is not None),
            "optimizer": state_bytes(*optimizers)}


def predicted(n_params: int, n_trainable: int, world: int, stage: int) -> dict[str, float]:
    """Chapter 1's calculator for fp32 AdamW (:func:`disttutor.sharding.memory.bytes_per_param`), per rank.

    ZeRO stage 1 divides optimiser state by ``world``, stage 2 also gradients, stage 3
    (FSDP) also weights. Only trainable parameters have gradients and optimiser state.
    """
    bpp = bytes_per_param("fp32", "adam")
    div = {part: (world if stage >= s else 1) for part, s in (("optimizer", 1), ("grads", 2), ("params", 3))}
    return {"params": n_params * bpp["weights"] / div["params"],
            "grads": n_trainable * bpp["gradients"] / div["grads"],
            "optimizer": n_trainable * bpp["optimizer"] / div["optimizer"]}


def counts(model: nn.Module) -> tuple[int, int]:
    """(all parameters, trainable parameters), each tied tensor once."""
    ps = list(model.parameters())
    return sum(p.numel() for p in ps), sum(p.numel() for p in ps if p.requires_grad)


def update_diff(mine: dict[str, torch.Tensor], ref: nn.Module, start: nn.Module) -> float:
    """``||delta_mine - delta_ref|| / ||delta_ref||`` over all parameters, delta = change since ``start``.

    The low-precision comparison: an element whose gradient is near zero can get an AdamW
    update of either sign after a different bf16 rounding (Adam divides by sqrt(v)), so an
    element-wise test would flag rounding; the update of the whole model, taken as one
    vector, moves by about bf16's precision only -- while a wrong average or a missing
    gradient changes it by order 1.
    """
    p0 = dict(start.named_parameters())
    num = den = 0.0
    for name, r in ref.named_parameters():
        d_ref = r.detach() - p0[name].detach()
        num += (local_tensor(mine[name]).detach().float() - p0[name].detach() - d_ref).pow(2).sum().item()
        den += d_ref.pow(2).sum().item()
    return (num / max(den, 1e-30)) ** 0.5


def max_rel_diff(mine: dict[str, torch.Tensor], ref: nn.Module) -> tuple[str, float]:
    """The worst parameter: ``max|p - p_ref| / max|p_ref|`` (scale-free), by name."""
    worst = ("", 0.0)
    for name, r in ref.named_parameters():
        if name not in mine:
            return name, float("inf")
        p = local_tensor(mine[name]).detach().float()
        err = (p - r.detach()).abs().max().item() / max(r.abs().max().item(), 1e-12)
        if not err <= worst[1]:  # NaN counts as worst
            worst = (name, err)
    return worst
