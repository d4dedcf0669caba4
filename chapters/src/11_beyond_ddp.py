# %% [markdown] id="md-11-01"
# # Chapter 11 — Beyond DDP: ZeRO and FSDP, tensor parallelism, a 2D mesh
#
# *Article §11: summary and outlook.*
#
# DDP keeps a whole copy of the model, its gradients and its optimizer state on every rank. This chapter removes that copy by **sharding**: each rank stores only a slice (a *shard*) of each.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(11)

# %% [markdown] id="md-11-02" tags=["opening"]
# **After this chapter you can**
# * shard optimizer states, gradients and parameters (ZeRO-1, FSDP) — from scratch (Exercises 11.1, 11.2) and with FSDP2's `fully_shard`;
# * measure the memory each rank really holds and compare it with chapter 1's calculator;
# * split layers with tensor parallelism (`parallelize_module`, DTensor placements) and combine it with FSDP on a 2D mesh.

# %%
import os

import matplotlib.pyplot as plt
import torch

import disttutor
from disttutor.checks.claims.ch11 import (check_fedavg, check_flat_vs_per_param, check_fsdp_bytes,
                                          check_fsdp_checkpoint, check_fsdp_collectives, check_fsdp_memory,
                                          check_mesh_2d, check_mixed_precision, check_strategies_agree,
                                          check_tp_blocks, check_tp_placements)
from disttutor.checks.sharding import check_fsdp, check_zero1
from disttutor.viz import sharding as viz

print(f"torch {torch.__version__}, {disttutor.cores()} usable CPU cores, GPUs: {torch.cuda.device_count()}")
LOAD = os.getloadavg()[0]
print(f"load average now: {LOAD:.1f} (on {disttutor.cores()} cores)")
LAUNCH = dict(stream=False, timeout=280)

# %% [markdown] id="md-11-03"
# ## 1. Where the memory goes, and three ways to shard it
#
# *Model states* are the weights, their gradients and the optimizer state. Chapter 1's calculator: AdamW in fp32 costs **16 bytes per parameter** (4 weight, 4 gradient, 8 for Adam's two moments), and DDP keeps all 16 on every rank.

# %% [markdown] id="md-11-27"
# **ZeRO** (Zero Redundancy Optimizer, Rajbhandari et al., 2020) removes that redundancy in stages, over *n* ranks:
#
# | | weights | gradients | optimizer state | how |
# |---|---|---|---|---|
# | DDP | full | full | full | all-reduce gradients |
# | ZeRO-1 | full | full | **1/n** | each rank steps the parameters it owns, then **broadcasts** them |
# | ZeRO-2 | full | **1/n** | 1/n | gradients **reduce-scattered** instead of all-reduced |
# | ZeRO-3 = FSDP | **1/n** | 1/n | 1/n | weights **all-gathered** when a layer runs, freed after |

# %% [markdown] id="md-11-28"
# The model, `tiny_lm`, has a language model's traps: an output weight **tied** to the input embedding and a **frozen** positional embedding. The `sharding` program trains it five ways on the same ranks (DDP, ZeRO-1, FSDP from scratch in fp32 and bf16, torch's FSDP2), 3 AdamW steps each. It compares each with one process and saves FSDP2's shards with DCP (`torch.distributed.checkpoint`, chapter 10).

# %%
runs = {n: disttutor.launch("sharding", nproc=n, **LAUNCH) for n in (2, 4)}
by_world = {n: r.results for n, r in runs.items()}
print(f"parameters: {by_world[2][0]['n_params']} ({by_world[2][0]['n_trainable']} trainable; "
      "the tied weight counted once, the frozen one has no gradient or state)")
print(f"{'ranks':>5} {'strategy':18} {'params':>7} {'grads':>7} {'optim':>7}   calculator: params/grads/optim (bytes, fullest rank)")
for row in viz.memory_rows(by_world):
    print(f"{row['ranks']:>5} {row['strategy']:18} {row['params']:>7} {row['grads']:>7} {row['optimizer']:>7}"
          f"   {row['params_pred']:>7} {row['grads_pred']:>7} {row['optimizer_pred']:>7}")

# %%
viz.memory_figure(by_world)
plt.show()

# %% [markdown] id="md-11-04"
# The table above, row by row against the calculator's columns:
#
# * **ZeRO-1 is coarse.** It gives each *whole tensor* one owner (as torch's `ZeroRedundancyOptimizer` does), so the rank owning the 64×32 embedding holds more than `1/n` of the state. With thousands of tensors the imbalance averages out.
# * **The scratch FSDP pads and keeps frozen weights whole** (no gradient, no state to share); FSDP2 shards every tensor, frozen ones too.

# %% [markdown] id="md-11-29"
# A *unit* is the group of parameters FSDP gathers together. This program's FSDP2 has two: `fully_shard(base.mlp)`, then `fully_shard(base)` for the rest (a tied weight must stay in one unit). The calculator ignores the full weights a unit holds while it runs; section 2 measures them.

