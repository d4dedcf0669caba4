"""A language model made of repeated blocks: FSDP2's unit of sharding is one block.

Introduced in chapter 11 (FSDP in full). :class:`BlockLM` is :class:`disttutor.sharding.model.TinyLM`
with ``n_blocks`` residual blocks (LayerNorm, MLP) instead of one, so that
``fully_shard`` can make each block its own unit -- gathered just before it runs and freed just after,
which is how FSDP keeps only about one block's full weights alive at a time. The output layer's
weight is tied to the input embedding, as in TinyLM: both stay in the root unit.
``checkpoint=True`` recomputes each block's activations in backward
(activation checkpointing, ``torch.utils.checkpoint``) instead of keeping them.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint as recompute

from disttutor.sharding.model import SEQ, VOCAB


class Block(nn.Module):
    def __init__(self, dim: int, ff: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, ff)
        self.down = nn.Linear(ff, dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.down(torch.nn.functional.gelu(self.up(self.norm(h))))


class BlockLM(nn.Module):
    def __init__(self, n_blocks: int = 4, dim: int = 64, ff: int = 256, vocab: int = VOCAB, seq: int = SEQ,
                 checkpoint: bool = False):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, ff) for _ in range(n_blocks))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied: one tensor, so it must live in one FSDP unit (the root)
        self.checkpoint = checkpoint

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.emb(tokens) + self.pos.weight[: tokens.shape[1]]
        for block in self.blocks:
            # use_reentrant=False: the non-reentrant checkpoint, the one that composes with FSDP2's hooks
            # (the block's pre-forward hook runs again at recompute, re-gathering its weights if freed).
            h = recompute(block, h, use_reentrant=False) if self.checkpoint else block(h)
        return self.head(self.norm(h))


def block_lm(seed: int = 0, **kw) -> BlockLM:
    torch.manual_seed(seed)
    return BlockLM(**kw)
