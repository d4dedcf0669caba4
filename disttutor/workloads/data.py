"""Small synthetic datasets, generated (never downloaded) from a seed.

Introduced in chapter 4 (DDP). Every rank can regenerate exactly the same
data, which is what lets tests compare a distributed run with a
single-process reference on the full batch.
"""
from __future__ import annotations

import torch
from torch.utils.data import TensorDataset


def regression(n: int = 256, d_in: int = 16, d_out: int = 4, seed: int = 0, noise: float = 0.01) -> TensorDataset:
    """``y = x @ W + noise`` with a fixed hidden ``W``: a target every model can learn."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g)
    w = torch.randn(d_in, d_out, generator=g) / d_in**0.5
    y = x @ w + noise * torch.randn(n, d_out, generator=g)
    return TensorDataset(x, y)


def classification(n: int = 256, d_in: int = 16, classes: int = 4, seed: int = 0) -> TensorDataset:
    """Gaussian blobs, one per class (labels are ``int64``)."""
    g = torch.Generator().manual_seed(seed)
    centers = 2.0 * torch.randn(classes, d_in, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, d_in, generator=g)
    return TensorDataset(x, y)


def tokens(n_seq: int = 64, seq_len: int = 32, vocab: int = 64, seed: int = 0) -> torch.Tensor:
    """A learnable toy token stream: each sequence counts up modulo ``vocab`` from a random start."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (n_seq, 1), generator=g)
    return (start + torch.arange(seq_len + 1)) % vocab  # (n_seq, seq_len + 1): inputs and shifted targets
