"""Introduced in chapter 12: context parallelism -- ring attention over sequence shards.

Each of ``n`` ranks holds one contiguous block of the sequence: its queries, keys and values. Attention
needs every query against every (earlier) key, so the key/value blocks travel around a ring: at step
``i`` rank ``r`` holds the block of rank ``(r - i) % n``, computes its queries against it, and passes
it on to ``r + 1`` while it computes (``isend``/``irecv`` posted before the compute, waited after).
No rank ever holds the whole sequence's scores: each step gives a *partial* softmax over one block
of keys, and the **online softmax** (the trick of FlashAttention) merges partial results exactly,
from each block's output and its log-sum-exp (``lse``, the log of its softmax denominator):

    lse = log(e^lse_a + e^lse_b),   out = e^(lse_a - lse) * out_a + e^(lse_b - lse) * out_b

With a causal mask, a block of keys from a *later* rank is entirely masked: skipped (its block
still passes through, the ring is the same for every rank). Forward only here: the backward runs
the ring again with the gradients (torch's ``context_parallel`` does both on GPUs).
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

__all__ = ["block_attention", "merge", "ring_attention"]


def block_attention(q, k, v, causal: bool):
    """Softmax attention of ``q`` against ONE block of keys: (output, lse) -- the partial result."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:  # the diagonal block: query i sees keys 0..i of the same block
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)                 # [batch, heads, queries]
    return torch.exp(scores - lse.unsqueeze(-1)) @ v, lse


# [teach merge]
def merge(out_a, lse_a, out_b, lse_b):
    """Two partial attentions over disjoint key blocks -> the attention over both (exact)."""
    lse = torch.logaddexp(lse_a, lse_b)                   # log(e^a + e^b) without overflow
    # A block that saw no key at all has lse = -inf; if both did, lse is -inf too and the
    # weights below would be exp(-inf - -inf) = nan: measure them from 0 instead (they are 0).
    ref = lse.masked_fill(torch.isneginf(lse), 0.0)
    w_a, w_b = torch.exp(lse_a - ref).unsqueeze(-1), torch.exp(lse_b - ref).unsqueeze(-1)
    return w_a * out_a + w_b * out_b, lse
# [/teach merge]


# [teach ring]
def ring_attention(q, k, v, group=None, merge_fn=merge):
    """Causal attention of my sequence block ``q`` [b, h, s/n, d] against the whole sequence."""
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    g = group or dist.group.WORLD                         # send/recv take GLOBAL ranks
    nxt, prv = dist.get_global_rank(g, (rank + 1) % n), dist.get_global_rank(g, (rank - 1) % n)
    out = torch.zeros_like(q)
    lse = torch.full(q.shape[:-1], float("-inf"))
    kv = torch.stack([k, v]).contiguous()                 # one message per step, not two
    for step in range(n):
        src = (rank - step) % n                           # whose keys I hold now
        if step < n - 1:  # pass the block on while computing with it (the overlap)
            incoming = torch.empty_like(kv)
            ops = [dist.isend(kv, nxt, group=group), dist.irecv(incoming, prv, group=group)]
        if src <= rank:   # a later rank's keys are all in my future: masked, skipped
            o, l = block_attention(q, kv[0], kv[1], causal=(src == rank))
            out, lse = merge_fn(out, lse, o, l)
        if step < n - 1:
            for op in ops:
                op.wait()
            kv = incoming
    return out
# [/teach ring]