# %% [markdown] id="md-11-30"
# Every strategy computes the same training. Checked on every rank of both runs:

# %%
print(check_strategies_agree(by_world))  # tolerances and their reasons: disttutor/checks/sharding.py
s2 = by_world[4][0]["strategies"]
for name, s in s2.items():
    print(f"4 ranks, {name:18}: update vs one process differs by {s['update_diff']:.1e} (relative), "
          f"largest element-wise {s['max_rel_diff']:.1e} ({s['worst_param']})")
print(f"FSDP2 vs DDP, largest parameter difference: {s2['fsdp2']['vs_ddp']:.1e}")
upd = {prec: [s["update_diff"] for n, s in s2.items() if n.endswith("bf16") == (prec == "bf16")] for prec in ("fp32", "bf16")}
print(f"whole-update error: fp32 strategies {min(upd['fp32']):.0e}-{max(upd['fp32']):.0e}, "
      f"bf16 strategies {min(upd['bf16']):.0e}-{max(upd['bf16']):.0e}")
for name, s in s2.items():
    if name.endswith("bf16"):
        k = s["max_rel_diff"] / s["update_diff"] if s["update_diff"] > 0 else float("inf")
        print(f"{name}: its largest element-wise error ({s['worst_param']}) is {k:.1f}x its whole-update error "
              f"({'larger' if k > 1 else 'not larger'})")
print(f"checkpoint files (4 ranks): {by_world[4][0]['checkpoint']['files']}; reloaded shards equal "
      f"(parameters, AdamW moments): {all(r['checkpoint']['reloaded_equal'] for r in by_world[4])}, "
      f"{all(r['checkpoint']['optimizer_equal'] for r in by_world[4])}")

# %% [markdown] id="md-11-05"
# The bf16 run's errors above are larger than fp32's: bf16 keeps 8 significant bits, and the ranks sum in another order than one process. So the check compares the **whole update as one vector** (its relative error), and names the worst single parameter.

# %% [markdown] id="md-11-31"
# The checkpoint is one `.distcp` file per rank (each rank writes only its shards), DCP's `.metadata`, and chapter 10's `meta.json` and RNG states.

# %% [markdown] id="md-11-32"
# ## Exercise 11.1 — ZeRO-1 from scratch
#
# Write `ZeroOne(params, optimizer_class, **defaults)`, a `torch.optim.Optimizer` shaped like `ZeroRedundancyOptimizer`. Each rank owns some parameters and builds `self.optim = optimizer_class(owned, **defaults)` on those only; `step()` steps them and **broadcasts** every parameter from its owner. Gradients arrive already averaged (DDP's job).

# %% [markdown] id="md-11-33"
# The checker trains `tiny_lm` with AdamW against one process after each step, and checks that the optimizer state is stored exactly once over the ranks.

# %%
card("11.1")

# %%
class ZeroOne(torch.optim.Optimizer):
    def __init__(self, params, optimizer_class, **defaults):
        raise NotImplementedError("Exercise 11.1: own a share of the parameters, build self.optim on them")

    def step(self, closure=None):
        raise NotImplementedError("Exercise 11.1: step your share, then broadcast every parameter from its owner")


# %%
hint("11.1")


# %%
print(check_zero1(ZeroOne))

# %% [markdown] id="md-11-06"
# ## 2. FSDP2: the code you write, its communication and its memory
#
# **FSDP** (fully sharded data parallel, ZeRO-3) gathers a unit's full weights just before the unit runs; choosing the units is your one real decision. The `fsdp2` program trains `BlockLM` (an embedding, four residual blocks, a tied output layer) with the usual recipe, **`fully_shard` on every block, then on the root**:

# %%
from disttutor.course.source import show_code

show_code("disttutor.programs.fsdp2", "fully_shard")

# %% [markdown] id="md-11-07"
# After these calls every parameter is a **DTensor** (a tensor plus how it is placed over ranks; section 3), here `Shard(dim=0)`: each of 2 ranks holds half of every weight's rows.

# %% [markdown] id="md-11-34"
# Each `fully_shard(block)` installs hooks on the block. *Pre-forward* all-gathers its full weights and *post-forward* frees them (`reshard_after_forward=True`); *pre-backward* gathers them again, and *post-backward* **reduce-scatters** the gradients, so each rank keeps the average of its own shard.

# %% [markdown] id="md-11-35"
# torch's default, `reshard_after_forward=None`, means `True` for every unit but the root (`False`); the program passes `True` to all units. One launch on 2 ranks measures all of section 2:

