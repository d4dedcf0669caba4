"""DDP, ZeRO-1 from scratch, FSDP from scratch (fp32 and bf16) and FSDP2 on the same ranks, one launch.

Introduced in chapter 11. Each strategy trains :func:`disttutor.sharding.model.tiny_lm`
(tied embeddings, a frozen positional embedding, LayerNorm, MLP) with AdamW for
``--steps`` steps on the same global batches; every rank reports, per strategy,
the bytes it really holds (parameters, gradients, optimiser state) next to
chapter 1's calculator, and the largest difference from one process trained on
the full batches. FSDP2's sharded model is then saved and reloaded with
``torch.distributed.checkpoint``::

    disttutor run sharding -n 4
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import torch
import torch.distributed as dist

from disttutor.rank import runtime
from disttutor.sharding import model as S
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt

STRATEGIES = ("ddp", "zero1", "fsdp_scratch", "fsdp_scratch_bf16", "fsdp2")
STAGE = {"ddp": 0, "zero1": 1, "fsdp_scratch": 3, "fsdp_scratch_bf16": 3, "fsdp2": 3}


@dataclass(frozen=True)
class ShardingConfig:
    steps: int = opt(3, "AdamW steps per strategy")
    batch: int = opt(8, "GLOBAL batch (sequences) per step, split evenly over the ranks")
    lr: float = opt(1e-2, "AdamW learning rate")
    checkpoint: bool = opt(True, "save and reload FSDP2's sharded model with torch.distributed.checkpoint")
    time: bool = opt(False, "instead: time DDP and FSDP2 steps on a wider TinyLM (chapter 13's prediction)")
    time_dim: int = opt(256, "--time: the TinyLM's width")
    time_ff: int = opt(1024, "--time: the TinyLM's MLP width")
    rounds: int = opt(3, "--time: timed rounds per strategy, interleaved to share the machine's noise")

    def __post_init__(self):
        require_positive(self, "steps", "batch", "time_dim", "time_ff", "rounds")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


def reference(cfg: ShardingConfig, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """One process, full global batches, same casts: what every strategy must reproduce."""
    model, (x, y) = S.tiny_lm(), S.data()
    opt_ = S.adamw(model.parameters(), cfg.lr)
    for step in range(cfg.steps):
        xb, yb = S.batch(x, y, step, cfg.batch)
        opt_.zero_grad(set_to_none=True)
        S.loss_fn(S.cast_forward(model, xb, dtype), yb).backward()
        opt_.step()
    return model


def train(model, optimizers, cfg: ShardingConfig, rank: int, world: int) -> None:
    x, y = S.data()
    for step in range(cfg.steps):
        xb, yb = S.batch(x, y, step, cfg.batch, rank, world)  # this rank's slice of the global batch
        for o in optimizers:
            o.zero_grad(set_to_none=True)
        S.loss_fn(model(xb), yb).backward()
        for o in optimizers:
            o.step()


def build(name: str, ctx, lr: float):
    """(model, optimisers to step, parameters this rank stores, full parameters by name (a function),
    optimisers whose state this rank stores)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from disttutor.scratch.fsdp import ScratchFSDP
    from disttutor.scratch.zero1 import ZeroOne

    base = S.tiny_lm().to(ctx.device)
    if name in ("ddp", "zero1"):
        model = DDP(base)  # averages gradients in both; ZeRO-1 only shards the optimiser state
        if name == "ddp":
            opts = [S.adamw(model.parameters(), lr)]
            return model, opts, list(base.parameters()), lambda: dict(base.named_parameters()), opts
        z = ZeroOne(model.parameters(), torch.optim.AdamW, lr=lr, weight_decay=0.1)  # as S.adamw
        return model, [z], list(base.parameters()), lambda: dict(base.named_parameters()), [z.optim]
    if name.startswith("fsdp_scratch"):
        model = ScratchFSDP(base, torch.bfloat16 if name.endswith("bf16") else None)
        opts = [S.adamw(model.sharded_parameters(), lr)]
        return model, opts, list(model.parameters()), model.full_parameters, opts
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    # The MLP is its own FSDP2 unit (gathered, used, freed); the embedding and head stay in the
    # root unit TOGETHER: a tied weight must live in one unit, or two units would each own a copy.
    fully_shard(base.mlp, mesh=mesh)
    fully_shard(base, mesh=mesh)
    opts = [S.adamw(base.parameters(), lr)]
    return base, opts, list(base.parameters()), lambda: {n: p.full_tensor() for n, p in base.named_parameters()}, opts


