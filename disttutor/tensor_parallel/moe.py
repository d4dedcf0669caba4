"""Introduced in chapter 12: expert parallelism -- a tiny mixture-of-experts layer over the ranks.

A mixture-of-experts (MoE) layer replaces one feed-forward block by ``E`` of them (the *experts*)
and a *router*: a Linear that scores each token against each expert; each token goes to its
``top_k`` best experts, and their outputs are summed, weighted by the router's softmax over those k
scores (the *gates*). Parameters grow E times, compute per token only k times.

Expert parallelism puts ``E/n`` experts on each of ``n`` ranks; the tokens stay where they are
(each rank has its own batch, as in data parallelism). One layer is three ``all_to_all_single``:

1. the **counts**: how many of my tokens go to each expert (each rank learns what it will receive);
2. **dispatch**: the token vectors, sorted by expert, rank ``r``'s chunk going to rank ``r``;
3. **combine**: the experts' outputs back the way they came (the same splits, reversed).

No capacity limit here (real systems drop tokens over an expert's capacity to bound memory).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from disttutor.tensor_parallel.models import mlp

__all__ = ["MoE", "route", "moe_reference", "moe_expert_parallel"]


class MoE(nn.Module):
    def __init__(self, dim: int = 16, hidden: int = 32, experts: int = 4, top_k: int = 2):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(mlp(dim, hidden) for _ in range(experts))


def route(moe: MoE, x):
    """Each token's ``top_k`` experts and their gates (softmax over the chosen scores)."""
    scores, experts = moe.router(x).topk(moe.top_k, dim=-1)   # [tokens, k]
    return experts, F.softmax(scores, dim=-1)


def moe_reference(moe: MoE, x):
    """Every expert here, in one process: the result expert parallelism must equal."""
    experts, gates = route(moe, x)
    out = torch.zeros_like(x)
    for e, expert in enumerate(moe.experts):
        tok, slot = (experts == e).nonzero(as_tuple=True)
        out.index_add_(0, tok, expert(x[tok]) * gates[tok, slot, None])
    return out


# [teach ep]
def moe_expert_parallel(moe: MoE, x, group=None):
    """My tokens ``x`` [tokens, dim] through the experts, E/n per rank: (output, tokens per expert)"""
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    n_exp = len(moe.experts)
    local = n_exp // n                                       # experts rank r owns: r*local to (r+1)*local-1
    experts, gates = route(moe, x)
    flat = experts.reshape(-1)                               # one entry per (token, choice)
    order = flat.argsort(stable=True)                        # sorted by expert, so by owner rank too
    send = x[order // moe.top_k]
    counts = torch.bincount(flat, minlength=n_exp)           # my tokens per expert
    # (1) counts: rank r receives, from every rank, the counts of r's own experts
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts, group=group)
    send_splits = counts.view(n, local).sum(1).tolist()      # rows to each rank
    recv_splits = recv_counts.view(n, local).sum(1).tolist()  # rows from each rank
    # (2) dispatch: the token vectors themselves
    got = x.new_empty((sum(recv_splits), x.shape[1]))
    dist.all_to_all_single(got, send, recv_splits, send_splits, group=group)
    # received rows are ordered by source rank, then by expert: each local expert runs on its rows
    done, row = torch.empty_like(got), 0
    for chunk in recv_counts.view(n, local).tolist():
        for j, c in enumerate(chunk):
            done[row:row + c] = moe.experts[rank * local + j](got[row:row + c])
            row += c
    # (3) combine: back to where each row came from (the splits swapped)
    back = x.new_empty(send.shape)
    dist.all_to_all_single(back, done, send_splits, recv_splits, group=group)
    out = torch.zeros_like(x)
    out.index_add_(0, order // moe.top_k, back * gates.reshape(-1)[order, None])
    return out, counts
# [/teach ep]