# %%
f2run = disttutor.launch("fsdp2", nproc=2, **LAUNCH)
F2 = f2run.results
up = F2[0]["unit_params"]
print(f"BlockLM: {F2[0]['n_params']} parameters; each block unit {up['block']}, the root unit {up['root']}")
for k, v in F2[0]["vs_one_process"].items():
    print(f"{k:9}: 3 AdamW steps on 2 ranks vs one process on the full batch: largest difference {v:.1e}")
for r in F2:  # fp32, the same sums in another order (rank-local halves, then a reduce-scatter): ulps of O(1) values
    assert max(r["vs_one_process"].values()) < 1e-5, r["vs_one_process"]

# %% [markdown] id="md-11-08"
# ### 2.1 Communication: one all-gather per unit in forward and in backward, one reduce-scatter
#
# The program profiles one step with `torch.profiler`, as in chapter 9: FSDP2 names its regions (`FSDP::all_gather (blocks.0)`, `FSDP::post_backward_reduce (blocks.0)`).

# %% [markdown] id="md-11-36"
# **Prefetching** issues the *next* unit's all-gather before the current unit computes, so the transfer can hide behind compute. FSDP2 prefetches one unit in backward by default; explicit forward prefetching is opt-in. The two settings the program compares:

# %%
show_code("disttutor.programs.fsdp2", "prefetch")

# %%
fig = viz.fsdp_timeline_figure(F2)
plt.show()
for cond in ("prefetch off", "prefetch on"):
    ms = [sum(d for s, d in r["comm"][cond]["regions"][p]) for r in F2 for p in ("forward", "backward")]
    print(f"{cond:12}: forward + backward {max(ms[0::2]) + max(ms[1::2]):.1f} ms (slowest rank's regions; one step)")
print(f"load average {os.getloadavg()[0]:.1f} on {disttutor.cores()} cores: one profiled step each, so these times "
      "are noisy; the order of the collectives below is not")

# %% tags=["nbval-check-output"]
def backward_order(cond, rank=0):
    return [f"{'AG' if c['op'] == 'all_gather' else 'RS'}{c['unit'].split('.')[-1][0]}"
            for c in F2[rank]["comm"][cond]["calls"] if c["phase"] == "backward" and c["unit"] != "root"]


for cond in ("prefetch off", "prefetch on"):
    print(f"{cond:12}: backward issues {' '.join(backward_order(cond))}")
# without prefetching block 2 is gathered only after block 3 is done; with it, before block 3's reduce-scatter
print(check_fsdp_collectives(F2, backward_order("prefetch off"), backward_order("prefetch on")))

# %% [markdown] id="md-11-09"
# In the figure's forward, blocks `F0`..`F3` each compute after their blue all-gather; in backward, each block's gradient is reduce-scattered (red) as backward leaves it. With prefetching, block 2's all-gather is issued *before* block 3's reduce-scatter (the order printed above), so it can run while block 3 computes.

# %% [markdown] id="md-11-37"
# Gloo runs collectives on its own threads, so the overlap shows even on CPU ranks; whether the step gets faster depends on a free core (the two times printed above are one noisy step each). On GPUs the all-gather runs on its own CUDA stream.

# %% [markdown] id="md-11-38"
# **Bytes per step.** Let *P* be the parameter bytes. DDP all-reduces the gradients once (payload *P*); FSDP all-gathers every unit twice and reduce-scatters once (payload **3P**).

# %% [markdown] id="md-11-39"
# In a ring (chapter 2), a rank sends (n−1)/n of an all-gather's or reduce-scatter's payload and 2(n−1)/n of an all-reduce's. So FSDP sends **1.5×** what DDP sends. The program counts payloads from the trace and bytes handed to the sockets (`/proc/self/io`, Linux):

# %%
from disttutor.sharding.comm_trace import ring_wire_bytes

n = F2[0]["world"]
rows = []
for r in F2:
    calls = r["comm"]["prefetch off"]["calls"]
    payload = sum(c["bytes"] for c in calls)
    formula = sum(ring_wire_bytes(c["op"], c["bytes"], n) for c in calls)
    gloo_formula = sum(ring_wire_bytes("all_reduce" if c["op"] == "reduce_scatter" else c["op"], c["bytes"], n)
                       for c in calls)  # gloo: reduce-scatter = all-reduce of the whole tensor
    ddp_formula = ring_wire_bytes("all_reduce", r["ddp_allreduce_bytes"], n)
    rows.append(dict(payload=payload, formula=formula, gloo=gloo_formula, sent=r["comm"]["prefetch off"]["sent_bytes"],
                     ddp_payload=r["ddp_allreduce_bytes"], ddp_formula=ddp_formula, ddp_sent=r["ddp_sent_bytes"]))
