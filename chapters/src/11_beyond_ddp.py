# %% [markdown] id="md-11-01"
# # Chapter 11 — Beyond DDP: ZeRO and FSDP
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
# * shard a model with FSDP2's `fully_shard` (also as HSDP), and build ZeRO-1 and FSDP yourself (Exercises 11.1-11.3);
# * measure the memory each rank really holds and compare it with chapter 1's calculator;
# * read FSDP's communication (all-gathers, reduce-scatters, prefetching) and its bytes against DDP's.

# %%
import os
import tempfile

import matplotlib.pyplot as plt
import torch

import disttutor
from disttutor.checks.claims.ch11 import (check_fsdp2_matches_one_process, check_fsdp_bytes, check_fsdp_checkpoint,
                                          check_fsdp_collectives, check_fsdp_memory, check_flat_vs_per_param,
                                          check_mixed_precision, check_plain_fsdp2, check_strategies_agree)
from disttutor.checks.hsdp import check_hsdp
from disttutor.checks.sharding import check_fsdp, check_zero1
from disttutor.course.problems import problem
from disttutor.course.puzzles import puzzle
from disttutor.viz import sharding as viz

WORK = tempfile.mkdtemp(prefix="ch11-")
os.chdir(WORK)  # the script this chapter writes goes to a scratch folder
LAUNCH = dict(stream=False, timeout=280)
print(f"torch {torch.__version__}, GPUs: {torch.cuda.device_count()}")

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
#
# So on *n* ranks FSDP keeps 16/*n* bytes per parameter.

# %% [markdown] id="md-11-05"
# ### FSDP2 as you write it
#
# PyTorch's FSDP2 is one function, `fully_shard`. The script below is a whole FSDP training job:
#
# 1. `init_device_mesh(device.type, (world,))` arranges the ranks in a 1-D *mesh*, the group FSDP shards over;
# 2. `fully_shard(block)` for every block makes each block a *unit*: its weights are gathered just before it runs and freed after;
# 3. `fully_shard(model)` last: the root unit takes everything left (embedding, head);
# 4. the optimizer is built **after** sharding: `fully_shard` replaced each parameter with a sharded one, and the optimizer keeps state for this rank's shards only.
#
# The training loop is unchanged: the hooks `fully_shard` installed all-gather in forward and backward and reduce-scatter in backward; `opt.step()` updates the local shards.

# %%
%%writefile fsdp2_train.py
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, h):
        return h + self.down(nn.functional.gelu(self.up(self.norm(h))))


class LM(nn.Module):
    def __init__(self, vocab=64, dim=64, n_blocks=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(n_blocks))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        h = self.emb(tokens)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


if torch.cuda.is_available():                  # one GPU per process, NCCL
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device, backend = torch.device("cuda", local_rank), "nccl"
else:                                          # CPU processes, gloo
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh(device.type, (world,))   # (1) the ranks FSDP shards over

torch.manual_seed(0)                           # the same initial weights on every rank
model = LM().to(device)
for block in model.blocks:
    fully_shard(block, mesh=mesh)              # (2) one unit per block
fully_shard(model, mesh=mesh)                  # (3) the root unit: embedding and head
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)   # (4) after sharding: this rank's shards only

g = torch.Generator().manual_seed(rank)        # each rank its own batch (one, reused: the loss must fall)
tokens = torch.randint(0, 64, (8, 16), generator=g).to(device)
for step in range(3):
    logits = model(tokens[:, :-1])             # each block's weights all-gathered as it runs
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()                            # gathered again, gradients reduce-scattered
    opt.step()
    opt.zero_grad()
    if rank == 0:
        print(f"step {step}: loss {loss.item():.4f}")
w = model.blocks[0].up.weight
local = [None] * world
dist.all_gather_object(local, tuple(w.to_local().shape))   # every rank's part, printed once by rank 0
if rank == 0:
    print(f"blocks.0.up.weight: {type(w).__name__} {tuple(w.shape)}, local parts {local}")
dist.destroy_process_group()

# %% [markdown] id="md-11-07"
# In a terminal you would type the `torchrun` line this cell prints. The cell runs that job on 2 ranks and shows what they printed:

