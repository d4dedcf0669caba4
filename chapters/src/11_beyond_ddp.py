# %% [markdown] id="md-11-01"
# # Chapter 11 — Beyond DDP: ZeRO and FSDP, tensor parallelism, a 2D mesh, and where the field stands
#
# *Article §11: summary and outlook.*
#
# The article ends by naming things to come: FSDP ("fully sharded data parallel"), 3D and tensor
# parallelism, cloud-native training, heterogeneous hardware, federated learning. Most of them
# ship in PyTorch today and run on CPU ranks with gloo, so this chapter runs them:
#
# 1. **sharding** — ZeRO-1 and FSDP written from scratch (Exercises 11.1 and 11.2), then torch's
#    FSDP2 `fully_shard`, all on the same model, with the memory each rank *really* holds next to
#    chapter 1's calculator, and every result compared with one process;
# 2. **tensor parallelism** — DTensor placements, `parallelize_module` on an MLP and an attention
#    block, the collectives counted, and a 2D (FSDP × TP) mesh;
# 3. **the outlook, corrected**, with a federated-averaging round next to data parallelism.

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
# Chapter 1's calculator: AdamW in fp32 costs **16 bytes per parameter** — 4 for the weight, 4 for
# its gradient, 8 for Adam's two moments — and plain data parallelism keeps *all* of it on every
# rank. ZeRO (Rajbhandari et al., 2020) removes the redundancy in stages:
#
# | | weights | gradients | optimiser state | how |
# |---|---|---|---|---|
# | DDP | full | full | full | all-reduce gradients |
# | ZeRO-1 | full | full | **1/n** | each rank steps only the parameters it owns, then **broadcasts** them |
# | ZeRO-2 | full | **1/n** | 1/n | gradients **reduce-scattered** instead of all-reduced |
# | ZeRO-3 = FSDP | **1/n** | 1/n | 1/n | weights **all-gathered** when a layer runs, freed after |
#
# `disttutor/scratch/zero1.py` and `disttutor/scratch/fsdp.py` are the from-scratch references
# (short; each distributed subtlety commented). The model everyone trains,
# `disttutor.sharding.model.tiny_lm`, has the traps of a real language model: the output layer's weight
# **tied** to the input embedding, a **frozen** positional embedding, a LayerNorm.
#
# One program, `disttutor/programs/sharding.py`, trains it on the same ranks five ways — DDP,
# ZeRO-1 (scratch, with DDP averaging the gradients), FSDP scratch in fp32 and with **bf16**
# compute and communication, and torch's **FSDP2** — 3 AdamW steps each, and compares every result
# with one process trained on the full batches (the bf16 run against one process applying the same
# casts). Then it saves FSDP2's sharded model and optimiser with chapter 10's `disttutor.lm.checkpoint`
# (`torch.distributed.checkpoint` underneath) and reloads both into a fresh copy.

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
# What the measurement shows that the formula does not:
#
# * **ZeRO-1 is coarse.** It shards by *whole parameters* (as torch's `ZeroRedundancyOptimizer`
#   does): the 64×32 embedding is one tensor, so one rank gets its whole Adam state and is above
#   the calculator's `1/n`. On a real model with thousands of tensors the imbalance averages out.
# * **FSDP scratch pads and keeps frozen weights whole.** Its flat shard is padded to equal sizes,
#   and the frozen positional embedding stays on every rank (no gradient, no state to share).
#   FSDP2 shards every tensor, frozen ones too.
# * The calculator ignores the transient full weights FSDP gathers for a unit's forward and
#   backward. This program's FSDP2 has two units: `fully_shard(base.mlp)`, then `fully_shard(base)`
#   for the root (the embeddings, LayerNorm and the head, kept together because the head's weight is
#   tied to the embedding); the scratch version is one unit, the whole model. A real model makes each
#   transformer block its own unit, so that only a few blocks' weights are full at a time: section 2
#   does that and measures it.
#
# Every strategy computes the same training. Checked, on every rank of both runs:

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
# The bf16 runs differ from one process far more than the fp32 ones (the errors above): bf16 keeps 7
# fraction bits (8 significant bits with the implicit one), the gradients are summed in a different
# order than in one process, and AdamW may flip the sign of an update whose gradient is near zero.
# That is why the comparison is the **whole update as one vector** (its relative error); the last
# lines above name the parameter with the largest element-wise error in each bf16 run and compare
# the two. The checkpoint holds one `.distcp` file per rank plus DCP's `.metadata` (every rank saves only
# its shards), and chapter 10's `meta.json` and per-rank RNG states — the same code saves a DDP replica
# and an FSDP2 shard.
#
# ## Exercise 11.1 — ZeRO-1 from scratch
#
# Write `ZeroOne(params, optimizer_class, **defaults)`, a `torch.optim.Optimizer` (the shape of
# `torch.distributed.optim.ZeroRedundancyOptimizer`): each rank owns some parameters, its
# `self.optim = optimizer_class(owned, **defaults)` holds state for those only; `step()` steps them
# and **broadcasts** every parameter from its owner. Gradients arrive already averaged (DDP's job).
# The checker trains `tiny_lm` with AdamW (weight decay on), compares with one process after each
# step, and adds up the optimiser state over the ranks: it must be stored exactly once.
# The `hint("11.1")` cell under the stub gives a nudge.

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
# ## 2. FSDP2 in full: the code you write, its communication and its memory, measured
#
# **FSDP** (fully sharded data parallel; ZeRO stage 3) keeps only a shard of every weight on each rank
# and gathers a **unit**'s full weights just before that unit runs. The unit is the practitioner's one
# real decision. `disttutor/programs/fsdp2.py` trains `disttutor.sharding.blocks.BlockLM` — an
# embedding, four residual blocks, a final LayerNorm and an output layer tied to the embedding — with
# the lines torchtitan and the PyTorch tutorials write: **`fully_shard` on every block, then on the
# root**:

# %%
from disttutor.course.source import show_code

show_code("disttutor.programs.fsdp2", "fully_shard")

# %% [markdown] id="md-11-07"
# After these calls every parameter is a **DTensor** (section 3 shows placements on real ranks):
# `Shard(dim=0)` over the 1-D mesh, so each of 2 ranks holds half of every weight's rows. Each
# `fully_shard(block)` installs hooks on that block: *pre-forward* all-gathers the block's shards
# into full weights, *post-forward* frees them again (that is `reshard_after_forward=True`, the
# default), *pre-backward* gathers them once more, and when backward has the block's gradients
# *post-backward* **reduce-scatters** them (each rank receives the sum of its own shard's gradient,
# divided by the world size) and frees the full weights. The root unit holds what is left: the
# embeddings, the final norm and the tied head — a tied weight must live in one unit. One launch
# on 2 ranks measures everything in this section:

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
# ### 2.1 Communication, measured: one all-gather per unit forward and backward, one reduce-scatter
#
# The program profiles one step with `torch.profiler` (`record_shapes=True`) and reads the trace
# the way chapter 9 does: FSDP2 names its regions (`FSDP::all_gather (blocks.0)`,
# `FSDP::post_backward_reduce (blocks.0)`), the c10d operator inside each one carries its tensors'
# sizes, and gloo's own thread records when the bytes really move
# (`disttutor.sharding.comm_trace`). **Prefetching** means issuing the *next* unit's all-gather
# before the current unit computes, so the transfer can hide behind the compute. FSDP2 prefetches
# one unit in backward by default; forward prefetching is opt-in. Both conditions, as the program
# sets them:

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
# Read the figure from the left: in forward, `F0`..`F3` compute one block each, every one after its
# blue all-gather; in backward (shaded blue), every block's gradient is reduce-scattered (red) when
# backward leaves it. The order check above is the difference prefetching makes: with it, block 2's
# all-gather is issued *before* block 3's reduce-scatter, so it can run while block 3 still computes.
# Gloo runs a collective on its own thread, so the trace shows a prefetched all-gather overlapping the
# compute even on CPU ranks; whether the step gets faster depends on a free core for that thread
# (on this machine, with 2 ranks sharing its cores: the times printed under the figure). On GPUs the all-gather runs on a
# separate CUDA stream, and this overlap is what makes FSDP's extra communication affordable.
#
# **Bytes per step.** Let *P* be the parameter bytes (fp32: 4 per parameter). DDP all-reduces every
# gradient once: payload *P*. FSDP all-gathers every unit in forward and again in backward, and
# reduce-scatters every gradient: payload **3P**. What a rank *sends* in the ring algorithm is
# (n−1)/n of an all-gather's or reduce-scatter's payload and 2(n−1)/n of an all-reduce's (a
# reduce-scatter followed by an all-gather, chapter 2) — so FSDP sends **3/2 = 1.5×** what DDP
# sends. The program counts the payload from the trace and the bytes each rank really handed to its
# sockets during an unprofiled step (`/proc/self/io`, Linux):

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
# Measured and formula agree to the byte in the payload and within gloo's headers on the wire — with
# one surprise the trace explains: **gloo has no native reduce-scatter** and runs it as an all-reduce
# of the whole gradient, so on CPU ranks FSDP sends twice DDP's bytes, not 1.5×. NCCL (GPUs) has a
# native ring reduce-scatter: there the 1.5× of the formula holds. FSDP buys its memory saving
# with communication; at large scale that is a good trade, because it overlaps with compute and the
# memory would not fit otherwise.
#
# ### 2.2 Peak memory per rank: `reshard_after_forward`, and activation checkpointing
#
# `reshard_after_forward=True` frees each block's full weights right after its forward, so they
# must be gathered again in backward (the second all-gather above). `False` keeps them from forward
# to backward: no second all-gather, more memory — ZeRO-2-like for the weights. torch's
# `FSDPMemTracker` (`torch.distributed._tools`) counts every tensor by what it is, on CPU too; the
# program ran one step under it in three configurations. **Activation checkpointing**
# (`torch.utils.checkpoint`, `use_reentrant=False`, wrapped around each block in
# `BlockLM.forward`) keeps only each block's input and recomputes its activations in backward:

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
# On a real model the blocks dominate: a 32-block model resharded keeps one block's weights (1/32 of the
# blocks') full at a time instead of all of them, which is why `reshard_after_forward=True` is the default. Common
# practice (torchtitan) sets it `False` for the *last* block only: backward needs that block first,
# so freeing and re-gathering it would be wasted bytes. Activation checkpointing trades compute (one
# more forward per block) for activation memory, the largest term at long sequence lengths.
#
# ### 2.3 `MixedPrecisionPolicy`
#
# `fully_shard(..., mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))`
# keeps the **sharded** parameters, their gradients and the optimiser state in fp32 (the *master
# weights*), casts each shard to bf16 **before** the all-gather (half the bytes on the wire, checked
# above), computes in bf16, and reduce-scatters the gradients in `reduce_dtype`. What the program saw:

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
# On CPU ranks bf16 saves communication bytes but rarely time: most CPUs have no fast bf16 matrix
# units, so the casts cost more than the matmuls gain (the plain script below therefore defaults to
# fp32). On GPUs bf16 compute is several times faster than fp32, and this policy is the default in
# practice.
#
# ### 2.4 A sharded checkpoint: DCP with `get_state_dict` / `set_state_dict`
#
# Chapter 10 saved with `torch.distributed.checkpoint` (DCP); with FSDP2 it matters more, because no
# rank holds the whole model. The state-dict API gives **sharded** state dicts (DTensors; optimiser
# state keyed by parameter name), DCP writes each rank's shards in parallel:

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
# `disttutor/plain/fsdp2.py` is all of the above that you would copy into your own project, torch
# only: `fully_shard` per block then the root, a few AdamW steps, a DCP save and reload. It runs
# as `torchrun --nproc-per-node 2 fsdp2.py` on CPU (gloo) and unchanged on GPUs (NCCL):