P = F2[0]["n_params"] * 4
r0 = rows[0]
print(f"P = {F2[0]['n_params']} parameters x 4 bytes = {P} bytes; {n} ranks")
print(f"{'':24}{'payload':>10}{'ring formula':>14}{'sent (measured)':>17}")
print(f"{'DDP (all-reduce)':24}{r0['ddp_payload']:>10}{r0['ddp_formula']:>14.0f}{r0['ddp_sent'] or 0:>17}")
print(f"{'FSDP2 (AG + AG + RS)':24}{r0['payload']:>10}{r0['formula']:>14.0f}{r0['sent'] or 0:>17}")
print(f"FSDP2 / DDP: payload {r0['payload'] / r0['ddp_payload']:.2f}x, ring formula {r0['formula'] / r0['ddp_formula']:.2f}x, "
      f"sent on gloo {r0['sent'] / r0['ddp_sent']:.2f}x (gloo's reduce-scatter is an all-reduce: formula "
      f"{r0['gloo'] / r0['ddp_formula']:.2f}x)")
mp_calls = F2[0]["comm"]["bf16 params"]["calls"]  # MixedPrecisionPolicy (2.3): bf16 all-gathers
ag_bf16 = sum(c["bytes"] for c in mp_calls if c["op"] == "all_gather")
ag_fp32 = sum(c["bytes"] for c in F2[0]["comm"]["prefetch off"]["calls"] if c["op"] == "all_gather")
print(check_fsdp_bytes(rows, P, ag_bf16, ag_fp32))

# %% [markdown] id="md-11-10"
# The payloads match the formula to the byte. On the wire gloo sends about 2× DDP's bytes, not 1.5×: gloo has no native reduce-scatter and runs it as an all-reduce of the whole gradient. NCCL (GPUs) has one, and the ring formula's 1.5× applies there.

# %% [markdown] id="md-11-40"
# ### 2.2 Peak memory per rank: `reshard_after_forward` and activation checkpointing
#
# `reshard_after_forward=False` keeps each block's full weights from forward to backward: no second all-gather, more memory. **Activation checkpointing** (`torch.utils.checkpoint` around each block) keeps only each block's input and recomputes its activations in backward.

# %% [markdown] id="md-11-41"
# torch's `FSDPMemTracker` (`torch.distributed._tools`) counts every tensor by kind, on CPU too. The program ran one step under it in three configurations:

# %%
mem = {rank: r["memory"] for rank, r in enumerate(F2)}
cats = ("UNSHARDED_PARAM", "ALL_GATHER", "ACT", "Total")
print(f"peak bytes on rank 0 during one step{'':8}" + "".join(f"{c:>17}" for c in cats))
for cfg_name, m in mem[0].items():
    print(f"{cfg_name:44}" + "".join(f"{m[c]:>17}" for c in cats))
block_bytes, root_bytes = up["block"] * 4, up["root"] * 4
t0, f0 = mem[0]["reshard_after_forward=True"], mem[0]["reshard_after_forward=False"]
print(f"full weights at the peak: with resharding {t0['UNSHARDED_PARAM']} bytes = "
      f"{(t0['UNSHARDED_PARAM'] - root_bytes) / block_bytes:.0f} block(s) + the root ({block_bytes} + {root_bytes}); "
      f"without: {f0['UNSHARDED_PARAM']} bytes, the peak total {f0['Total'] / t0['Total']:.2f}x")
print(f"activation checkpointing: activations at the peak {mem[0]['True + activation checkpointing']['ACT']} "
      f"instead of {t0['ACT']} bytes; trained result vs without: "
      f"{'identical' if max(r['ac_vs_no_ac'] for r in F2) == 0 else 'differs'}")
print(check_fsdp_memory(mem, block_bytes, root_bytes, max(r["ac_vs_no_ac"] for r in F2)))

# %% [markdown] id="md-11-11"
# The blocks dominate a real model: with resharding, a 32-block model holds one or two blocks' full weights at a time instead of all 32. Activation checkpointing trades one more forward per block for activation memory, which grows with batch size and sequence length.

# %% [markdown] id="md-11-42"
# ### 2.3 `MixedPrecisionPolicy`
#
# With `MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)`, the sharded parameters, gradients and optimizer state stay fp32 (the *master weights*). Each shard is cast to bf16 **before** the all-gather (half the bytes), the block computes in bf16, and gradients are reduce-scattered in `reduce_dtype`:

# %%
mpd = F2[0]["mixed_precision"]
print(f"inside blocks.0 during forward: weight {mpd['in_forward']['weight']}, output {mpd['in_forward']['output']}")
print(f"the sharded parameter: {mpd['sharded_param']}, its gradient: {mpd['grad_after_step']}, "
      f"AdamW's state: {mpd['optimizer_state']}")
rs_dtypes = {c["dtype"] for c in mp_calls if c["op"] == "reduce_scatter"}
print(f"all-gathers: {ag_bf16} bytes in {({c['dtype'] for c in mp_calls if c['op'] == 'all_gather'})}, "
      f"reduce-scatters in {rs_dtypes} (reduce_dtype)")
