# %% [markdown]
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

# %% [markdown] tags=["opening"]
# **After this chapter you can**
# * shard optimizer states, gradients and parameters (ZeRO-1, FSDP) — from scratch (Exercises 11.1, 11.2) and with FSDP2's `fully_shard`;
# * measure the memory each rank really holds and compare it with chapter 1's calculator;
# * split layers with tensor parallelism (`parallelize_module`, DTensor placements) and combine it with FSDP on a 2D mesh.

# %%
import os

import matplotlib.pyplot as plt
import torch

import disttutor
from disttutor.checks.sharding import BF16_RTOL, FP32_RTOL, check_fsdp, check_zero1
from disttutor.viz import sharding as viz

print(f"torch {torch.__version__}, {disttutor.cores()} usable CPU cores, GPUs: {torch.cuda.device_count()}")
LOAD = os.getloadavg()[0]
print(f"load average now: {LOAD:.1f} (on {disttutor.cores()} cores)")
LAUNCH = dict(stream=False, timeout=280)

# %% [markdown]
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

# %% [markdown]
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
#   tied to the embedding); the scratch version is one unit, the whole model. How much is full at
#   once is not measured here; a real model makes each transformer block its own unit so that only
#   a few blocks' weights are gathered at a time.
#
# Every strategy computes the same training. Checked, on every rank of both runs:

# %%
for n, results in by_world.items():
    for rank, res in enumerate(results):
        for name, s in res["strategies"].items():
            tol = BF16_RTOL if name.endswith("bf16") else FP32_RTOL  # why these: disttutor/checks/sharding.py
            assert s["update_diff"] <= tol, (n, rank, name, s["update_diff"])
        assert res["strategies"]["fsdp2"]["vs_ddp"] < 1e-5  # fp32 reordering only (params are O(0.1..1))
        assert res["checkpoint"]["reloaded_equal"] and res["checkpoint"]["optimizer_equal"]
        assert res["strategies"]["ddp"]["measured"] == {k: int(v) for k, v in res["strategies"]["ddp"]["predicted"].items()}
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

# %% [markdown]
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

# %% [markdown]
# ## Exercise 11.2 — FSDP from scratch
#
# Write `FSDP(module, compute_dtype=None)`, an `nn.Module`: flatten the trainable parameters into
# one fp32 vector, pad it to a multiple of the world size, keep only your slice as an
# `nn.Parameter` (the master shard: the optimiser, built on the parameters that require grad, sees
# only it). In `forward` all-gather the shards in `compute_dtype`, run the module on views of the
# full vector (`torch.func.functional_call`); in backward reduce-scatter the gradient and average
# it. Add `full_parameters()`: every parameter, whole, by name. The checker trains with SGD first
# (AdamW would not notice a gradient summed instead of averaged: Adam divides by the gradient's own
# size), then AdamW in fp32 and bf16.

# %%
card("11.2")

# %%
class FSDP(torch.nn.Module):
    def __init__(self, module, compute_dtype=None):
        super().__init__()
        raise NotImplementedError("Exercise 11.2: flatten, pad and shard the trainable parameters")

    def forward(self, *inputs):
        raise NotImplementedError("Exercise 11.2: all-gather, functional_call, reduce-scatter in backward")

    def full_parameters(self):
        raise NotImplementedError("Exercise 11.2: all-gather the fp32 shards, return {name: tensor}")


# %%
hint("11.2")


# %%
print(check_fsdp(FSDP))

# %% [markdown]
# ## 2. Tensor parallelism: split the layers, not the batch
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

# %% tags=["nbval-check-output"]
P = [r["placements"] for r in tp.results]
assert [p["Shard(0)"] for p in P] == [[[4.0 * r + c for c in range(4)]] for r in range(4)]      # row r
assert [p["Shard(1)"] for p in P] == [[[4.0 * i + r] for i in range(4)] for r in range(4)]     # column r
assert all(p["Partial() -> full_tensor()"] == [[10.0] * 2] * 2 for p in P)  # 1+2+3+4: the pending sum
print("placements checked: Shard(0) = rows, Shard(1) = columns, Partial = a pending sum")

# %% [markdown]
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
    for res in tp.results:
        # fp32, the same products summed in another order across ranks: ulps of values ~1
        assert res[block]["out_diff"] < 1e-5 and res[block]["grad_diff"] < 1e-5, res[block]
        assert res[block]["forward_comms"] == {"all_reduce": 1}  # the row-wise layer's partial sums
    # backward: one all-reduce per column-wise layer (its input gradient is partial on each rank)
    assert r["backward_comms"] == {"all_reduce": 1 if block == "mlp" else 3}, r["backward_comms"]
print("tensor parallel = the unsplit module (outputs and gradients): forward one all-reduce per block;")
print("backward one per column-split layer -- q, k, v are 3 layers here (Megatron fuses them into one)")

# %% [markdown]
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
assert all(m["param_diff"] < 1e-5 for m in m2)  # fp32 reordering only, as above
held = sorted(i for m in m2 for i in m["held"])
assert held == list(range(m2[0]["weight_shape"][0] * m2[0]["weight_shape"][1]))  # each element exactly once
print("placements of the 2D-sharded weights:", m2[0]["placements"])
viz.mesh_figure(tp.results)
plt.show()

# %% [markdown]
# ## 3. Where the field stands — the article's outlook, corrected
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
assert fed["diff_one_step"] < 1e-6            # one local step: averaging weights = averaging gradients
assert fed["diff_k_steps"] > 100 * max(fed["diff_one_step"], 1e-9)  # several: clients drift apart
assert fed["allreduces_fedavg"] * fed["local_steps"] == fed["allreduces_data_parallel"]

# %% [markdown]
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

# %% [markdown] tags=["takeaways"]
# ## Key takeaways
#
# * ZeRO-1 shards the optimizer states, ZeRO-2 the gradients too, ZeRO-3/FSDP the parameters too: each rank's model states shrink towards 16/n bytes per parameter.
# * FSDP all-gathers parameters before use and reduce-scatters gradients after: about 1.5 × DDP's bytes, in exchange for memory.
# * Tensor parallelism splits each layer's matrices; DTensor placements (`Shard`, `Replicate`, `Partial`) say who holds what.
# * A 2D mesh combines them: TP inside a node, FSDP across nodes — every result here compared with one process.
# * Federated averaging with one local step is data parallelism; with more it communicates less but optimises something else.

# %% [markdown] tags=["question"]
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

# %% [markdown] tags=["question"]
# **Question 11.2.** A 1-billion-parameter model with AdamW in fp32 on 8 ranks: how many bytes of model states does each rank hold under DDP, ZeRO-1, ZeRO-2 and FSDP?

# %%
answer("11.q2")

# %% [markdown] tags=["question"]
# **Question 11.3.** FSDP all-gathers parameters in forward and reduce-scatters gradients in backward. Why is its traffic about 1.5 × DDP's, and how can you get it back to DDP's?

# %%
answer("11.q3")

# %%
disttutor.course.chapters.glossary(11)