# %%
show_code("disttutor.plain.fsdp2")

# %% [markdown] id="md-11-14"
# ### 2.6 FSDP1's flat parameter vs FSDP2's per-parameter shards
#
# Torch's first FSDP (`FullyShardedDataParallel`, "FSDP1") and this course's scratch FSDP
# (`disttutor/scratch/fsdp.py`, Exercise 11.2) **flatten** a unit's parameters into one
# `FlatParameter` and shard that vector. FSDP2 (`fully_shard`) shards **every parameter on its own**,
# as a DTensor along dim 0. The program wrapped the same small model both ways and listed
# `named_parameters()`, then froze `blocks.0.up.weight` *after* wrapping (`requires_grad_(False)`,
# the usual fine-tuning move) and took one SGD step:

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
# * **Inspecting `model.parameters()`.** With a flat parameter you see one anonymous 1-D shard; the
#   names, shapes and per-weight statistics (gradient norms, weight decay groups by name) are gone
#   until you ask the wrapper to gather them (FSDP1's `summon_full_params`). With FSDP2 every
#   parameter keeps its name and its global shape; `p.to_local()` is this rank's rows,
#   `p.full_tensor()` gathers it.
# * **Freezing one weight.** In the flat design `requires_grad` belongs to the whole flat vector: the
#   frozen weight above *kept training*, silently. FSDP1 therefore requires every parameter of a unit
#   to share `requires_grad` (or `use_orig_params=True`, which fakes per-parameter views on the flat
#   storage). FSDP2 freezes exactly that weight: it got no gradient and did not move.
# * **Why the flat design existed**: one all-gather of one contiguous buffer per unit is the fastest
#   communication. FSDP2 keeps that — it copies the unit's shards into one buffer before each
#   all-gather (`all_gather_copy_in`, inside a profiler trace's `FSDP::all_gather` regions) and the
#   gathered buffer back out into each parameter's full tensor after it (the `FSDP::all_gather_copy_out`
#   regions) — while the user sees
#   ordinary, named, DTensor parameters. That is why FSDP2 composes with tensor parallelism on a 2D
#   mesh (section 3) and with DCP, and FSDP1 is deprecated.
# * torch's FSDP1 needs an accelerator (the line above), so the flat view here is the course's own.