# %%
script = disttutor.launch("fsdp2_train.py", nproc=2, **LAUNCH)
print(script.command)
print("\n".join(ln for ln in script.logs[0] if ln.startswith(("step", "blocks"))))

# %% tags=["proof"]
print(check_plain_fsdp2(script.logs))

# %% [markdown] id="md-11-13"
# Each weight is now a **DTensor** (a tensor plus how it is placed over the mesh; chapter 12 covers placements): its global shape is the model's, and each of the 2 ranks holds half of its rows.

# %% [markdown] id="md-11-28"
# How much memory does that save, and what do the other ZeRO stages keep? The `sharding` program trains one model, `tiny_lm`, five ways on the same ranks: DDP, ZeRO-1, FSDP from scratch in fp32 and in bf16, and torch's FSDP2. Each runs 3 AdamW steps and is compared with one process. `tiny_lm` has a language model's traps: an output weight **tied** to the input embedding (counted once) and a **frozen** positional embedding (no gradient, no optimizer state).

# %%
runs = disttutor.launch("sharding", nproc=2, **LAUNCH)
print(runs.command)
by_world = {2: runs.results}

# %% tags=["schematic"]
from disttutor.viz.zero_stages import zero_stages_figure

zero_stages_figure(runs.results[0]["n_params"], runs.results[0]["n_trainable"], world=len(runs.results))
plt.show()

# %% [markdown] id="md-11-56" tags=["caption"]
# *Figure: the ZeRO table drawn for this run's model (idealised, equal shards): filled bytes are stored on that rank, outlines are not.*

# %%
print(f"{'strategy':18} {'params':>7} {'grads':>7} {'optim':>7}   calculator (bytes, fullest rank)")
for row in viz.memory_rows(by_world):
    print(f"{row['strategy']:18} {row['params']:>7} {row['grads']:>7} {row['optimizer']:>7}"
          f"   {row['params_pred']:>7} {row['grads_pred']:>7} {row['optimizer_pred']:>7}")

# %%
viz.memory_figure(by_world)
plt.show()

# %% [markdown] id="md-11-57" tags=["caption"]
# *Figure: each strategy's measured bytes on its fullest rank, stacked by part, against chapter 1's calculator (black tick).*

# %% [markdown] id="md-11-04"
# The table above, row by row against the calculator's columns:
#
# * **ZeRO-1 is coarse.** It gives each *whole tensor* one owner (as torch's `ZeroRedundancyOptimizer` does), so the rank owning the 64×32 embedding holds more than `1/n` of the state. With thousands of tensors the imbalance averages out.
# * **The scratch FSDP pads and keeps frozen weights whole** (no gradient, no state to share); FSDP2 shards every tensor, frozen ones too.

# %% [markdown] id="md-11-29"
# This program's FSDP2 has two units: `fully_shard(base.mlp)`, then `fully_shard(base)` for the rest (a tied weight must stay in one unit). The calculator ignores the full weights a unit holds while it runs; section 2 measures them.

# %% [markdown] id="md-11-30"
# Every strategy computes the same training, on every rank. In bf16 (8 significant bits) the error is larger than in fp32, so the check compares the whole update as one vector:

# %% tags=["proof"]
assert list(runs.results[0]["strategies"]) == ["ddp", "zero1", "fsdp_scratch", "fsdp_scratch_bf16", "fsdp2"]  # the five
print(check_strategies_agree(by_world))  # tolerances and their reasons: disttutor/checks/sharding.py

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
# ## 2. FSDP2: its communication and its memory
#
# The `fsdp2` program applies the opening script's recipe (`fully_shard` on every block, then on the root) to `BlockLM`, four residual blocks with a tied output layer, and measures it.

# %% [markdown] id="md-11-34"
# Each `fully_shard(block)` installs hooks on the block. *Pre-forward* all-gathers its full weights and *post-forward* frees them (`reshard_after_forward=True`); *pre-backward* gathers them again, and *post-backward* **reduce-scatters** the gradients, so each rank keeps the average of its own shard.