def checkpoint_roundtrip(model, optimizer, ctx, cfg) -> dict:
    """Save FSDP2's sharded model and optimiser with chapter 10's checkpoint code (DCP underneath:
    each rank writes its own shards), reload both into a freshly built, differently seeded copy."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from disttutor.lm import checkpoint

    directory = os.path.join(runtime.run_dir() or ".", "fsdp2_checkpoints")
    path = checkpoint.save(directory, cfg.steps, model, optimizer)
    fresh = S.tiny_lm(seed=123).to(ctx.device)  # different weights: the load must overwrite them
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    fully_shard(fresh.mlp, mesh=mesh)
    fully_shard(fresh, mesh=mesh)
    fresh_opt = S.adamw(fresh.parameters(), cfg.lr)
    meta = checkpoint.load(path, fresh, fresh_opt, restore_rng=False)
    same = all(torch.equal(a.to_local(), b.to_local())
               for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    # AdamW's moments are sharded like the parameters: each rank compares its own shards.
    moments = [(optimizer.state[p], fresh_opt.state[q]) for p, q in zip(model.parameters(), fresh.parameters())
               if p in optimizer.state]
    same_opt = bool(moments) and all(torch.equal(a[k].to_local(), b[k].to_local())
                                     for a, b in moments for k in ("exp_avg", "exp_avg_sq"))
    files = sorted(os.listdir(path))
    dist.barrier()
    if ctx.rank == 0:
        shutil.rmtree(directory, ignore_errors=True)
    return {"reloaded_equal": same, "optimizer_equal": same_opt, "step": meta["step"], "files": files}


def time_strategies(cfg: ShardingConfig, ctx) -> dict:
    """Median step time (ms) of DDP and FSDP2 on ``TinyLM(dim=time_dim, ff=time_ff)``, interleaved rounds
    of ``steps`` steps after one untimed step; chapter 13 predicts these from its fitted cost model."""
    import statistics
    import time

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    # The untrained TinyLM's logits are so large that softmax probabilities, and the gradients built from
    # them, fall below float32's smallest normal number, and many CPUs multiply such subnormal numbers
    # several times slower. Flushed to zero, a step costs what its arithmetic costs (False: not supported).
    flushed = torch.set_flush_denormal(True)

    def fresh():
        torch.manual_seed(0)
        return S.TinyLM(dim=cfg.time_dim, ff=cfg.time_ff).to(ctx.device)

    ddp = DDP(fresh())
    fsdp = fresh()
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    fully_shard(fsdp.mlp, mesh=mesh)  # the same two units as the chapter-11 run
    fully_shard(fsdp, mesh=mesh)
    runs = {"ddp": (ddp, S.adamw(ddp.parameters(), cfg.lr)), "fsdp2": (fsdp, S.adamw(fsdp.parameters(), cfg.lr))}
    x, y = S.data()
    ms: dict[str, list[float]] = {k: [] for k in runs}
    for rnd in range(cfg.rounds):
        for name, (model, opt_) in runs.items():
            for step in range(cfg.steps + 1):
                if step == 1:
                    t0 = runtime.barrier_time()  # all ranks start the timed block together
                xb, yb = S.batch(x, y, step, cfg.batch, ctx.rank, ctx.world_size)
                opt_.zero_grad(set_to_none=True)
                S.loss_fn(model(xb), yb).backward()
                opt_.step()
            dist.barrier()  # the slowest rank ends the block
            ms[name].append((time.perf_counter() - t0) / cfg.steps * 1e3)
        runtime.progress(rnd + 1, cfg.rounds, desc="timing DDP and FSDP2")
    units = {"mlp": sum(p.numel() for p in fresh().mlp.parameters())}
    units["root"] = sum(p.numel() for p in fresh().parameters()) - units["mlp"]  # tied weight counted once
    return {"step_ms": {k: statistics.median(v) for k, v in ms.items()}, "samples_ms": ms, "unit_params": units,
            "flush_denormal": flushed,
            "local_tokens": cfg.batch // ctx.world_size * S.SEQ, "dim": cfg.time_dim, "ff": cfg.time_ff}


def run(cfg: ShardingConfig) -> None:
    with runtime.setup() as ctx:
        if cfg.batch % ctx.world_size:
            raise ValueError(f"batch {cfg.batch} does not split evenly over {ctx.world_size} ranks")
        if cfg.time:
            runtime.report(timing=time_strategies(cfg, ctx))
            return
        refs = {None: reference(cfg), torch.bfloat16: reference(cfg, torch.bfloat16)}
        n_params, n_trainable = S.counts(refs[None])
        out, fsdp2 = {}, None
        for name in STRATEGIES:
            model, opts, stored, full, state_opts = build(name, ctx, cfg.lr)
            train(model, opts, cfg, ctx.rank, ctx.world_size)
            ref = refs[torch.bfloat16 if name.endswith("bf16") else None]
            worst, err = S.max_rel_diff(full(), ref)
            upd = S.update_diff(full(), ref, S.tiny_lm())
            out[name] = {"update_diff": upd, "measured": S.memory_row(stored, state_opts),
                         "predicted": S.predicted(n_params, n_trainable, ctx.world_size, STAGE[name]),
                         "max_rel_diff": err, "worst_param": worst}
            if name == "fsdp2":
                fsdp2, fsdp2_opt = model, opts[0]
            if name == "ddp":
                ddp_params = {n: p.detach().clone() for n, p in full().items()}
        # FSDP2 against DDP directly: same fp32 maths, different communication.
        f2 = {n: p.full_tensor() for n, p in fsdp2.named_parameters()}
        out["fsdp2"]["vs_ddp"] = max((f2[n] - p).abs().max().item() for n, p in ddp_params.items())
        ckpt = checkpoint_roundtrip(fsdp2, fsdp2_opt, ctx, cfg) if cfg.checkpoint else None
        runtime.report(strategies=out, n_params=n_params, n_trainable=n_trainable, checkpoint=ckpt,
                       lr=cfg.lr, steps=cfg.steps)


main = cli(ShardingConfig, run)

if __name__ == "__main__":
    main()