print(check_mixed_precision(mpd, rs_dtypes))

# %% [markdown] id="md-11-12"
# On CPU ranks bf16 saves bytes on the wire; whether it saves time depends on the CPU's bf16 support, so the plain script below uses fp32.

# %% [markdown] id="md-11-43"
# ### 2.4 A sharded checkpoint: DCP with `get_state_dict` / `set_state_dict`
#
# With FSDP2 no rank holds the whole model. `get_state_dict` returns **sharded** state dicts (DTensors; optimizer state keyed by parameter name), and DCP writes each rank's shards:

# %%
show_code("disttutor.programs.fsdp2", "dcp")

# %%
ck = F2[0]["checkpoint"]
print(f"files: {ck['files']}")
print(f"reloaded shards equal on every rank: parameters {all(r['checkpoint']['params_equal'] for r in F2)}, "
      f"AdamW state {all(r['checkpoint']['optimizer_equal'] for r in F2)}; one more step from each: "
      f"largest difference {max(r['checkpoint']['resumed_diff'] for r in F2):.1e}")
print(check_fsdp_checkpoint(F2, n))

# %% [markdown] id="md-11-13"
# ### 2.5 The same, as a plain script to keep
#
# `disttutor/plain/fsdp2.py` is section 2 in torch only: `fully_shard` per block then the root, a few AdamW steps, a DCP save and reload. Run it as `torchrun --nproc-per-node 2 fsdp2.py`, on CPU (gloo) or GPUs (NCCL):

# %%
show_code("disttutor.plain.fsdp2")

# %% [markdown] id="md-11-14"
# ### 2.6 FSDP1's flat parameter vs FSDP2's per-parameter shards
#
# torch's first FSDP (`FullyShardedDataParallel`, "FSDP1") and the scratch FSDP of Exercise 11.2 **flatten** a unit's parameters into one vector and shard it. FSDP2 shards **every parameter on its own**, as a DTensor along dim 0.

# %% [markdown] id="md-11-44"
# The program wrapped one small model both ways and listed its parameters. Then it froze `blocks.0.up.weight` *after* wrapping (the usual fine-tuning move) and took one SGD step:

# %%
views = F2[0]["views"]
for design in ("flat (FSDP1-style)", "per-parameter (FSDP2)"):
    v = views[design]
    print(f"{design}: model.parameters() yields {v['n_parameters']} tensors; the first ones:")
    for name, shape, local, kind, placement in v["parameters"][:4]:
        print(f"    {name:28} {kind:9} shape {str(shape):9} this rank holds {str(local):9} {placement}")
    if v["n_placeholders"]:
        print(f"    ... and {v['n_placeholders']} of the module's own parameters are now empty placeholders, e.g. "
              f"{v['placeholders'][0][0]} {v['placeholders'][0][1]}")
    print(f"    froze blocks.0.up.weight after wrapping; one SGD step moved it by {v['frozen_weight_moved']:.2g}")
print(f"torch's FSDP1 on this machine: {views['fsdp1_error'] or 'runs'}")
print(check_flat_vs_per_param(views))

# %% [markdown] id="md-11-15"
# What changes for you:
#
# * **Inspecting parameters.** A flat design shows one anonymous 1-D shard. With FSDP2 each parameter keeps its name and global shape; `p.to_local()` is this rank's rows, `p.full_tensor()` gathers it.

# %% [markdown] id="md-11-55"
# * **Freezing one weight.** In the flat design `requires_grad` belongs to the whole vector, so the weight frozen above *kept training*. FSDP1 therefore requires one `requires_grad` per unit unless `use_orig_params=True`; FSDP2 froze exactly that weight.

# %% [markdown] id="md-11-45"
# * **Why flatten at all**: one contiguous all-gather per unit is fast. FSDP2 keeps that: it copies the unit's shards into one buffer before the all-gather (`all_gather_copy_in`) and back out into each parameter after it (`FSDP::all_gather_copy_out`).
# * torch's FSDP1 needs an accelerator (the error above), so the flat view here is the course's own.

# %% [markdown] id="md-11-16"
# ## Exercise 11.2 — FSDP from scratch (the flat design)
#
# Build the flat design yourself, with one unit (the whole module). The skeleton flattens the trainable parameters into one fp32 vector, pads it to a multiple of the world size, and keeps this rank's slice as the only `nn.Parameter`. Its `_Unit` (a `torch.autograd.Function`) calls your `gather` before the module runs and your `reduce_scatter` in backward.

# %% [markdown] id="md-11-46"
# You write three methods:
#
# 1. `free(params)` — the full copies stop being trainable **and** stop taking memory;
# 2. `gather(shard, dtype)` — every rank's shard, in rank order, as one vector in `dtype` (`dist.all_gather_single`; `all_gather_into_tensor` is its deprecated name);
# 3. `reduce_scatter(grad_full)` — this rank's slice of the **average** gradient, in fp32 (`dist.reduce_scatter_single`).