# %% [markdown] id="md-11-35"
# torch's default, `reshard_after_forward=None`, means `True` for every unit but the root (`False`); the program passes `True` to all units. One launch on 2 ranks measures all of section 2, and checks 3 AdamW steps against one process:

# %%
f2run = disttutor.launch("fsdp2", nproc=2, **LAUNCH)
print(f2run.command)
F2 = f2run.results
up = F2[0]["unit_params"]
print(f"BlockLM: {F2[0]['n_params']} parameters; each block unit {up['block']}, the root unit {up['root']}")

# %% tags=["proof"]
print(check_fsdp2_matches_one_process(F2))

# %% [markdown] id="md-11-08"
# ### 2.1 Communication: one all-gather per unit in forward and in backward, one reduce-scatter
#
# The program profiles one step with `torch.profiler`, as in chapter 9: FSDP2 names its regions (`FSDP::all_gather (blocks.0)`, `FSDP::post_backward_reduce (blocks.0)`).

# %% [markdown] id="md-11-36"
# **Prefetching** issues the *next* unit's all-gather before the current unit computes, so the transfer can hide behind compute. FSDP2 prefetches one unit in backward by default; explicit prefetching is opt-in. The program compares two settings per block `i`:
#
# ```python
# block.set_modules_to_forward_prefetch(blocks[i + 1:i + 2])   # "prefetch on"
# block.set_modules_to_backward_prefetch(blocks[i - 1:i] if i else [block])
# block.set_modules_to_backward_prefetch([block])              # "prefetch off": a block prefetching itself is a no-op
# ```
#
# The figure shows each rank's profiled step in both settings. The times printed under it are one step each, so they are noisy; the order of the collectives is not.

# %% [markdown] id="md-11-58"
# First the idea, drawn as on a GPU: the collectives on their own stream, every block taking this run's median times.

# %% tags=["schematic"]
from disttutor.viz.fsdp_unit_life import idealised_steps, unit_life_figure

unit_life_figure(F2)
plt.show()
off_ms, on_ms = idealised_steps(F2)
print(f"idealised step: {off_ms:.1f} ms without prefetching, {on_ms:.1f} ms with it")

# %% [markdown] id="md-11-59" tags=["caption"]
# *Figure: each block's life (all-gather, compute, free) on one link and one compute stream; with prefetching, each all-gather runs while the previous block computes.*

# %% [markdown] id="md-11-60" tags=["derivation"]
# **Derivation: when prefetching hides the all-gathers.** A unit of $S_u$ bytes, $n$ ranks:
#
# * all-gather: $t_\text{AG} = (n-1)\,\alpha + \frac{n-1}{n}\cdot\frac{S_u}{B}$; a reduce-scatter takes as long;
# * forward: hidden when $t_\text{AG} \le t_\text{fwd}$ of the unit before;
# * backward, the link carries one all-gather and one reduce-scatter per block: hidden when $2\,t_\text{AG} \le t_\text{bwd}$.
#
# Then a step costs about its compute, plus the first all-gather of each pass and the last reduce-scatter.

# %%
fig = viz.fsdp_timeline_figure(F2)
plt.show()
for cond in ("prefetch off", "prefetch on"):
    ms = [sum(d for s, d in r["comm"][cond]["regions"][p]) for r in F2 for p in ("forward", "backward")]
    print(f"{cond:12}: forward + backward {max(ms[0::2]) + max(ms[1::2]):.1f} ms (slowest forward + slowest backward)")

# %% [markdown] id="md-11-61" tags=["caption"]
# *Figure: one measured step per rank: compute above its collectives; with prefetching, block 2's all-gather comes before block 3's reduce-scatter.*

# %% tags=["nbval-check-output"]
def backward_order(cond, rank=0):
    return [f"{'AG' if c['op'] == 'all_gather' else 'RS'}{c['unit'].split('.')[-1][0]}"
            for c in F2[rank]["comm"][cond]["calls"] if c["phase"] == "backward" and c["unit"] != "root"]


for cond in ("prefetch off", "prefetch on"):
    print(f"{cond:12}: backward issues {' '.join(backward_order(cond))}")

# %% tags=["proof"]
print(check_fsdp_collectives(F2, backward_order("prefetch off"), backward_order("prefetch on")))

