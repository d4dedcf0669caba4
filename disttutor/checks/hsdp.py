"""Checker for Exercise 11.3 (HSDP: replicate x shard on a 2-D device mesh with FSDP2) -- chapter 11.

The learner's ``hsdp_train(model, batches, loss_fn, replicas, shards, lr)`` builds a 2-D device mesh
``(replicas, shards)`` named ``("replicate", "shard")``, applies ``fully_shard`` to every block and
then to the root with that mesh, and trains ``batches`` with SGD. On 4 gloo ranks the checker runs it
twice -- 2 replicas of 2 shards, then 1 replica of 4 shards (so a mesh typed as fixed numbers, or
with its two sizes swapped, shows) -- and reads the model it was given:

* every block and the root are FSDP units;
* every parameter is a DTensor with placements ``(Replicate(), Shard(0))`` on a mesh of shape
  ``(replicas, shards)`` named ``("replicate", "shard")``, whose shard groups are neighbouring ranks;
* each rank holds ``1/shards`` of the rows (not ``1/world``); ranks of one replica hold different
  shards, and one shard index holds identical values in every replica;
* the full parameters (``full_tensor()``) equal one process trained on all ranks' batches.

This module is also the rank-side program (``python -m disttutor.checks.hsdp --source F --name hsdp_train``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from disttutor.contract.options import cli, opt
from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, run_check

#: HSDP vs one process on all ranks' batches, fp32 SGD: the gradient is summed in another order (a
#: reduce-scatter in each shard group, then an all-reduce over the replicas, versus one sum over the
#: whole batch), a few ulps per step: the whole update differed by ~2e-7 relative (measured, 4 ranks,
#: both meshes). 1e-4 keeps 500x headroom, while a gradient not averaged over the replicas, or
#: parameters that never moved, are off by more than 1e-1.
FP32_RTOL = 1e-4
COLLECTIVE_TIMEOUT_S = 20.0
LR = 0.5          # SGD: a large step, so a missing average or a missing update is far outside the tolerance
BATCH = 8         # sequences per step over all 4 ranks: 2 each
MESHES = ((2, 2), (1, 4))  # (replicas, shards); the second one is not square: swapped or typed-in sizes show
NAMES = ("replicate", "shard")


def check_hsdp(fn: Callable | str, steps: int = 3) -> CheckResult:
    """Exercise 11.3: ``fn(model, batches, loss_fn, replicas, shards, lr)`` trains ``model`` with HSDP on 4 ranks."""
    return run_check("11.3", "disttutor.checks.hsdp", fn, function_name(fn, "hsdp_train"), 4,
                     args={"steps": steps}, timeout=JOB_TIMEOUT_S, collective_timeout=COLLECTIVE_TIMEOUT_S,
                     hint="ranks disagree on the collectives: every rank must build the same mesh, wrap the "
                          "same modules and train on every one of its batches")


@dataclass(frozen=True)
class HSDPCheck(LearnerCode):
    steps: int = opt(3, "SGD steps on the 2 x 2 mesh (one fewer on the 1 x 4 one)")

    def __post_init__(self):
        super().__post_init__()
        if self.steps < 2:
            raise ValueError(f"steps must be >= 2, got {self.steps}")


def small_model():
    """Chapter 11's block model, tiny: every weight's rows split evenly over 1, 2 or 4 ranks."""
    from disttutor.sharding.blocks import block_lm

    return block_lm(seed=0, n_blocks=2, dim=16, ff=32)


def _units(model) -> str | None:
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    if not any(isinstance(p, DTensor) for p in model.parameters()):
        return ("no parameter is sharded (none is a DTensor): call fully_shard with your mesh on every "
                "block, then on the model")
    if not isinstance(model, FSDPModule):
        plain = [n for n, p in model.named_parameters() if not isinstance(p, DTensor)]
        return (f"the model itself is not an FSDP unit: {', '.join(plain)} stay plain tensors, whole on every "
                "rank and never averaged over ranks -- apply fully_shard to the root too, after the blocks")
    loose = [f"blocks.{i}" for i, b in enumerate(model.blocks) if not isinstance(b, FSDPModule)]
    if len(loose) == len(model.blocks):
        return ("only the root is wrapped: the whole model is one unit, all-gathered whole at the start of "
                "forward and backward (peak memory = the full model) -- make each block its own unit first")
    if loose:
        return f"{', '.join(loose)} is not its own unit: apply fully_shard to every block"
    return None


def _layout(model, replicas: int, shards: int, world: int) -> str | None:
    from torch.distributed.tensor import DTensor, Replicate, Shard

    for name, p in model.named_parameters():
        if not isinstance(p, DTensor):
            return f"{name} is not sharded (a plain tensor): apply fully_shard to the module that owns it"
        mesh, shape = p.device_mesh, tuple(p.device_mesh.shape)
        if mesh.ndim == 1 and shape[0] == world:
            return (f"{name} is sharded over a 1-D mesh of all {world} ranks: that is FSDP over {world} ranks, "
                    f"not HSDP (each rank holds 1/{world} of the rows, every all-gather crosses the slow "
                    "link) -- build the 2-D mesh")
        if mesh.ndim == 1:
            return (f"{name} is sharded over a 1-D mesh of {shape[0]} ranks: the replicas never average "
                    "their gradients -- pass fully_shard the whole 2-D mesh, not one of its dims")
        if mesh.ndim != 2:
            return f"{name} lives on a {mesh.ndim}-D mesh of shape {shape}; HSDP needs 2 dims (replicas, shards)"
        if tuple(mesh.mesh_dim_names or ()) != NAMES:
            return (f"the mesh's dims are named {mesh.mesh_dim_names}, not {NAMES}: fully_shard replicates over "
                    "the first dim and shards over the second whatever their names -- replicate first")
        if shape != (replicas, shards):
            why = ("the sizes are swapped: fully_shard replicates over the first dim, so your shards would "
                   "cross the slow link between nodes" if shape == (shards, replicas) else
                   "build the shape from the arguments, not from fixed numbers")
            return f"asked for replicas={replicas}, shards={shards}, the mesh has shape {shape}: {why}"
        if mesh.mesh.flatten().tolist() != list(range(world)):
            return (f"the mesh's rank layout is {mesh.mesh.tolist()}: a shard group should be neighbouring "
                    "ranks (one node's fast links), as init_device_mesh lays them out")
        if tuple(p.placements) != (Replicate(), Shard(0)):
            return (f"{name}'s placements are {tuple(p.placements)}, not (Replicate(), Shard(dim=0)): "
                    "replicate over the replica dim, shard rows over the shard dim")
        rows = p.to_local().shape[0]
        if rows * shards != p.shape[0]:
            return (f"{name}: this rank holds {rows} of {p.shape[0]} rows; with {shards} shards it should "
                    f"hold 1/{shards} of them")
    return None


def _copies(model, world: int) -> str | None:
    """Ranks of one replica hold different shards; a shard index holds identical values in every replica."""
    import torch
    import torch.distributed as dist

    some = next(iter(model.parameters()))
    mine = (tuple(some.device_mesh.get_coordinate()),
            torch.cat([p.to_local().detach().flatten() for p in model.parameters()]))
    every: list[Any] = [None] * world
    dist.all_gather_object(every, mine)
    (rep, sh), local = mine
    for r, ((rep2, sh2), other) in enumerate(every):
        # Exact on purpose: each replica received the same averaged gradient (an all-reduce over 2 replicas
        # adds the same two numbers, a + b = b + a) and applied the same SGD update to the same shard.
        if sh2 == sh and rep2 != rep and not torch.equal(other, local):
            return (f"rank {r} (replica {rep2}) and this rank (replica {rep}) hold shard {sh} with different "
                    "values after training: the replicas must stay identical")
        if rep2 == rep and sh2 != sh and torch.equal(other, local):
            return f"rank {r} holds the same values as this rank although its shard index differs ({sh2} vs {sh})"
    return None


def _agree(problem: str | None) -> str | None:
    """One verdict for all ranks, so that none goes on to a collective the others skip."""
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1 if problem else 0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return problem or ("the check failed on another rank (see its line)" if flag.item() else None)


def _phase(fn, replicas: int, shards: int, steps: int, ctx) -> str | None:
    import torch

    from disttutor.sharding import model as S

    model, start, ref = small_model(), small_model(), small_model()
    x, y = S.data()
    batches = [S.batch(x, y, s, BATCH, ctx.rank, ctx.world_size) for s in range(steps)]
    call = f"hsdp_train(model, batches, loss_fn, replicas={replicas}, shards={shards}, lr={LR})"
    try:
        fn(model, batches, S.loss_fn, replicas, shards, LR)
        problem = _units(model) or _layout(model, replicas, shards, ctx.world_size)
    except Exception as e:
        problem = f"{call} raised {type(e).__name__}: {e}"
    problem = _agree(problem)
    if problem:
        return problem if problem.startswith("hsdp_train") else f"{call}: {problem}"
    problem = _agree(_copies(model, ctx.world_size))
    if problem:
        return f"{call}: {problem}"
    full = {n: p.full_tensor().detach() for n, p in model.named_parameters()}  # collectives, same order on all
    ref_opt = torch.optim.SGD(ref.parameters(), lr=LR)
    for s in range(steps):
        ref_opt.zero_grad(set_to_none=True)
        S.loss_fn(ref(S.batch(x, y, s, BATCH)[0]), S.batch(x, y, s, BATCH)[1]).backward()
        ref_opt.step()
    if all(torch.equal(full[n], p.detach()) for n, p in start.named_parameters()):
        return (f"{call}: the parameters never moved -- build the optimizer after fully_shard (it replaces "
                "every parameter; an optimizer built before holds the old tensors)")
    err = S.update_diff(full, ref, start)
    if not err <= FP32_RTOL:  # also catches NaN
        return (f"{call}: the full parameters differ from one process trained on all {ctx.world_size} ranks' "
                f"batches by {err:.3g} (relative; allowed {FP32_RTOL:g}): one SGD step per batch, gradients "
                "left to fully_shard?")
    return None


def _run(cfg: HSDPCheck) -> None:
    from disttutor.rank import runtime
    from disttutor.checks.adapter import load_exercise

    with runtime.setup() as ctx:
        fn = load_exercise(cfg.source, cfg.name)
        if ctx.world_size != 4:
            runtime.report(passed=False, problem=f"the check needs 4 ranks, got {ctx.world_size}")
            return
        for i, (replicas, shards) in enumerate(MESHES):
            problem = _phase(fn, replicas, shards, cfg.steps - i, ctx)
            if problem:
                runtime.report(passed=False, problem=problem)
                return
        runtime.report(passed=True, meshes=[list(m) for m in MESHES])


main = cli(HSDPCheck, _run)

if __name__ == "__main__":
    main()
