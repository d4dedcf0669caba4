"""FSDP2 as practitioners write it: fully_shard per block, then the root; its communication and memory measured.

Introduced in chapter 11 (FSDP in full). One launch trains :class:`disttutor.sharding.blocks.BlockLM`
(``--blocks`` residual blocks, a tied embedding) and measures, on every rank:

* ``fully_shard`` per block then the root, trained like one process on the full batch;
* one profiled step with prefetching off and on: every all-gather and reduce-scatter, its unit,
  its phase and its bytes (:mod:`disttutor.sharding.comm_trace`), next to one profiled DDP step;
* peak memory per rank with and without ``reshard_after_forward`` (torch's ``FSDPMemTracker``),
  and with activation checkpointing;
* ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``: the dtypes and bytes it changes;
* a sharded checkpoint of model and optimiser (``torch.distributed.checkpoint`` with the
  ``get_state_dict`` / ``set_state_dict`` API), reloaded into a fresh model and compared;
* what ``model.parameters()`` shows, and what freezing one weight does, in FSDP2 and in the
  flat-parameter design of :mod:`disttutor.scratch.fsdp` (FSDP1's design)::

    disttutor run fsdp2 -n 2
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function

from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt
from disttutor.rank import runtime
from disttutor.sharding import comm_trace
from disttutor.sharding import model as S
from disttutor.sharding.blocks import block_lm


@dataclass(frozen=True)
class FSDP2Config:
    blocks: int = opt(4, "residual blocks (each its own FSDP unit)")
    dim: int = opt(64, "model width")
    ff: int = opt(256, "MLP width")
    steps: int = opt(3, "AdamW steps compared with one process")
    batch: int = opt(8, "GLOBAL batch (sequences) per step, split evenly over the ranks")
    lr: float = opt(1e-2, "AdamW learning rate")

    def __post_init__(self):
        require_positive(self, "blocks", "dim", "ff", "steps", "batch")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


def shard(model, mesh, reshard_after_forward: bool = True, mp_policy=None, prefetch: bool = False):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp_policy = mp_policy or MixedPrecisionPolicy()  # default: compute and communicate in the params' dtype
    # [teach fully_shard]
    # One unit per block: its parameters become DTensor shards (dim 0 split over the mesh); a hook
    # all-gathers them just before the block runs and frees them just after (reshard_after_forward).
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp_policy)
    # Then the root: everything not in a block (embeddings, final norm, the tied head) is one unit,
    # and the root's hooks start and finish every step (wait for the last reduce-scatter, ...).
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp_policy)
    # [/teach fully_shard]
    blocks = list(model.blocks)
    for i, block in enumerate(blocks):
        # [teach prefetch]
        if prefetch:   # issue block i+1's all-gather before block i runs (and i-1's in backward)
            block.set_modules_to_forward_prefetch(blocks[i + 1:i + 2])
            block.set_modules_to_backward_prefetch(blocks[i - 1:i] if i else [block])
        else:          # each all-gather waits until its own block is about to run
            # (FSDP2 prefetches one block in backward by default; an explicit list replaces that
            # default, and a block "prefetching" itself is a no-op: it is already gathered.)
            block.set_modules_to_backward_prefetch([block])
        # [/teach prefetch]
    return model


def step(model, opt_, xb, yb):
    with record_function("forward"):
        loss = S.loss_fn(model(xb), yb)
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        opt_.step()
        opt_.zero_grad(set_to_none=True)
    return loss


def profiled_step(model, opt_, xb, yb, path: str) -> list[dict]:
    """One step under torch.profiler (shapes recorded: the bytes of each collective); its trace events."""
    step(model, opt_, xb, yb)  # warm-up: the first step also sets FSDP2's lazy state up
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step(model, opt_, xb, yb)
    prof.export_chrome_trace(path)
    with open(path) as f:
        return json.load(f)["traceEvents"]


def sent_bytes(model, opt_, xb, yb) -> int | None:
    """Bytes this process handed to the kernel's write/send calls during one step (Linux ``/proc/self/io``
    ``wchar``, every thread): gloo's TCP traffic, headers included -- the wire, measured. None elsewhere."""
    def wchar():
        with open("/proc/self/io") as f:
            return int(next(ln for ln in f if ln.startswith("wchar:")).split()[1])

    if not os.path.exists("/proc/self/io") or dist.get_backend() != "gloo":
        return None  # NCCL's bytes go over NVLink/InfiniBand, not through this process's sockets
    dist.barrier()
    before = wchar()
    step(model, opt_, xb, yb)
    after = wchar()  # nothing else writes meanwhile: no printing, no files
    dist.barrier()
    return after - before