# %% [markdown] id="md-11-09"
# In the figure's forward, blocks 0 to 3 each compute after their blue all-gather; in backward, each block's gradient is reduce-scattered (red) as backward leaves it. With prefetching, block 2's all-gather (`AG2`) is issued *before* block 3's reduce-scatter (`RS3`), so on GPUs, where the all-gather runs on its own CUDA stream, it can run while block 3 computes. On CPU ranks FSDP2 calls gloo with `async_op=False`, so the training thread waits for each collective: prefetching changes the order, not the overlap.

# %% [markdown] id="md-11-38"
# **Bytes per step.** Let $S$ be the parameter bytes. DDP all-reduces the gradients once (payload $S$); FSDP with `reshard_after_forward=True` all-gathers every unit twice and reduce-scatters once (payload $3S$).

# %% [markdown] id="md-11-39" tags=["derivation"]
# **Derivation** (a ring of $n$ ranks, chapter 2):
#
# * an all-gather or a reduce-scatter of $S$ bytes: each rank sends $\frac{n-1}{n}S$; an all-reduce, $2\frac{n-1}{n}S$;
# * FSDP, forward all-gather + backward all-gather + reduce-scatter: $3\frac{n-1}{n}S$; DDP: $2\frac{n-1}{n}S$;
# * so $\frac{\text{FSDP}}{\text{DDP}} = 1.5$, and on a link FSDP's step spends $T \approx 3\frac{n-1}{n}\cdot\frac{S}{B}$ on the wire, plus $3(n-1)\alpha$ per unit.
#
# The program counts the payloads from the trace, and the bytes handed to the sockets (`/proc/self/io`, Linux):

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
print(f"S = {P} bytes of parameters; {n} ranks")
print(f"{'':24}{'payload':>10}{'ring formula':>14}{'sent (measured)':>17}")
print(f"{'DDP (all-reduce)':24}{r0['ddp_payload']:>10}{r0['ddp_formula']:>14.0f}{r0['ddp_sent'] or 0:>17}")
print(f"{'FSDP2 (AG + AG + RS)':24}{r0['payload']:>10}{r0['formula']:>14.0f}{r0['sent'] or 0:>17}")
print(f"FSDP2 / DDP: payload {r0['payload'] / r0['ddp_payload']:.2f}x, ring formula {r0['formula'] / r0['ddp_formula']:.2f}x, "
      f"sent {r0['sent'] / r0['ddp_sent']:.2f}x")

# %% tags=["proof"]
mp_calls = F2[0]["comm"]["bf16 params"]["calls"]  # MixedPrecisionPolicy (2.3): bf16 all-gathers
ag_bf16 = sum(c["bytes"] for c in mp_calls if c["op"] == "all_gather")
ag_fp32 = sum(c["bytes"] for c in F2[0]["comm"]["prefetch off"]["calls"] if c["op"] == "all_gather")
print(check_fsdp_bytes(rows, P, ag_bf16, ag_fp32))

# %% [markdown] id="md-11-10"
# The payloads match the formula to the byte. On the wire gloo sends about 2× DDP's bytes, not 1.5×: torch's gloo backend runs `reduce_scatter_tensor` as an all-reduce of the whole gradient (the trace records `all_reduce`). NCCL (GPUs) reduce-scatters natively, and the ring formula's 1.5× applies there.

# %% [markdown] id="md-11-40"
# ### 2.2 Peak memory per rank: `reshard_after_forward` and activation checkpointing
#
# `reshard_after_forward=False` keeps each block's full weights from forward to backward: no second all-gather, more memory. **Activation checkpointing** (`torch.utils.checkpoint` around each block) keeps only each block's input and recomputes its activations in backward. Expect at the peak: with resharding, one or two blocks' full weights plus the root's; without it, more; with checkpointing, far fewer activation bytes.

# %% [markdown] id="md-11-41"
# torch's `FSDPMemTracker` (`torch.distributed._tools`) counts every tensor the step creates, by kind, on CPU too. The program ran one step under it in three configurations. The first four columns are one snapshot, taken when the total peaks; `ACT_PEAK` is the activations' own peak over the step, which can fall at another moment:

# %%
mem = {rank: r["memory"] for rank, r in enumerate(F2)}
cats = ("UNSHARDED_PARAM", "ALL_GATHER", "ACT", "Total", "ACT_PEAK")
print(f"peak bytes, rank 0{'':26}" + "".join(f"{c:>17}" for c in cats))
for cfg_name, m in mem[0].items():
    print(f"{cfg_name:44}" + "".join(f"{m[c]:>17}" for c in cats))
block_bytes, root_bytes = up["block"] * 4, up["root"] * 4
print(f"one block's full weights: {block_bytes} bytes; the root's: {root_bytes}")

# %% tags=["proof"]
print(check_fsdp_memory(mem, block_bytes, root_bytes, max(r["ac_vs_no_ac"] for r in F2)))

# %% [markdown] id="md-11-11"
# The blocks dominate a real model: with resharding, a 32-block model holds one or two blocks' full weights at a time instead of all 32. Activation checkpointing trades one more forward per block for activation memory, which grows with batch size and sequence length.

# %% [markdown] id="md-11-42"
# ### 2.3 `MixedPrecisionPolicy`
#
# With `MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)`, the sharded parameters, gradients and optimizer state stay fp32 (the *master weights*). Each shard is cast to bf16 **before** the all-gather (half the bytes), the block computes in bf16, and gradients are reduce-scattered in `reduce_dtype`:

# %%
mpd = F2[0]["mixed_precision"]
rs_dtypes = {c["dtype"] for c in mp_calls if c["op"] == "reduce_scatter"}
print(f"in blocks.0's forward: weight {mpd['in_forward']['weight']}, output {mpd['in_forward']['output']}")
print(f"sharded parameter {mpd['sharded_param']}, gradient {mpd['grad_after_step']}, AdamW state {mpd['optimizer_state']}")
print(f"all-gathers: {ag_bf16} bytes (fp32: {ag_fp32}); reduce-scatters in {rs_dtypes}")

# %% tags=["proof"]
print(check_mixed_precision(mpd, rs_dtypes))

# %% [markdown] id="md-11-12"
# On CPU ranks bf16 saves bytes on the wire; whether it saves time depends on the CPU's bf16 support, so the opening script keeps fp32.

# %% [markdown] id="md-11-43"
# ### 2.4 A sharded checkpoint: DCP with `get_state_dict` / `set_state_dict`
#
# With FSDP2 no rank holds the whole model. `get_state_dict` returns **sharded** state dicts (DTensors; optimizer state keyed by parameter name), and DCP (`torch.distributed.checkpoint`, chapter 10) writes each rank's shards and reads them back in place:
#
# ```python
# model_sd, optim_sd = get_state_dict(model, opt)
# dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=directory)
# # later, into a freshly sharded model and optimizer:
# model_sd, optim_sd = get_state_dict(model, opt)
# state = {"model": model_sd, "optim": optim_sd}
# dcp.load(state, checkpoint_id=directory)
# set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
# ```
#
# `disttutor/plain/fsdp2.py` is a copyable script with the opening recipe plus this save and reload. The program saved its checkpoint and reloaded it into a fresh model:

# %%
ck = F2[0]["checkpoint"]
print(f"files: {ck['files']}")

# %% tags=["proof"]
print(check_fsdp_checkpoint(F2, n))

# %% [markdown] id="md-11-14"
# ### 2.5 FSDP1's flat parameter vs FSDP2's per-parameter shards
#
# torch's first FSDP (`FullyShardedDataParallel`, "FSDP1") and the scratch FSDP of Exercise 11.2 **flatten** a unit's parameters into one vector and shard it. FSDP2 shards **every parameter on its own**, as a DTensor along dim 0.

# %% [markdown] id="md-11-44"
# The program wrapped one small model both ways and listed its parameters. Then it froze `blocks.0.up.weight` *after* wrapping (the usual fine-tuning move) and took one SGD step:

