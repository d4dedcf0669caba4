"""Introduced in chapter 12: which rank holds which element under each DTensor placement (rank side).

A DTensor is one logical tensor plus, for each dimension of a device mesh, a *placement*:
``Shard(d)`` (cut along tensor dimension d, one piece per rank), ``Replicate()`` (a full copy on
each rank) or ``Partial()`` (each rank holds a full-shaped addend; the logical tensor is their sum).
Every function here distributes a tensor whose elements are their own global indices, so
``to_local()`` says exactly which elements a rank stores -- the data the chapter draws.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["indices", "one_dim", "two_dim"]


def indices(rows: int, cols: int) -> torch.Tensor:
    return torch.arange(float(rows * cols)).view(rows, cols)


def one_dim(mesh, rank: int) -> dict:
    """A 1-D mesh: Shard(0), Shard(1), Replicate() and Partial() of a 4x4 tensor."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    full = indices(4, 4)
    out = {str(p): {"held": distribute_tensor(full, mesh, [p]).to_local().reshape(-1).long().tolist()}
           for p in (Shard(0), Shard(1), Replicate())}
    # Partial: a full-shaped addend per rank (here rank+1 everywhere); the logical tensor is their SUM,
    # made real only when asked (full_tensor() or redistribute to Replicate: an all-reduce).
    part = DTensor.from_local(torch.full((4, 4), float(rank + 1)), mesh, [Partial()])
    out["Partial()"] = {"local": part.to_local().reshape(-1).tolist(), "sum": part.full_tensor().reshape(-1).tolist()}
    return out


def two_dim(mesh2d) -> dict:
    """A (dp=2, tp=2) mesh: placements composed, and the _StridedShard that FSDP2 over TP creates."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    full = indices(8, 8)
    out = {}
    for pl in ([Shard(0), Shard(1)], [Shard(0), Shard(0)], [Replicate(), Shard(0)]):
        d = distribute_tensor(full, mesh2d, pl)
        out[f"({pl[0]}, {pl[1]})"] = {"held": d.to_local().reshape(-1).long().tolist()}
    # What FSDP2 over TP does to a weight: TP shards it over "tp" first (Colwise: rows), then
    # fully_shard shards THAT shard over "dp" -- right-to-left, which DTensor writes _StridedShard.
    lin = nn.Linear(8, 8, bias=False)
    with torch.no_grad():
        lin.weight.copy_(full)
    parallelize_module(lin, mesh2d["tp"], ColwiseParallel())
    fully_shard(lin, mesh=mesh2d["dp"])
    out["FSDP2 over TP"] = {"held": lin.weight.to_local().reshape(-1).long().tolist(),
                            "placements": str(lin.weight.placements)}
    return out
