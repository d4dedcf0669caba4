"""Chapter 10's data: a small public-domain text shipped with the package, a character tokenizer,
a train/validation split and the windows each rank trains on.

The text is the Book of Genesis (King James Version, public domain; source and licence in
``disttutor/lm/data/README.md``), about 197 KB. Character level: 60 symbols, no tokenizer
training, no download.

Sharding: the training split is cut into non-overlapping windows of ``seq_len + 1`` tokens;
:func:`micro_batch` gives rank ``r`` its windows of micro-batch ``m`` from a
``DistributedSampler`` permutation (``set_epoch``), so in one epoch every window is used once
across ranks, and the indices depend only on ``(seed, m)``: a resumed run that knows its step
knows exactly where it was in the data.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
from torch.utils.data import DistributedSampler

DATA = os.path.join(os.path.dirname(__file__), "data", "genesis_kjv.txt")


@functools.lru_cache(maxsize=1)
def text() -> str:
    with open(DATA, encoding="utf-8") as f:
        return f.read()


@dataclass(frozen=True)
class CharTokenizer:
    chars: str  # id i is chars[i]

    @classmethod
    def from_text(cls, s: str) -> "CharTokenizer":
        return cls("".join(sorted(set(s))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, s: str) -> torch.Tensor:
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted(set(s) - set(index))
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {''.join(unknown)!r}")
        return torch.tensor([index[c] for c in s], dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def tokenizer() -> CharTokenizer:
    return CharTokenizer.from_text(text())


def splits(val_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids of the training text and of the held-out end of the book (validation)."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    ids = tokenizer().encode(text())
    cut = int(len(ids) * (1 - val_fraction))
    return ids[:cut], ids[cut:]


def windows(ids: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Non-overlapping windows of ``seq_len + 1`` tokens (input and its shifted target), ``(n, seq_len+1)``."""
    n = (len(ids) - 1) // seq_len
    if n < 1:
        raise ValueError(f"text of {len(ids)} tokens is too short for windows of {seq_len + 1}")
    return torch.stack([ids[i * seq_len: i * seq_len + seq_len + 1] for i in range(n)])


def micro_batch_indices(n: int, m: int, per_rank: int, rank: int, world_size: int, seed: int) -> list[int]:
    """Which of ``n`` windows rank ``rank`` trains on in global micro-batch ``m`` (``per_rank`` of them).

    The sampler shuffles with ``seed + epoch`` (``set_epoch``), gives each rank every
    ``world_size``-th index, and ``drop_last`` keeps all ranks at the same number of steps.
    """
    sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=seed, drop_last=True)
    per_epoch = len(sampler) // per_rank
    if per_epoch < 1:
        raise ValueError(f"{n} windows cannot fill one micro-batch of {per_rank} per rank x {world_size} ranks")
    epoch, k = divmod(m, per_epoch)
    sampler.set_epoch(epoch)  # a new permutation every epoch, the same on every rank
    return list(sampler)[k * per_rank:(k + 1) * per_rank]


def micro_batch(data: torch.Tensor, m: int, per_rank: int, rank: int, world_size: int, seed: int) -> torch.Tensor:
    """Rank ``rank``'s windows of global micro-batch ``m``: ``(per_rank, seq_len + 1)`` token ids."""
    return data[micro_batch_indices(len(data), m, per_rank, rank, world_size, seed)]