# %%
views = F2[0]["views"]
for design in ("flat (FSDP1-style)", "per-parameter (FSDP2)"):
    v = views[design]
    name, shape, local, kind, placement = v["parameters"][0]
    print(f"{design}: {v['n_parameters']} parameters, e.g. {name} {kind} {shape}, this rank {local}; "
          f"empty placeholders {v['n_placeholders']}; frozen weight moved {v['frozen_weight_moved']:.2g}")
print(f"torch's FSDP1 here: {views['fsdp1_error'] or 'runs'}")

# %% tags=["proof"]
print(check_flat_vs_per_param(views))

# %% [markdown] id="md-11-15"
# What changes for you:
#
# * **Inspecting parameters.** A flat design shows one anonymous 1-D shard. With FSDP2 each parameter keeps its name and global shape; `p.to_local()` is this rank's rows, `p.full_tensor()` gathers it.

# %% [markdown] id="md-11-55"
# * **Freezing one weight.** In the flat design `requires_grad` belongs to the whole vector, so the weight frozen above *kept training*. FSDP1 therefore requires one `requires_grad` per unit unless `use_orig_params=True`; FSDP2 froze exactly that weight.

# %% [markdown] id="md-11-45"
# * **Why flatten at all**: one contiguous all-gather per unit is fast. FSDP2 keeps that: it copies the unit's shards into one buffer before the all-gather (`all_gather_copy_in`), then splits the gathered buffer into each parameter's full tensor (`FSDP::all_gather_copy_out`).
# * Without `device_id=torch.device("cpu")` torch's FSDP1 refuses CPU ranks (the error above); the flat view here is the course's own.

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

# %% [markdown] id="md-11-64"
# ## Exercise 11.3 — HSDP on a 2-D mesh
#
# **HSDP** (hybrid sharded data parallel) shards the model within a node, over its fast links; the nodes are *replicas* that all-reduce gradient shards over the slow link:
#
# $$\begin{array}{r|cc} & \text{shard } 0 & \text{shard } 1 \\ \hline \text{replica } 0 \text{ (node } 0) & \text{rank } 0 & \text{rank } 1 \\ \text{replica } 1 \text{ (node } 1) & \text{rank } 2 & \text{rank } 3 \end{array}$$
#
# Write `hsdp_train`: the FSDP2 script above on a `(replicas, shards)` mesh named `("replicate", "shard")`; SGD, one step per batch. Checked on 4 ranks, as 2 × 2 and 1 × 4.

# %%
card("11.3")

# %%
def hsdp_train(model, batches, loss_fn, replicas, shards, lr):
    """Shard `model` (each of `model.blocks`, then the root) with HSDP; SGD, one step per (x, y) in `batches`."""
    raise NotImplementedError("Exercise 11.3: HSDP on a 2-D mesh, then train")


# %%
hint("11.3")


# %%
print(check_hsdp(hsdp_train))

# %% [markdown] id="md-11-63"
# ## Puzzles
#
# One exact answer each: write yours into `mine`, then run the cell.

# %% tags=["puzzle"]
puzzle("11.z1", mine=None)

# %% tags=["puzzle"]
puzzle("11.z2", mine=None)

# %% tags=["puzzle"]
puzzle("11.z3", mine=None)

# %% [markdown] id="md-11-62"
# ## Worked problems
#
# Write your number into `mine`, run the cell, then open the worked answer.

# %% tags=["problem"]
problem("11.p1", mine=None)

# %% tags=["problem"]
problem("11.p2", mine=None)

# %% tags=["problem"]
problem("11.p3", mine=None)

# %% tags=["problem"]
problem("11.p4", mine=None, param_bytes=P, n=n)

# %% tags=["problem"]
problem("11.p5", mine=None)

# %% [markdown] id="md-11-17"
# ## 3. What comes next
#
# FSDP still runs every layer whole on every rank. Splitting each layer's matrices instead (tensor parallelism, and the DTensor placements that express it) is chapter 12.
#
# **What to read next**: the PyTorch FSDP2 tutorial; TorchTitan (FSDP2 composed with tensor, pipeline and context parallelism); the ZeRO paper.

