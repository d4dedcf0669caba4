"""Tensor, sequence, context and expert parallelism, each against one process (chapter 12).

One launch, every part on the same ranks (``--part all``), or one part:

* ``tp``: a Megatron MLP and attention block from scratch (:mod:`disttutor.tensor_parallel.tp`), then
  the same modules through torch's ``parallelize_module``; outputs and gradients vs the unsplit module;
* ``sp``: the feed-forward block with plain TP and with sequence parallelism; saved activation bytes;
* ``cp``: ring attention over sequence blocks vs full causal attention;
* ``ep``: a mixture-of-experts layer, experts spread over the ranks, vs every expert in one process;
* ``placements`` (4 ranks): which rank stores which element, on a 1-D and a 2-D mesh.

Every rank reports its largest difference from the reference and the collectives it called
(recorded by :mod:`disttutor.tensor_parallel.counting`, or torch's ``CommDebugMode`` for DTensor)::

    disttutor run tensor_sequence_expert -n 2
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.nn.functional as F

from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt
from disttutor.rank import runtime
from disttutor.tensor_parallel import moe as M
from disttutor.tensor_parallel import placements as P
from disttutor.tensor_parallel import ring_attention as R
from disttutor.tensor_parallel import sp as S
from disttutor.tensor_parallel import tp as T
from disttutor.tensor_parallel.counting import recording
from disttutor.tensor_parallel.models import Attention, Block, dropout_mask, mlp
from disttutor.workloads.models import seeded

Part = Literal["tp", "sp", "cp", "ep", "placements", "all"]


@dataclass(frozen=True)
class SplitDimsConfig:
    part: Part = opt("all", "which part ('all': tp, sp, cp and ep in one job; placements needs 4 ranks)")
    seq: int = opt(16, "tokens in the sequence (split by sp and cp)")
    batch: int = opt(2, "sequences in the batch")
    dim: int = opt(16, "model width")
    hidden: int = opt(32, "feed-forward width (split by tp)")
    heads: int = opt(4, "attention heads (split by tp)")
    experts: int = opt(4, "experts of the MoE layer (split by ep)")
    top_k: int = opt(2, "experts per token")
    tokens: int = opt(12, "tokens per rank in the MoE layer")
    dropout: float = opt(0.1, "dropout probability in the sp block")

    def __post_init__(self):
        if self.part not in get_args(Part):
            raise ValueError(f"part must be one of {get_args(Part)}, got {self.part!r}")
        require_positive(self, "seq", "batch", "dim", "hidden", "heads", "experts", "top_k", "tokens")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) cannot exceed experts ({self.experts})")


def maxdiff(pairs) -> float:
    return max((a - b).abs().max().item() for a, b in pairs)


def _divisible(cfg, world: int) -> None:
    for name in ("seq", "hidden", "heads", "experts"):
        if getattr(cfg, name) % world:
            raise ValueError(f"--{name} {getattr(cfg, name)} does not split over {world} ranks")


def scratch_tp(build, split, x, rank, world) -> dict:
    """The from-scratch TP module vs the unsplit one: output, input gradient, every weight gradient."""
    ref = seeded(build)
    tp = split(seeded(build), rank, world)
    xr, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    ref(xr).pow(2).sum().backward()
    with recording() as rec:
        out = tp(xt)
        fwd = rec.mark()
        out.pow(2).sum().backward()
    pairs = [(out, ref(x)), (xt.grad, xr.grad)]
    for name, p in tp.named_parameters():   # each shard against the matching slice of the full gradient
        full = dict(ref.named_parameters())[_full_name(name)].grad
        pairs.append((p.grad, _slice_like(full, p.grad, name, rank, world)))
    return {"diff": maxdiff(pairs), "forward": _counts(rec.calls[:fwd]), "backward": _counts(rec.calls[fwd:])}


def _counts(calls) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, _ in calls:
        out[name] = out.get(name, 0) + 1
    return out


def _full_name(name: str) -> str:
    """TPMLP's names -> the Sequential's; TPAttention keeps the names of Attention."""
    return {"fc1.weight": "0.weight", "fc1.bias": "0.bias", "fc2.weight": "2.weight", "fc2.bias": "2.bias"}.get(name, name)


def _slice_like(full, shard, name, rank, world):
    if full.shape == shard.shape:
        return full                                   # replicated (a row layer's bias)
    dim = 0 if full.shape[0] != shard.shape[0] else 1  # column layers: rows of the weight; row layers: columns
    return full.chunk(world, dim=dim)[rank]


def dtensor_tp(build, plan, x, mesh) -> dict:
    """torch's parallelize_module on the same module: CommDebugMode counts what DTensor calls."""
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import parallelize_module

    ref, tp = seeded(build), seeded(build)
    parallelize_module(tp, mesh, plan)
    xr, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    with CommDebugMode() as fwd:
        out = tp(xt)
    with CommDebugMode() as bwd:
        out.pow(2).sum().backward()
    ref(xr).pow(2).sum().backward()
    pairs = [(out, ref(x)), (xt.grad, xr.grad)]
    pairs += [(p.grad.full_tensor(), r.grad) for p, r in zip(tp.parameters(), ref.parameters())]
    counts = lambda m: {str(k).split(".")[-1]: int(v) for k, v in m.get_comm_counts().items() if v}
    return {"diff": maxdiff(pairs), "forward": counts(fwd), "backward": counts(bwd),
            "local_shapes": {n: list(p.to_local().shape) for n, p in tp.named_parameters()}}


