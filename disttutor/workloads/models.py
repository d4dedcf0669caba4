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

    def __getitem__(self, idx):
        # nn.Sequential slices by calling type(self)(OrderedDict), which MLP's
        # signature does not accept: a slice (a pipeline stage) is a plain Sequential.
        if isinstance(idx, slice):
            return nn.Sequential(*list(self)[idx])
        return super().__getitem__(idx)


def seeded(model_fn, seed: int = 0, *args, **kwargs) -> nn.Module:
    """Build a model with a fixed seed: every rank (and the reference) gets the same weights."""
    torch.manual_seed(seed)
    return model_fn(*args, **kwargs)


def param_summary(model: nn.Module) -> dict[str, float]:
    """A small fingerprint of all parameters (compare ranks and references without shipping tensors)."""
    flat = torch.cat([p.detach().reshape(-1).double().cpu() for p in model.parameters()])
    return {"numel": int(flat.numel()), "sum": float(flat.sum()), "abs_sum": float(flat.abs().sum())}


# -- chapter 6: the article's RPC model (§6), corrected ------------------------------------------------
class TransformerStage(nn.Module):
    """The article's ``TransformerNet`` (chapter 6), corrected: ``nn.Transformer(x, x)`` on
    ``(batch, seq, d_model)`` tensors. ``batch_first=True`` because the article feeds
    ``(batch, seq)`` tokens while ``nn.Transformer`` reads dim 0 as the sequence by default;
    ``dropout=0`` so a remote run can be compared with a local reference exactly."""

    def __init__(self, d_model: int = 16, nhead: int = 2, layers: int = 1, ff: int = 32):
        super().__init__()
        self.transformer = nn.Transformer(d_model, nhead, layers, layers, ff, dropout=0.0, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.transformer(x, x)


def article_rpc_stage(i: int, vocab: int = 100, d_model: int = 16, nhead: int = 2, classes: int = 10,
                      seed: int = 0) -> nn.Module:
    """Stage ``i`` of the corrected article model (0 embedding, 1 transformer, 2 classifier), seeded ``seed + i``
    so a remote worker and a single-process reference build identical weights (chapter 6)."""
    build = [lambda: nn.Embedding(vocab, d_model), lambda: TransformerStage(d_model, nhead),
             lambda: nn.Linear(d_model, classes)][i]
    return seeded(build, seed + i)