# %% [markdown] id="md-11-51"
# <details><summary><b>Appendix: the article's outlook (§11.2), checked</b></summary>
#
# | the article says | today |
# |---|---|
# | 自动化并行, e.g. `torch.distributed.fsdp` | FSDP is sharding, not automatic parallelism: you choose the units and the mesh. |
# | 更高效的通信算法: 3D并行、张量并行 | ways to split the work, not communication algorithms; they compose on an N-D `DeviceMesh` (pipelines: chapter 7; tensor parallelism: chapter 12). |
# | 云原生 / Kubernetes | outside PyTorch; chapter 5 generated a Kubeflow `PyTorchJob` that starts `torchrun` in every pod. |
# | 异构计算 (CPU, GPU, TPU) | one job mixing accelerators is rare; offloading shards to CPU memory (FSDP2's `CPUOffloadPolicy`) is the common case. |
# | 联邦学习 | see the next fold. |
#
# The article's best practices (§11.3: start small, monitor, pin versions, checkpoint and resume, optimise from measurements) are what chapters 0–10 did.
# </details>

# %% [markdown] id="md-11-53"
# <details><summary><b>Appendix: federated averaging next to data parallelism</b></summary>
#
# **Federated learning** (FedAvg, McMahan et al., 2017) keeps the data with its owner: each client takes *k* SGD steps on its own data, then the clients' weights are averaged, once per round. With *k* = 1 it *is* data parallelism, since averaging the updated weights averages the gradients:
#
# $$\frac{1}{n}\sum_r \left(w - \eta\, g_r\right) = w - \eta\,\frac{1}{n}\sum_r g_r$$
#
# With *k* > 1 it all-reduces *k* times less, but each client drifts toward its own data's optimum between averagings, so it no longer computes the same training. The `fedavg` program runs both on 2 ranks (`disttutor.launch("fedavg", nproc=2)`).
# </details>

# %% [markdown] id="md-11-23" tags=["takeaways"]
# ## Key takeaways
#
# * ZeRO-1 shards the optimizer states, ZeRO-2 the gradients too, ZeRO-3/FSDP the parameters too: FSDP's model states are 16/n bytes per parameter.
# * FSDP2 is `fully_shard` on each block, then on the root, then the optimizer; the training loop does not change.
# * FSDP all-gathers parameters before use and reduce-scatters gradients after: 1.5 × DDP's bytes by the ring formula (2 × on gloo), in exchange for memory.
# * `reshard_after_forward`, activation checkpointing and `MixedPrecisionPolicy` trade memory, compute and bytes; each program here checks its training against one process.

# %% [markdown] id="md-11-24" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 11.1 (predict, then run).** Section 1 measured every strategy on 2 ranks. On **4 ranks**, what fraction of DDP's per-rank model-state bytes (parameters + gradients + AdamW's states, all fp32) does **ZeRO-1** keep on its fullest rank? Write a number between 0 and 1 into `my_prediction`, then run the next cell.

# %% tags=["predict"]
my_prediction = None  # a number in [0, 1]: ZeRO-1 bytes / DDP bytes per rank, 4 ranks

# %%
import disttutor
from disttutor.viz import sharding as q1_viz

q1 = disttutor.launch("sharding", nproc=4, args={"steps": 1, "checkpoint": False}, stream=False, timeout=280)
q1_rows = {r["strategy"]: r for r in q1_viz.memory_rows({4: q1.results})}
total = {s: q1_rows[s]["params"] + q1_rows[s]["grads"] + q1_rows[s]["optimizer"] for s in ("ddp", "zero1")}
measured = total["zero1"] / total["ddp"]
opt_share = q1_rows["zero1"]["optimizer"] / q1_rows["ddp"]["optimizer"]
# 10 %: (4 + 4 + 8/4)/16 = 0.625 is the even split; ZeRO-1 gives each parameter whole to one rank, so the
# fullest rank of this small model holds more than a quarter of the optimizer states (0.664 at the build)
reveal("11.q1", my_prediction, measured, rel_tol=0.1,
       explain=f"DDP's rank holds {total['ddp']} bytes, ZeRO-1's fullest rank {total['zero1']}: only the optimizer "
       f"states are sharded, and this rank keeps {opt_share:.2f} of them, not 1/4.")

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