# %% [markdown] id="md-11-16"
# ## Exercise 11.2 — FSDP from scratch (the flat design)
#
# Now build the flat-parameter design yourself, one unit (the whole module). The skeleton below has
# everything but the communication: `__init__` flattens the *trainable* parameters into one fp32
# vector, pads it to a multiple of the world size and keeps this rank's slice as the only
# `nn.Parameter` (the master shard: the optimiser sees only it); `_Unit`, a `torch.autograd.Function`,
# is the unit's boundary — its forward calls your `gather` before the module runs, its backward calls
# your `reduce_scatter` when backward reaches the unit; `forward` runs the module on views of the
# gathered vector (`torch.func.functional_call`). You write three methods:
#
# 1. `free(params)` — after sharding, the full copies must stop being trainable **and** stop taking
#    memory;
# 2. `gather(shard, dtype)` — every rank's shard, in rank order, as one vector in `dtype`
#    (`dist.all_gather_single`; older code calls it `all_gather_into_tensor`, deprecated in torch 2.13);
# 3. `reduce_scatter(grad_full)` — the gradient of the whole padded vector → this rank's slice of
#    the **average** over ranks, in fp32 (`dist.reduce_scatter_single`; formerly `reduce_scatter_tensor`).
#
# The checker trains `tiny_lm` (tied embedding, frozen positional embedding) with SGD first (AdamW
# would not notice a gradient summed instead of averaged: Adam divides by the gradient's own size),
# then AdamW in fp32 and bf16, against one process; it also adds up what every rank stores.

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
# FSDP still runs every layer whole on every rank (after gathering it). **Tensor parallelism**
# (Megatron-LM, Shoeybi et al. 2019) splits each layer's matrices, so no rank ever holds a whole
# layer. PyTorch expresses it with **DTensor**: a tensor plus a *placement* on a device mesh.
# `disttutor/programs/tensor_parallel.py` shows the placements on 4 real ranks — a 4×4 tensor
# `0..15`, and a `Partial()` tensor whose value is the *sum* of what the ranks hold:

# %%
tp = disttutor.launch("tensor_parallel", nproc=4, **LAUNCH)
for pl in tp.results[0]["placements"]:
    print(f"{pl:28}", " | ".join(f"rank {k}: {r['placements'][pl]}" for k, r in enumerate(tp.results[:2])), "| ...")

# %% tags=["proof", "nbval-check-output"]
print(check_tp_placements([r["placements"] for r in tp.results]))

