"""DTensor placements, tensor parallelism with ``parallelize_module``, and a 2D (FSDP x TP) mesh.

Introduced in chapter 11. On the same ranks, one launch:

1. **placements**: a 4x4 tensor distributed as ``Shard(0)``, ``Shard(1)``,
   ``Replicate()`` and built from per-rank pieces as ``Partial()``; each rank
   reports what it holds;
2. **tensor parallel** (Megatron style) on an MLP and an attention block:
   first layer(s) column-wise, last row-wise. Output and weight gradients are
   compared with the unsplit module; ``CommDebugMode`` counts the collectives;
3. **2D mesh** (needs 4 ranks): ``(dp=2, tp=2)``; TP inside each pair, FSDP2
   across pairs, a few AdamW steps compared with one process on the full batch.
   Each rank also reports *which* elements of the first weight it stores (the
   weights start as their own global indices), for the mesh picture::

    disttutor run tensor_parallel -n 4
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt
from disttutor.tensor_parallel.models import Attention  # heads split whole over the ranks (chapter 12)
from disttutor.workloads.models import seeded


@dataclass(frozen=True)
class TPConfig:
    steps: int = opt(3, "AdamW steps of the 2D-mesh run")
    batch: int = opt(8, "global batch of the 2D-mesh run (split over the dp dimension)")
    lr: float = opt(1e-2, "AdamW learning rate")

    def __post_init__(self):
        require_positive(self, "steps", "batch")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


def mlp(dim: int = 16, hidden: int = 32) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim))


def comm_counts(mode) -> dict[str, int]:
    return {str(k).split(".")[-1]: int(v) for k, v in mode.get_comm_counts().items() if v}


def placements(mesh, rank: int) -> dict:
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    full = torch.arange(16.0).view(4, 4)
    out = {}
    for name, pl in (("Shard(0)", Shard(0)), ("Shard(1)", Shard(1)), ("Replicate()", Replicate())):
        out[name] = distribute_tensor(full, mesh, [pl]).to_local().tolist()
    # Partial: every rank holds a full-shaped addend; the logical tensor is their SUM, made
    # real only when someone asks (full_tensor() or redistribute to Replicate -> an all-reduce).
    part = DTensor.from_local(torch.full((2, 2), float(rank + 1)), mesh, [Partial()])
    out["Partial()"] = part.to_local().tolist()
    out["Partial() -> full_tensor()"] = part.full_tensor().tolist()
    return out


def tp_check(module_fn, plan, x, mesh) -> dict:
    """Split ``module_fn()`` with ``plan``, compare forward and gradients with the unsplit module."""
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import parallelize_module

    ref, tp = seeded(module_fn), seeded(module_fn)
    parallelize_module(tp, mesh, plan)
    # The input needs a gradient, as it does inside a network (earlier layers train): that is
    # what makes the column-wise layer all-reduce in backward (each rank has a partial dL/dx).
    x_tp, x_ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    with CommDebugMode() as fwd:
        out = tp(x_tp)
    with CommDebugMode() as bwd:
        out.pow(2).mean().backward()
    r = ref(x_ref)
    r.pow(2).mean().backward()
    grads = {n: p.grad for n, p in tp.named_parameters()}
    gdiff = max((grads[n].full_tensor() - p.grad).abs().max().item() for n, p in ref.named_parameters())
    gdiff = max(gdiff, (x_tp.grad - x_ref.grad).abs().max().item())
    return {"out_diff": (out - r).abs().max().item(), "grad_diff": gdiff,
            "forward_comms": comm_counts(fwd), "backward_comms": comm_counts(bwd),
            "local_shapes": {n: list(p.to_local().shape) for n, p in tp.named_parameters()}}


def mesh_2d(cfg: TPConfig, ctx) -> dict:
    """FSDP over dp, TP over tp: training matches one process; who stores which element of mlp[0].weight."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(ctx.device.type, (2, ctx.world_size // 2), mesh_dim_names=("dp", "tp"))
    plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
    # Which global elements does this rank store? Start a copy from its own indices and look.
    marker = mlp()
    with torch.no_grad():
        marker[0].weight.copy_(torch.arange(marker[0].weight.numel(), dtype=torch.float32).view_as(marker[0].weight))
    parallelize_module(marker, mesh["tp"], plan)
    fully_shard(marker, mesh=mesh["dp"])
    held = marker[0].weight.to_local().reshape(-1).long().tolist()

    ref, model = seeded(mlp), seeded(mlp)
    parallelize_module(model, mesh["tp"], plan)  # inner dimension: TP inside a pair of ranks
    fully_shard(model, mesh=mesh["dp"])           # outer dimension: shard the TP shards across pairs
    opts = [torch.optim.AdamW(m.parameters(), lr=cfg.lr, weight_decay=0.1) for m in (model, ref)]
    torch.manual_seed(7)
    x, y = torch.randn(cfg.steps, cfg.batch, 16), torch.randn(cfg.steps, cfg.batch, 16)
    dp_rank, dp = mesh["dp"].get_local_rank(), mesh["dp"].size()
    for s in range(cfg.steps):
        for o in opts:
            o.zero_grad(set_to_none=True)
        # Ranks of one TP pair must see the SAME inputs (they compute one model together);
        # the dp coordinate picks the data slice.
        F.mse_loss(model(x[s].chunk(dp)[dp_rank]), y[s].chunk(dp)[dp_rank]).backward()
        F.mse_loss(ref(x[s]), y[s]).backward()
        for o in opts:
            o.step()
    diff = max((p.full_tensor() - r).abs().max().item() for p, r in zip(model.parameters(), ref.parameters()))
    return {"coordinate": mesh.get_coordinate(), "param_diff": diff, "held": held,
            "weight_shape": list(ref[0].weight.shape),
            "placements": {n: str(p.placements) for n, p in model.named_parameters()}}


def run(cfg: TPConfig) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    with runtime.setup() as ctx:
        mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
        torch.manual_seed(1)
        x = torch.randn(4, 6, 16)  # the same input on every rank: TP splits the weights, not the batch
        out = {"placements": placements(mesh, ctx.rank),
               "mlp": tp_check(mlp, {"0": ColwiseParallel(), "2": RowwiseParallel()}, x, mesh),
               "attention": tp_check(Attention, {"q": ColwiseParallel(), "k": ColwiseParallel(),
                                                 "v": ColwiseParallel(), "o": RowwiseParallel()}, x, mesh)}
        if ctx.world_size == 4:
            out["mesh_2d"] = mesh_2d(cfg, ctx)
        runtime.report(**out)


main = cli(TPConfig, run)

if __name__ == "__main__":
    main()