def part_tp(cfg, ctx) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    torch.manual_seed(1)
    x = torch.randn(cfg.batch, cfg.seq, cfg.dim)  # the same input on every rank: TP splits weights, not data
    build_mlp, build_att = (lambda: mlp(cfg.dim, cfg.hidden)), (lambda: Attention(cfg.dim, cfg.heads))
    mesh = init_device_mesh("cpu", (ctx.world_size,))
    # [teach tp_plan]
    mlp_plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
    att_plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "o": RowwiseParallel()}
    # parallelize_module(model, mesh, plan) swaps each named Linear's weight for a DTensor shard
    # and installs the input/output hooks that play f and g.
    # [/teach tp_plan]
    return {"scratch_mlp": scratch_tp(build_mlp, lambda m, r, w: T.TPMLP(m, r, w), x, ctx.rank, ctx.world_size),
            "scratch_attention": scratch_tp(build_att, lambda m, r, w: T.TPAttention(m, r, w), x, ctx.rank,
                                            ctx.world_size),
            "dtensor_mlp": dtensor_tp(build_mlp, mlp_plan, x, mesh),
            "dtensor_attention": dtensor_tp(build_att, att_plan, x, mesh)}


def part_sp(cfg, ctx) -> dict:
    rank, world = ctx.rank, ctx.world_size
    torch.manual_seed(2)
    x = torch.randn(cfg.seq, cfg.batch, cfg.dim)      # [seq, batch, dim]: the sequence is dimension 0
    mask = dropout_mask(x.shape, cfg.dropout, seed=3)
    mine = T.shard_range(cfg.seq, rank, world)
    build = lambda: Block(cfg.dim, cfg.hidden)
    ref = seeded(build)
    xr = x.clone().requires_grad_()
    ref_out, ref_bytes, _ = S.saved_activation_bytes(lambda: ref(xr, mask), ref.parameters())
    ref_out.pow(2).sum().backward()
    out = {"reference_saved_bytes": ref_bytes}
    # (The SP rank's mask is a copy of its slice: a view would keep the whole mask's storage alive.)
    for name, cls, xin, m in (("tp", S.TPBlock, x, mask), ("sp", S.SPBlock, x[mine], mask[mine].clone())):
        block = cls(seeded(build), rank, world)
        xt = xin.clone().requires_grad_()
        with recording() as rec:
            y, saved, tensors = S.saved_activation_bytes(lambda: block(xt, m), block.parameters())
            fwd = rec.mark()
            # SP: each rank's loss covers its own tokens; the ranks' losses add up to the reference's.
            y.pow(2).sum().backward()
            if name == "sp":
                S.sync_replicated_grads(block)
        ref_x = xr.grad if name == "tp" else xr.grad[mine]
        pairs = [(y, ref_out.detach() if name == "tp" else ref_out.detach()[mine]), (xt.grad, ref_x),
                 (block.ln.weight.grad, ref.ln.weight.grad), (block.ln.bias.grad, ref.ln.bias.grad),
                 (block.fc1.weight.grad, ref.mlp[0].weight.grad.chunk(world, 0)[rank]),
                 (block.w2.grad, ref.mlp[2].weight.grad.chunk(world, 1)[rank]), (block.b2.grad, ref.mlp[2].bias.grad)]
        out[name] = {"diff": maxdiff(pairs), "saved_bytes": saved, "saved_tensors": tensors, "forward": _counts(rec.calls[:fwd]),
                     "backward": _counts(rec.calls[fwd:]), "ring_bytes": rec.ring_bytes(world)}
    return out