# %% [markdown] id="md-11-18"
# `parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})` splits the
# first Linear's output features (each rank computes some hidden units, no communication) and the
# second's input features (each rank's partial product must be **summed**: one all-reduce). In
# backward it is the mirror: the column-split layer's input gradient is partial, one all-reduce.
# Attention splits by **heads** the same way (q, k, v column-wise, output projection row-wise).
# Both are checked against the unsplit module, and `CommDebugMode` counts what ran:

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
# Large jobs compose: TP inside a node (fast links, an all-reduce per block), FSDP or DP across
# nodes. `init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))`, `parallelize_module` on
# `mesh["tp"]`, `fully_shard` on `mesh["dp"]`: 3 AdamW steps, compared with one process on the
# full batch. To see who stores what, the first weight started as its own element indices:

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
# **`_StridedShard(dim=0, sf=2)`**, in the placements just printed, is what FSDP's `Shard(0)`
# becomes when tensor parallelism has split the same dimension first. `ColwiseParallel` gave each
# TP rank a contiguous block of `mlp[0].weight`'s rows; `fully_shard` on the `dp` mesh dimension then
# split *each TP rank's block* in two. Seen from the dp dimension alone, dp rank 0's rows are not
# one contiguous slice of the global weight but `sf = 2` pieces (one inside each TP block), a
# *strided* shard — and DTensor records that, so that `full_tensor()` and DCP put the rows back in
# the right order. The rows each rank stores, from the element indices it reported:

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
# Chapter 12, *Splitting one layer: tensor, sequence, context and expert parallelism*, takes tensor
# parallelism further: written from scratch, with sequence, context and expert parallelism beside it.
#
# ## 4. Where the field stands — the article's outlook, corrected
#
# The article's §11.2 lists five "future trends". Checked against PyTorch today:
#
# | the article says | today |
# |---|---|
# | 1. 自动化并行, e.g. `torch.distributed.fsdp` | FSDP is **sharding**, not automatic parallelisation: you choose the units and the mesh. It ships (FSDP1 since 1.11; **FSDP2 `fully_shard`** on DTensor, used above). Automatic planners exist in research and in compilers, not as PyTorch's default. |
# | 2. 更高效的通信算法: 3D并行、张量并行 | 3D and tensor parallelism are **ways to split the work**, not communication algorithms. "3D" = data × tensor × pipeline; today's large jobs add **context (sequence) parallelism** and expert parallelism, composed on an N-D `DeviceMesh`. Shipped: DTensor, `parallelize_module`, `torch.distributed.pipelining` (chapter 7), `torch.distributed.checkpoint`, elastic `torchrun` (chapters 5, 10). |
# | 3. 云原生 / Kubernetes | Shipped outside PyTorch: the Kubeflow Training Operator's `PyTorchJob` (`kubeflow.org/v1`) runs one pod per node and injects `MASTER_ADDR`, `MASTER_PORT` and `PET_NODE_RANK`; the manifest chapter 5 generated (`disttutor.multinode.cluster.pytorchjob_manifest`) passes them to `torchrun` as `--master-addr`/`--master-port`/`--node-rank` — a static rendezvous in which the operator numbers the pods. (Kubeflow Trainer v2's `TrainJob` is the successor API; not generated here.) |
# | 4. 异构计算 (CPU, GPU, TPU) | PyTorch runs on many device types (CUDA, ROCm, MPS, XPU, TPU through PyTorch/XLA), but one job mixing different accelerators is still rare; CPU offload of optimiser state (FSDP's `CPUOffloadPolicy`) is the common heterogeneous case. |
# | 5. 联邦学习 | A different problem, not a kind of data parallelism — below. |
#
# The article's "best practices" (§11.3) — start small, monitor, pin versions, checkpoint and
# resume, optimise from measurements — are what chapters 0–10 did; fault tolerance is chapter 10.
#
# ### Federated averaging next to data parallelism
#
# In **federated learning** (McMahan et al., 2017) the data stays with its owner: each client
# trains *several steps* on its own data, and only the weights are averaged, once per round.
# `disttutor/programs/fedavg.py` runs both on 2 ranks, each owning half the data:

# %%
fed = disttutor.launch("fedavg", nproc=2, **LAUNCH).results[0]
print(f"FedAvg, 1 local step per round  vs centralised SGD: largest difference {fed['diff_one_step']:.1e}")
print(f"FedAvg, {fed['local_steps']} local steps per round vs centralised SGD: largest difference {fed['diff_k_steps']:.1e}")
print(f"all-reduce calls: FedAvg {fed['allreduces_fedavg']}, data parallel {fed['allreduces_data_parallel']} "
      f"(for the same {fed['rounds'] * fed['local_steps']} SGD steps)")
print("losses on all data:", {k: round(v, 4) for k, v in fed["loss"].items()})
print(check_fedavg(fed))

# %% [markdown] id="md-11-22"
# With one local step FedAvg *is* data parallelism (the average of `w − lr·g_r` is
# `w − lr·mean(g_r)`). With more, it communicates `local_steps` times less but is no longer the
# same optimisation: each client walks toward its own data's optimum (client drift), and real
# clients have unequal, differently distributed data, drop out, and must not reveal their data
# (secure aggregation, differential privacy). Data parallelism's promise — *exactly* the
# single-process result — holds only for the first row.
#
# **What to read next**: the PyTorch FSDP2 and tensor-parallel tutorials; *TorchTitan* (a
# reference for composing FSDP2 × TP × PP × context parallelism with `torch.distributed`); the
# ZeRO and Megatron-LM papers; McMahan et al. for FedAvg.
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
# * ZeRO-1 shards the optimizer states, ZeRO-2 the gradients too, ZeRO-3/FSDP the parameters too: each rank's model states shrink towards 16/n bytes per parameter.
# * FSDP all-gathers parameters before use and reduce-scatters gradients after: about 1.5 × DDP's bytes, in exchange for memory.
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
# **Question 11.3.** FSDP all-gathers parameters in forward and reduce-scatters gradients in backward. Why is its traffic about 1.5 × DDP's, and how can you get it back to DDP's?

# %%
answer("11.q3")

# %%
disttutor.course.chapters.glossary(11)