# %% [markdown] id="md-11-47"
# The checker trains `tiny_lm` against one process with SGD first (Adam would barely notice a sum instead of an average), then AdamW in fp32 and bf16. It also adds up what every rank stores.

# %%
card("11.2")

# %%
import torch.distributed as dist


class _Unit(torch.autograd.Function):
    """The unit's boundary (given): forward gathers the whole flat vector, backward reduce-scatters its gradient."""

    @staticmethod
    def forward(ctx, shard, fsdp):
        ctx.fsdp = fsdp
        return fsdp.gather(shard.detach(), fsdp.dtype)

    @staticmethod
    def backward(ctx, grad_full):
        return ctx.fsdp.reduce_scatter(grad_full), None


class FSDP(torch.nn.Module):
    def __init__(self, module, compute_dtype=None):
        super().__init__()
        self.module, self.dtype = module, compute_dtype or torch.float32
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        trainable = [(n, p) for n, p in module.named_parameters() if p.requires_grad]  # frozen ones stay whole
        self.entries = [(n, p.shape) for n, p in trainable]
        flat = torch.cat([p.detach().flatten().float() for _, p in trainable])
        self.numel = flat.numel()
        size = -(-self.numel // self.world)  # ceil: equal shards, the last one padded with zeros
        flat = torch.nn.functional.pad(flat, (0, size * self.world - self.numel))
        self.flat_shard = torch.nn.Parameter(flat[self.rank * size:(self.rank + 1) * size].clone())  # fp32 master
        self.free([p for _, p in trainable])

    def free(self, params):
        raise NotImplementedError("Exercise 11.2: free the full copies (not trainable, and no memory)")

    def gather(self, shard, dtype):
        raise NotImplementedError("Exercise 11.2: all-gather every rank's shard into one vector in dtype")

    def reduce_scatter(self, grad_full):
        raise NotImplementedError("Exercise 11.2: reduce-scatter the gradient, average it, return fp32")

    def forward(self, *inputs):
        full = _Unit.apply(self.flat_shard, self)  # all-gathered here; reduce-scattered in backward
        params, i = {}, 0
        for n, shape in self.entries:
            params[n] = full[i:i + shape.numel()].view(shape)
            i += shape.numel()
        for n, p in self.module.named_parameters():
            params.setdefault(n, p.to(self.dtype))  # frozen ones: kept whole, only cast
        return torch.func.functional_call(self.module, params, inputs).float()

    @torch.no_grad()
    def full_parameters(self):
        flat, full, i = self.gather(self.flat_shard.detach(), torch.float32), {}, 0
        for n, shape in self.entries:
            full[n] = flat[i:i + shape.numel()].view(shape).clone()
            i += shape.numel()
        for n, p in self.module.named_parameters():
            full.setdefault(n, p.detach().clone())
        return full


# %%
hint("11.2")


# %%
print(check_fsdp(FSDP))

# %% [markdown] id="md-11-17"
# ## 3. Tensor parallelism: split the layers, not the batch
#
# FSDP still runs every layer whole on every rank. **Tensor parallelism** (TP; Megatron-LM, Shoeybi et al. 2019) splits each layer's matrices, so no rank holds a whole layer.

# %% [markdown] id="md-11-48"
# PyTorch expresses it with **DTensor**: a tensor plus a *placement* on a *device mesh* (the ranks arranged in a grid). The `tensor_parallel` program shows each placement on 4 ranks for a 4×4 tensor `0..15`; a `Partial()` tensor's value is the *sum* of what the ranks hold:

# %%
tp = disttutor.launch("tensor_parallel", nproc=4, **LAUNCH)
for pl in tp.results[0]["placements"]:
    print(f"{pl:28}", " | ".join(f"rank {k}: {r['placements'][pl]}" for k, r in enumerate(tp.results[:2])), "| ...")

# %% tags=["proof", "nbval-check-output"]
print(check_tp_placements([r["placements"] for r in tp.results]))

# %% [markdown] id="md-11-18"
# `parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})` splits the first Linear's outputs (no communication) and the second's inputs (partial products, summed by one all-reduce). In backward, the column-split layer's input gradient is partial: one all-reduce.

# %% [markdown] id="md-11-49"
# Attention splits by **heads** the same way (q, k, v column-wise, the output projection row-wise). `CommDebugMode` counts the collectives, and both blocks are checked against the unsplit module:

# %%
for block in ("mlp", "attention"):
    r = tp.results[0][block]
    print(f"{block:9}: forward {r['forward_comms']}, backward {r['backward_comms']}; rank 0 holds "
          f"{r['local_shapes']}")
# forward: the row-wise layer's partial sums, one all-reduce; backward: one per column-wise layer
print(check_tp_blocks(tp.results))

# %% [markdown] id="md-11-19"
# ### A 2D mesh: FSDP × TP on 4 ranks
#
# Large jobs compose: TP inside a node (fast links, all-reduces in every block), FSDP across nodes. The program runs `parallelize_module` on `mesh["tp"]` and `fully_shard` on `mesh["dp"]` of `init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))`, 3 AdamW steps against one process. The first weight starts as its element indices, to show who stores what:

# %%
m2 = [r["mesh_2d"] for r in tp.results]
for rank, r in enumerate(tp.results):
    print(f"rank {rank} (dp, tp) = {tuple(r['mesh_2d']['coordinate'])}: stores {len(r['mesh_2d']['held'])} of "
          f"{m2[0]['weight_shape'][0] * m2[0]['weight_shape'][1]} elements of mlp[0].weight; "
          f"largest difference from one process {r['mesh_2d']['param_diff']:.1e}")
print(check_mesh_2d(m2))
print("placements of the 2D-sharded weights:", m2[0]["placements"])
viz.mesh_figure(tp.results)
plt.show()

# %% [markdown] id="md-11-20"
# **`_StridedShard(dim=0, sf=2)`**, in the placements above, is FSDP's `Shard(0)` after TP has split the same dimension. `ColwiseParallel` gave each TP rank a block of rows; `fully_shard` then split *each block* in two.

# %% [markdown] id="md-11-50"
# So dp rank 0's rows are `sf = 2` pieces, one in each TP block, not one slice. DTensor records that, so `full_tensor()` and DCP put the rows back in order. The rows each rank stores:

# %%
rows_of = {}
cols = m2[0]["weight_shape"][1]
for r in tp.results:
    rows = sorted({i // cols for i in r["mesh_2d"]["held"]})
    rows_of[tuple(r["mesh_2d"]["coordinate"])] = rows
    print(f"(dp, tp) = {tuple(r['mesh_2d']['coordinate'])}: rows {rows[0]}..{rows[-1]}")
dp0 = sorted(rows_of[(0, 0)] + rows_of[(0, 1)])
contiguous = dp0 == list(range(dp0[0], dp0[0] + len(dp0)))
print(f"dp rank 0 (both of its tp ranks) holds rows {dp0[:len(dp0) // 2][0]}..{dp0[:len(dp0) // 2][-1]} and "
      f"{dp0[len(dp0) // 2:][0]}..{dp0[len(dp0) // 2:][-1]}: {'one slice' if contiguous else 'two strided pieces'}")
assert not contiguous and "_StridedShard(dim=0, sf=2)" in m2[0]["placements"]["0.weight"]

# %% [markdown] id="md-11-21"
# Chapter 12 takes this further: TP written from scratch, with sequence, context and expert parallelism beside it.

# %% [markdown] id="md-11-51"
# ## 4. The article's outlook, checked
#
# The article's §11.2 lists five "future trends"; each box says what PyTorch ships today.
#
# <details><summary><b>The article says</b> 自动化并行, e.g. <code>torch.distributed.fsdp</code></summary>
#
# Today: FSDP is sharding, not automatic parallelism: you choose the units and the mesh (sections 1–2). FSDP2's `fully_shard` is the version used above.
# </details>
#
# <details><summary><b>The article says</b> 更高效的通信算法: 3D并行、张量并行</summary>
#
# Today: 3D (data × tensor × pipeline) and tensor parallelism are ways to split the work, not communication algorithms. They compose on an N-D `DeviceMesh` (section 3; pipelines, chapter 7).
# </details>
#
# <details><summary><b>The article says</b> 云原生 / Kubernetes</summary>
#
# Today: this lives outside PyTorch; chapter 5 generated a Kubeflow `PyTorchJob` manifest that starts `torchrun` in every pod.
# </details>
#
# <details><summary><b>The article says</b> 异构计算 (CPU, GPU, TPU)</summary>
#
# Today: one job mixing different accelerators is rare; offloading shards to CPU memory (FSDP2's `CPUOffloadPolicy`) is the common heterogeneous case.
# </details>

# %% [markdown] id="md-11-52"
# The article's best practices (§11.3: start small, monitor, pin versions, checkpoint and resume, optimise from measurements) are what chapters 0–10 did.

# %% [markdown] id="md-11-53"
# ### Federated averaging next to data parallelism
#
# The article's fifth trend, **federated learning** (FedAvg, McMahan et al., 2017), keeps the data with its owner. Each client trains *several steps* on its own data, and only the weights are averaged, once per round. The `fedavg` program runs both on 2 ranks, each owning half the data:

# %%
fed = disttutor.launch("fedavg", nproc=2, **LAUNCH).results[0]
print(f"FedAvg, 1 local step per round  vs centralised SGD: largest difference {fed['diff_one_step']:.1e}")
print(f"FedAvg, {fed['local_steps']} local steps per round vs centralised SGD: largest difference {fed['diff_k_steps']:.1e}")
print(f"all-reduce calls: FedAvg {fed['allreduces_fedavg']}, data parallel {fed['allreduces_data_parallel']} "
      f"(for the same {fed['rounds'] * fed['local_steps']} SGD steps)")
print("losses on all data:", {k: round(v, 4) for k, v in fed["loss"].items()})
print(check_fedavg(fed))

# %% [markdown] id="md-11-22"
# With one local step FedAvg *is* data parallelism (the average of `w − lr·g_r` is `w − lr·mean(g_r)`). With more, it communicates less but optimises something else: each client drifts toward its own data's optimum (the second difference above).

# %% [markdown] id="md-11-54"
# **What to read next**: the PyTorch FSDP2 and tensor-parallel tutorials; TorchTitan (FSDP2 × TP × PP × context parallelism composed); the ZeRO and Megatron-LM papers.
#
# ## What this chapter measured

# %%
for row in viz.memory_rows(by_world):
    if row["strategy"] in ("ddp", "zero1", "fsdp_scratch", "fsdp2"):
        tot = row["params"] + row["grads"] + row["optimizer"]
        pred = row["params_pred"] + row["grads_pred"] + row["optimizer_pred"]
        print(f"{row['ranks']} ranks, {row['strategy']:13}: fullest rank {tot:6d} bytes, calculator {pred:6d}")
print(f"TP (mlp, attention) and 2D mesh vs one process: max difference "
      f"{max(max(r[b]['out_diff'], r[b]['grad_diff']) for r in tp.results for b in ('mlp', 'attention')):.1e}, "
      f"{max(m['param_diff'] for m in m2):.1e}")
print(f"load average: {LOAD:.1f} at the start, {os.getloadavg()[0]:.1f} now")

# %% [markdown] id="md-11-23" tags=["takeaways"]
# ## Key takeaways
#
# * ZeRO-1 shards the optimizer states, ZeRO-2 the gradients too, ZeRO-3/FSDP the parameters too: FSDP's model states are 16/n bytes per parameter.
# * FSDP all-gathers parameters before use and reduce-scatters gradients after: 1.5 × DDP's bytes by the ring formula (2 × on gloo), in exchange for memory.
# * Tensor parallelism splits each layer's matrices; DTensor placements (`Shard`, `Replicate`, `Partial`) say who holds what.
# * A 2D mesh combines them: TP inside a node, FSDP across nodes — every result here compared with one process.
# * Federated averaging with one local step is data parallelism; with more it communicates less but optimises something else.

# %% [markdown] id="md-11-24" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 11.1 (predict, then run).** On **2 ranks**, what fraction of DDP's per-rank model-state bytes (parameters + gradients + optimizer states) does FSDP2 keep on its fullest rank? Write a number between 0 and 1 into `my_prediction`, then run the next cell.

# %% tags=["predict"]
my_prediction = None  # a number in [0, 1]: FSDP2 bytes / DDP bytes per rank, 2 ranks

# %%
import disttutor
from disttutor.viz import sharding as q1_viz

q1 = disttutor.launch("sharding", nproc=2, args={"steps": 1, "checkpoint": False}, stream=False, timeout=280)
q1_rows = {r["strategy"]: r for r in q1_viz.memory_rows({2: q1.results})}
total = {s: q1_rows[s]["params"] + q1_rows[s]["grads"] + q1_rows[s]["optimizer"] for s in ("ddp", "fsdp2")}
measured = total["fsdp2"] / total["ddp"]
reveal("11.q1", my_prediction, measured, rel_tol=0.1,  # 10 %: padding and uneven shards of a small model
       explain=f"DDP's rank holds {total['ddp']} bytes of model states, FSDP2's fullest rank {total['fsdp2']}: "
       f"{measured:.3f}. Sharding over 2 ranks halves parameters, gradients and AdamW's moments alike"
       + ("; shards padded to equal sizes keep a small model a little above 1/2." if measured > 0.5 + 1e-3 else
          " — here exactly, since every parameter's first dimension divides by 2 and no shard needs padding."))

# %% [markdown] id="md-11-25" tags=["question"]
# **Question 11.2.** A 1-billion-parameter model with AdamW in fp32 on 8 ranks: how many bytes of model states does each rank hold under DDP, ZeRO-1, ZeRO-2 and FSDP?

# %%
answer("11.q2")

# %% [markdown] id="md-11-26" tags=["question"]
# **Question 11.3.** FSDP all-gathers parameters in forward and reduce-scatters gradients in backward. Why does it send about 1.5 × DDP's bytes (ring formula, native reduce-scatter), and how can you get it back to DDP's?

# %%
answer("11.q3")

# %%
disttutor.course.chapters.glossary(11)