def peak_memory(model, opt_, xb, yb) -> dict:
    """Peak bytes on this rank during one step, by category (torch's FSDPMemTracker, CPU tensors too).

    FSDPMemTracker lives in torch's private ``_tools``: torch has no public memory counter for CPU
    tensors (``torch.cuda.max_memory_allocated`` is CUDA only), and this one knows FSDP2's categories
    (sharded and unsharded parameters, all-gather and reduce-scatter buffers). The snapshot is taken at
    the moment the total peaks; ``ACT_PEAK`` is the activations' own peak over the step (the activation
    bytes at the total's peak depend on when gloo's thread frees its buffers, and vary from run to run).

    ``ACT_PEAK`` leaves out the samples taken inside a unit's pre-forward and pre-backward hooks: there
    the tracker counts the ops that all-gather and unflatten the unit's weights as activations until the
    hook returns and re-tags them (one block's full weights, not activations)."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker, _FSDPState

    class Tracker(FSDPMemTracker):
        act_peak = 0

        def _update_peak_stats(self, peak_state) -> None:  # called after every op the tracker sees
            super()._update_peak_stats(peak_state)
            if self._fsdp_state in (_FSDPState.PRE_FW, _FSDPState.PRE_BW):
                return  # gathered weights not yet re-tagged: not activations
            for dev_snap in self._curr_mem_snap.values():
                self.act_peak = max(self.act_peak, *(int(v) for k, v in dev_snap.items() if str(k).endswith("ACT")))

    step(model, opt_, xb, yb)  # optimiser state exists from here on, as in steady training
    tracker = Tracker(model, opt_)
    tracker.track_inputs((xb,))
    with tracker:
        step(model, opt_, xb, yb)
    snap = next(iter(tracker.get_tracker_snapshot("peak").values()))  # {device: {category: bytes}}
    return {**{str(k).split(".")[-1]: int(v) for k, v in snap.items()}, "ACT_PEAK": tracker.act_peak}


def checkpoint_roundtrip(model, opt_, cfg, mesh, directory: str, xb, yb) -> dict:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    # [teach dcp]
    # Sharded state dicts: each rank holds (and writes) only its DTensor shards; DCP writes one file
    # per rank plus a .metadata index, and can reload onto another number of ranks.
    model_sd, optim_sd = get_state_dict(model, opt_)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=directory)

    fresh = shard(block_lm(seed=123, n_blocks=cfg.blocks, dim=cfg.dim, ff=cfg.ff), mesh)
    fresh_opt = S.adamw(fresh.parameters(), cfg.lr)
    model_sd, optim_sd = get_state_dict(fresh, fresh_opt)  # the shapes to fill (and the fresh values)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=directory)  # in place, each rank reading only its shards
    set_state_dict(fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    # [/teach dcp]
    same = all(torch.equal(a.to_local(), b.to_local()) for a, b in zip(model.parameters(), fresh.parameters()))
    moments = [(opt_.state[p], fresh_opt.state[q]) for p, q in zip(model.parameters(), fresh.parameters())]
    same_opt = all(torch.equal(a[k].to_local(), b[k].to_local()) for a, b in moments
                   for k in ("exp_avg", "exp_avg_sq")) and all(torch.equal(a["step"], b["step"]) for a, b in moments)
    # The proof that matters: one more step from the reloaded state equals one more from the original.
    step(model, opt_, xb, yb)
    step(fresh, fresh_opt, xb, yb)
    resumed = max((a.to_local() - b.to_local()).abs().max().item() for a, b in zip(model.parameters(), fresh.parameters()))
    files = sorted(os.listdir(directory))
    return {"params_equal": same, "optimizer_equal": same_opt, "resumed_diff": resumed, "files": files}


def parameter_views(ctx) -> dict:
    """What model.parameters() shows, and freezing one weight after wrapping, in both designs."""
    from disttutor.scratch.fsdp import ScratchFSDP

    out = {}
    mesh = _mesh(ctx)
    for design in ("flat (FSDP1-style)", "per-parameter (FSDP2)"):
        model = block_lm(n_blocks=2, dim=8, ff=16)
        wrapped = ScratchFSDP(model) if design.startswith("flat") else shard(model, mesh)
        shown = [(n, list(p.shape), list(S.local_tensor(p).shape), type(p).__name__,
                  str(getattr(p, "placements", "")))
                 for n, p in wrapped.named_parameters()]
        placeholders = [(n, list(p.shape)) for n, p in model.named_parameters()
                        if design.startswith("flat") and p.numel() == 0]
        # Freeze one weight AFTER wrapping (the usual fine-tuning move), then take one SGD step.
        target = model.blocks[0].up.weight
        before = _full(wrapped, "blocks.0.up.weight", target)
        target.requires_grad_(False)
        trainable = [p for p in wrapped.parameters() if p.requires_grad]
        sgd = torch.optim.SGD(trainable, lr=0.1)
        x, _ = S.data()
        wrapped(x[:4]).float().pow(2).mean().backward()
        sgd.step()
        moved = (_full(wrapped, "blocks.0.up.weight", target) - before).abs().max().item()
        out[design] = {"parameters": shown[:6], "n_parameters": len(shown), "placeholders": placeholders[:3],
                       "n_placeholders": len(placeholders), "frozen_weight_moved": moved}
    try:  # FSDP1 itself: does it run on this machine?
        from torch.distributed.fsdp import FullyShardedDataParallel

        FullyShardedDataParallel(block_lm(n_blocks=1, dim=8, ff=16))
        out["fsdp1_error"] = None
    except Exception as e:  # on CPU: "FSDP needs a non-CPU accelerator device ..."
        out["fsdp1_error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return out


def _full(wrapped, name: str, param) -> torch.Tensor:
    if hasattr(wrapped, "full_parameters"):
        return wrapped.full_parameters()[name].clone()
    return param.full_tensor().detach().clone()


def _mesh(ctx):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(ctx.device.type, (ctx.world_size,))


def run(cfg: FSDP2Config) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.nn.parallel import DistributedDataParallel as DDP

    with runtime.setup() as ctx:
        if cfg.batch % ctx.world_size:
            raise ValueError(f"batch {cfg.batch} does not split evenly over {ctx.world_size} ranks")
        mesh, arch = _mesh(ctx), dict(n_blocks=cfg.blocks, dim=cfg.dim, ff=cfg.ff)
        x, y = S.data()
        new = lambda **kw: block_lm(**arch, **kw).to(ctx.device)  # noqa: E731 (same seed: same weights)
        out = {"unit_params": {"block": sum(p.numel() for p in new().blocks[0].parameters())}}
        out["unit_params"]["root"] = sum(p.numel() for p in new().parameters()) - cfg.blocks * out["unit_params"]["block"]

        # 1. Trained like one process (fp32; with activation checkpointing too).
        ref = new()
        ref_opt = S.adamw(ref.parameters(), cfg.lr)
        models = {"fsdp2": shard(new(), mesh), "fsdp2_ac": shard(new(checkpoint=True), mesh)}
        opts = {k: S.adamw(m.parameters(), cfg.lr) for k, m in models.items()}
        for i in range(cfg.steps):
            xb, yb = S.batch(x, y, i, cfg.batch)
            step(ref, ref_opt, xb, yb)
            for k, m in models.items():
                step(m, opts[k], *S.batch(x, y, i, cfg.batch, ctx.rank, ctx.world_size))
        full = {k: {n: p.full_tensor() for n, p in m.named_parameters()} for k, m in models.items()}
        out["vs_one_process"] = {k: max((f[n] - p).abs().max().item() for n, p in ref.named_parameters())
                                 for k, f in full.items()}
        out["ac_vs_no_ac"] = max((full["fsdp2"][n] - full["fsdp2_ac"][n]).abs().max().item() for n in full["fsdp2"])
        runtime.progress(1, 5, desc="trained like one process")

        # 2. Communication of one step: prefetching off and on, and DDP's for comparison.
        xb, yb = S.batch(x, y, 0, cfg.batch, ctx.rank, ctx.world_size)
        rd = runtime.run_dir() or "."
        out["comm"] = {}
        for name, kw in (("prefetch off", {}), ("prefetch on", {"prefetch": True}),
                         ("bf16 params", {"mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                                             reduce_dtype=torch.float32)})):
            m = shard(new(), mesh, **kw)
            o = S.adamw(m.parameters(), cfg.lr)
            ev = profiled_step(m, o, xb, yb,
                               os.path.join(rd, f"fsdp2_{name.replace(' ', '_')}_rank{ctx.rank}.json"))
            out["comm"][name] = comm_trace.collectives(ev)
            out["comm"][name]["sent_bytes"] = sent_bytes(m, o, xb, yb)
        ddp = DDP(new())
        o = S.adamw(ddp.parameters(), cfg.lr)
        ev = profiled_step(ddp, o, xb, yb, os.path.join(rd, f"ddp_rank{ctx.rank}.json"))
        out["ddp_allreduce_bytes"] = comm_trace.backend_bytes(ev, "all_reduce")
        out["ddp_sent_bytes"] = sent_bytes(ddp, o, xb, yb)
        out["n_params"] = sum(p.numel() for p in new().parameters())
        runtime.progress(2, 5, desc="communication traced")

        # 3. What MixedPrecisionPolicy changes, seen from inside a block during forward and on the shards.
        m = shard(new(), mesh, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
        seen = {}
        m.blocks[0].up.register_forward_hook(lambda mod, i, o: seen.update(weight=str(mod.weight.dtype),
                                                                        output=str(o.dtype)))
        mp_opt = S.adamw(m.parameters(), cfg.lr)
        step(m, mp_opt, xb, yb)
        p = m.blocks[0].up.weight
        out["mixed_precision"] = {"in_forward": seen, "sharded_param": str(p.dtype), "grad_after_step": None,
                                  "optimizer_state": str(mp_opt.state[p]["exp_avg"].dtype)}
        m(xb).float().sum().backward()
        out["mixed_precision"]["grad_after_step"] = str(p.grad.dtype)
        runtime.progress(3, 5, desc="mixed precision")

        # 4. Peak memory per rank: reshard after forward or not; with activation checkpointing.
        out["memory"] = {}
        for name, kw, ck in (("reshard_after_forward=True", {}, False),
                             ("reshard_after_forward=False", {"reshard_after_forward": False}, False),
                             ("True + activation checkpointing", {}, True)):
            m = shard(new(checkpoint=ck), mesh, **kw)
            out["memory"][name] = peak_memory(m, S.adamw(m.parameters(), cfg.lr), xb, yb)
        runtime.progress(4, 5, desc="peak memory")

        # 5. Checkpoint and the two designs' parameters.
        directory = os.path.join(rd, "fsdp2_dcp")
        out["checkpoint"] = checkpoint_roundtrip(models["fsdp2"], opts["fsdp2"], cfg, mesh, directory, xb, yb)
        dist.barrier()
        if ctx.rank == 0:
            shutil.rmtree(directory, ignore_errors=True)
        out["views"] = parameter_views(ctx)
        runtime.progress(5, 5, desc="checkpoint, parameter views")
        runtime.report(**out, world=ctx.world_size)


main = cli(FSDP2Config, run)

if __name__ == "__main__":
    main()
