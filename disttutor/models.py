"""Tiny models shared by the chapters (CPU-fast, deterministic given a seed).

Introduced in chapter 4 (DDP); later chapters reuse them. Chapter-specific
models (the article's corrected RPC and language models) live here too so
each model is defined once.
"""
from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Sequential):
    """``Linear -> ReLU -> ... -> Linear``; an ``nn.Sequential`` so it splits into pipeline stages.

    ``MLP(16, [32, 32], 4)`` has layers 16->32, 32->32, 32->4.
    """

    def __init__(self, d_in: int = 16, hidden: list[int] | tuple[int, ...] = (32, 32), d_out: int = 4):
        dims = [d_in, *hidden, d_out]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(dims) - 2:
                layers.append(nn.ReLU())
        super().__init__(*layers)


def seeded(model_fn, seed: int = 0, *args, **kwargs) -> nn.Module:
    """Build a model with a fixed seed: every rank (and the reference) gets the same weights."""
    torch.manual_seed(seed)
    return model_fn(*args, **kwargs)


def param_summary(model: nn.Module) -> dict[str, float]:
    """A small fingerprint of all parameters (compare ranks and references without shipping tensors)."""
    flat = torch.cat([p.detach().reshape(-1).double().cpu() for p in model.parameters()])
    return {"numel": int(flat.numel()), "sum": float(flat.sum()), "abs_sum": float(flat.abs().sum())}