def part_cp(cfg, ctx) -> dict:
    torch.manual_seed(4)
    q, k, v = (torch.randn(cfg.batch, cfg.heads, cfg.seq, cfg.dim // cfg.heads) for _ in range(3))
    mine = T.shard_range(cfg.seq, ctx.rank, ctx.world_size)
    with recording() as rec:
        out = R.ring_attention(q[:, :, mine], k[:, :, mine], v[:, :, mine])
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, :, mine]
    return {"diff": maxdiff([(out, ref)]), "calls": rec.counts(), "sent_bytes": rec.ring_bytes(ctx.world_size),
            "block_tokens": mine.stop - mine.start}


def part_ep(cfg, ctx) -> dict:
    moe = seeded(lambda: M.MoE(cfg.dim, cfg.hidden, cfg.experts, cfg.top_k))
    torch.manual_seed(5)
    x = torch.randn(ctx.world_size, cfg.tokens, cfg.dim)[ctx.rank]  # each rank its own tokens
    with torch.no_grad():
        with recording() as rec:
            out, counts = M.moe_expert_parallel(moe, x)
        ref = M.moe_reference(moe, x)
    return {"diff": maxdiff([(out, ref)]), "calls": rec.counts(), "tokens_per_expert": counts.tolist(),
            "experts_here": list(range(ctx.rank * cfg.experts // ctx.world_size,
                                       (ctx.rank + 1) * cfg.experts // ctx.world_size))}


def part_placements(cfg, ctx) -> dict:
    from torch.distributed.device_mesh import init_device_mesh

    if ctx.world_size != 4:
        raise ValueError(f"--part placements draws a 2 x 2 mesh: run it on 4 ranks, not {ctx.world_size}")
    out = {"one_dim": P.one_dim(init_device_mesh("cpu", (4,)), ctx.rank)}
    mesh2d = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    out["two_dim"] = P.two_dim(mesh2d)
    out["coordinate"] = mesh2d.get_coordinate()
    return out


PARTS = {"tp": part_tp, "sp": part_sp, "cp": part_cp, "ep": part_ep}


def run(cfg: SplitDimsConfig) -> None:
    with runtime.setup() as ctx:
        if ctx.device.type != "cpu":
            raise ValueError("this program compares with CPU references: run it with --backend gloo")
        if cfg.part == "placements":
            runtime.report(placements=part_placements(cfg, ctx))
            return
        _divisible(cfg, ctx.world_size)
        for name in (PARTS if cfg.part == "all" else (cfg.part,)):
            runtime.report(**{name: PARTS[name](cfg, ctx)})


main = cli(SplitDimsConfig, run)

if __name__ == "__main__":
    main()
