"""Chapter 10's language model: the article's Transformer LM (§10.1), corrected.

What changed against the article (each one has a test in ``tests/test_ch10_model.py``):

* **layout** -- ``batch_first=True`` everywhere: a ``DataLoader`` gives ``(batch, time)``; the
  article's encoder layer expects ``(time, batch, d)`` and so attends *across the batch*;
* **positional encoding** -- indexed by *time* (``pe[:, :T]``), not by the first dimension
  (the article's ``pe[:x.size(0)]`` adds "the position of the sample in the batch");
* **causal mask** -- position ``t`` may only attend to ``<= t``; without it the model reads
  the token it is asked to predict and the loss falls towards zero while it learns nothing;
* **loss shift** -- logits at ``t`` are scored against the token at ``t + 1``, and no real
  token is ignored (the article's ``ignore_index=0`` drops whatever character got id 0);
* **activation checkpointing** -- ``checkpoint(..., use_reentrant=False)`` around each layer,
  passing the mask through (§10.3's wrapper cannot take it and omits ``use_reentrant``);
* ``self.d_model`` is set and ``math`` imported (the article's code raises before it runs).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


def sinusoidal(max_len: int, d_model: int) -> torch.Tensor:
    """The article's sine/cosine table, shaped ``(1, max_len, d_model)`` for batch-first input."""
    if d_model % 2:
        raise ValueError(f"d_model must be even for the sine/cosine encoding, got {d_model}")
    pos = torch.arange(max_len, dtype=torch.float).unsqueeze(1)
    div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe.unsqueeze(0)


class TinyLM(nn.Module):
    """A causal, batch-first Transformer language model (pre-norm encoder layers + causal mask)."""

    def __init__(self, vocab_size: int, d_model: int = 64, nhead: int = 4, num_layers: int = 2,
                 max_len: int = 256, dropout: float = 0.1, activation_checkpointing: bool = False):
        super().__init__()
        if d_model % nhead:
            raise ValueError(f"d_model ({d_model}) must be a multiple of nhead ({nhead})")
        self.d_model, self.max_len, self.act_ckpt = d_model, max_len, activation_checkpointing
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal(max_len, d_model), persistent=False)  # a constant, not state
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, nhead, 4 * d_model, dropout, batch_first=True, norm_first=True)
            for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:
            raise ValueError(f"TinyLM takes token ids shaped (batch, time), got shape {tuple(x.shape)}")
        t = x.size(1)
        if t > self.max_len:
            raise ValueError(f"sequence of {t} tokens is longer than max_len={self.max_len}")
        h = self.drop(self.embedding(x) * math.sqrt(self.d_model) + self.pe[:, :t])
        # -inf above the diagonal: position t never sees t+1.. (the article has no mask at all).
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=x.device, dtype=h.dtype)
        for layer in self.layers:
            if self.act_ckpt and self.training:
                # Non-reentrant: works with DDP and with inputs that do not require grad; the
                # layer's activations are recomputed in backward instead of being kept.
                h = checkpoint(layer, h, src_mask=mask, is_causal=True, use_reentrant=False)
            else:
                h = layer(h, src_mask=mask, is_causal=True)
        return self.fc(self.norm(h))


def lm_loss(logits: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy: logits at ``t`` (from ``window[:, :-1]``) against ``window[:, t+1]``."""
    if logits.shape[:2] != (window.size(0), window.size(1) - 1):
        raise ValueError(f"logits {tuple(logits.shape)} must cover window {tuple(window.shape)} minus its last token")
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), window[:, 1:].reshape(-1))


def window_loss(model: nn.Module, window: torch.Tensor) -> torch.Tensor:
    """Feed all but the last token, score against all but the first (the shift the article leaves out)."""
    return lm_loss(model(window[:, :-1]), window)


@torch.no_grad()
def generate(model: nn.Module, prompt: torch.Tensor, n: int, temperature: float = 0.8, seed: int = 0) -> torch.Tensor:
    """``n`` new token ids after ``prompt`` (1-D), sampled with a private generator (same seed, same text)."""
    was_training = model.training
    model.eval()
    g = torch.Generator().manual_seed(seed)
    ids = prompt.clone()
    max_len = getattr(model, "max_len", 256)
    for _ in range(n):
        logits = model(ids[-max_len:].unsqueeze(0))[0, -1].float()
        probs = torch.softmax(logits / temperature, dim=-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=g)])
    model.train(was_training)
    return ids[len(prompt):]
