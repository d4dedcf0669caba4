# %% [markdown] id="md-12-01"
# # Chapter 12 — Splitting one layer: tensor, sequence, context and expert parallelism
#
# *The article names tensor parallelism only in its outlook (§11.2); this is what practitioners use
# after data parallelism and FSDP.*
#
# FSDP (chapter 11) shards a model's *storage*, but every rank still runs every layer whole, on its
# own part of the batch. When one layer's activations or one sequence no longer fit, the work of
# **one layer** has to be split.

# %% [markdown] id="md-12-23"
# The Ultra-Scale Playbook (Hugging Face, 2025, *reported*) presents the techniques in this order:
# data parallelism → ZeRO/FSDP → **tensor** → **sequence** → **context** → pipeline → **expert**
# parallelism. This chapter builds the four in bold from scratch on CPU ranks, compares each with
# the unsplit module in one process, and counts the collectives each one calls.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(12)

# %% [markdown] id="md-12-02" tags=["opening"]
# **After this chapter you can**
# - split an MLP and an attention block over ranks by hand (Megatron's column- and row-parallel
#   layers) and with torch's `parallelize_module`, and say where each all-reduce comes from;
# - say what sequence parallelism changes and measure the activation memory it saves;
# - run attention over a sequence split across ranks (ring attention), spread a mixture-of-experts
#   layer over ranks (`all_to_all_single`), and read DTensor placements from a picture.

# %%
import os

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist

import disttutor
from disttutor.checks.claims.ch12 import (check_expert_parallel, check_one_dim_placements, check_ring_attention,
                                          check_sp_bytes, check_sp_collectives, check_tp_collectives,
                                          check_two_dim_placements)
from disttutor.checks.tensor_parallel import check_merge, check_row_parallel
from disttutor.checks.tolerances import SPLIT_TENSOR_ATOL
from disttutor.course.source import show_code
from disttutor.viz import placements as viz

print(f"torch {torch.__version__}, {disttutor.cores()} usable CPU cores")
print(f"load average now: {os.getloadavg()[0]:.1f} (on {disttutor.cores()} cores)")
LAUNCH = dict(stream=False, timeout=280)
PROGRAM = "tensor_sequence_expert"   # disttutor/programs/tensor_sequence_expert.py: one part per launch
TOL = SPLIT_TENSOR_ATOL  # fp32 summed in another order: a few ulps (measured < 4e-6); reasons in tolerances.py


def verdict(diff: float) -> str:
    """A difference from the reference in words (nbval compares words, not rounding-level floats)."""
    return f"equal within {TOL:g} ✓" if diff <= TOL else f"DIFFERENT by {diff:.2g} ✗"


# %% [markdown] id="md-12-03"
# ## 1. Tensor parallelism: split the matrices of a layer
#
# **Tensor parallelism** (TP) splits each weight matrix of a layer over `t` ranks. Every rank sees
# the *same* input (the batch is not split) and computes part of the layer. For the block
# `Linear(d, h) → GELU → Linear(h, d)`, Megatron-LM (Shoeybi et al., 2019) found a split with no
# communication in the middle:
#
# - the first Linear is **column-parallel**: each rank owns `h/t` output units (a block of rows of
#   the weight `[h, d]`); GELU acts element by element, so it runs on them as they are;
# - the second Linear is **row-parallel**: each rank owns the matching `h/t` input units (a block
#   of columns of `[d, h]`), so its output is a **partial sum**; one all-reduce adds the ranks' parts.

# %% [markdown] id="md-12-24"
# Megatron writes the communication as two **conjugate operators** (forward and backward swap
# roles). `f` enters the parallel region: identity forward, all-reduce backward (each rank's input
# gradient covers only its own hidden units). `g` leaves it: all-reduce forward, identity backward
# (the output, and so its gradient, is the same on every rank):

# %%
show_code("disttutor.tensor_parallel.tp", "conjugates")

# %% [markdown] id="md-12-04"
# `CopyToTP.forward` returns a view: the input is already on every rank. `ReduceFromTP.forward`
# clones first, because `dist.all_reduce` works in place and autograd's input must stay as it was.
# The layers that use them:

# %%
show_code("disttutor.tensor_parallel.tp", "layers")

# %% [markdown] id="md-12-05"
# The row-parallel layer adds its bias **after** the all-reduce; added before, it would count `t`
# times. Attention splits by **heads**: `q`, `k`, `v` column-parallel (each rank computes `heads/t`
# whole heads, with no communication), the output projection row-parallel (`TPAttention`).

# %% [markdown] id="md-12-25"
# torch ships this as `torch.distributed.tensor.parallel`. `parallelize_module(module, mesh, plan)`
# replaces the weights named in the plan with **DTensor** shards (a tensor plus a *placement* on a
# device mesh, section 5) and hooks the modules' inputs and outputs to play `f` and `g`:

# %%
show_code("disttutor.programs.tensor_sequence_expert", "tp_plan")

# %% [markdown] id="md-12-06"
# One launch on 2 ranks runs both versions of the MLP and the attention block. It compares the
# output and every gradient with the unsplit module in one process, and counts the collectives
# (for DTensor with torch's `CommDebugMode`).

# %%
tp = disttutor.launch(PROGRAM, nproc=2, args={"part": "tp"}, **LAUNCH)
TP = tp.results[0]["tp"]
for name, r in TP.items():
    print(f"{name:18} vs one process: {verdict(max(q['tp'][name]['diff'] for q in tp.results))}")

# %% tags=["nbval-check-output"]
def calls(d: dict) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(d.items())) or "none"


for name, r in TP.items():
    print(f"{name:18} forward: {calls(r['forward']):14} backward: {calls(r['backward'])}")
print(check_tp_collectives(tp.results, TOL))  # DTensor attention: 3 in backward, one per ColwiseParallel q, k, v

# %%
att = TP["dtensor_attention"]
print(f"DTensor attention, backward: {att['backward']['all_reduce']} all-reduces; from scratch: "
      f"{TP['scratch_attention']['backward']['all_reduce']}. Each of q, k, v is its own ColwiseParallel, "
      f"and each one's input hook all-reduces the input gradient it produced; the from-scratch block sums "
      f"the three gradients locally (autograd adds them at x) and all-reduces once. Shapes each rank holds: "
      + ", ".join(f"{k} {v}" for k, v in att["local_shapes"].items() if k.endswith("weight")))

# %% [markdown] id="md-12-07"
# The extra all-reduces are a design point, not a bug: torch's plan is per module, so three
# column-parallel layers reading the same input each reduce their own share of its gradient. A
# fused `qkv` Linear (one `ColwiseParallel`) reduces it once, as the MLP's first layer does above.
#
# <details><summary><b>The article says</b> tensor parallelism and 3D parallelism are "more
# efficient communication algorithms" (§11.2)</summary>
#
# Today: they are ways to split the model, and they add communication. The counts above show an
# all-reduce inside every block in forward and another in backward, on top of what data
# parallelism sends.
# </details>

# %% [markdown] id="md-12-26"
# ## Exercise 12.1 — the row-parallel linear's backward
#
# Here the row-parallel layer is one `torch.autograd.Function` whose forward is given:
# `y = all_reduce(x_shard @ w_shard.T) + bias`, with `x_shard` `[tokens, in/t]`, `w_shard`
# `[out, in/t]` and `bias` whole. Write `backward(ctx, grad_y)` returning the gradients of the three,
# and decide first whether it needs to communicate. The checker compares them with slices of an
# unsplit `nn.Linear`'s gradients and records every collective your backward calls.

# %%
card("12.1")

# %%
class RowParallelLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_shard, w_shard, bias):
        ctx.save_for_backward(x_shard, w_shard)
        y = x_shard @ w_shard.T
        dist.all_reduce(y)
        return y + bias

    @staticmethod
    def backward(ctx, grad_y):
        raise NotImplementedError("Exercise 12.1: return (grad_x_shard, grad_w_shard, grad_bias)")


# %%
hint("12.1")

# %%
print(check_row_parallel(RowParallelLinear))

# %% [markdown] id="md-12-08"
# ## 2. Sequence parallelism: shard what tensor parallelism leaves whole
#
# Under TP, LayerNorm, dropout and the residual add sit outside the parallel region: every rank
# runs them on the **whole** sequence and stores their activations whole. **Sequence
# parallelism** (SP; Korthikanti et al., 2022) runs them on `seq/t` tokens per rank. The
# all-reduce splits into its two halves (a reduce-scatter then an all-gather), placed around the block:
#
# - **all-gather** the sequence shards before the column-parallel layer (it needs every token);
#   backward: a **reduce-scatter** of the input gradient;
# - **reduce-scatter** the row-parallel layer's partial sums, so each rank gets the summed output of
#   its own tokens; backward: an all-gather.

# %% [markdown] id="md-12-27"
# Activations are laid out `[seq, batch, dim]` (Megatron's layout), so a sequence shard is
# contiguous along dimension 0. The collectives are `dist.all_gather_single` and
# `dist.reduce_scatter_single`; torch 2.13 marks the older names, `all_gather_into_tensor` and
# `reduce_scatter_tensor`, deprecated.

# %%
show_code("disttutor.tensor_parallel.sp", "sp_ops")

# %% [markdown] id="md-12-09"
# SP adds one duty. LayerNorm's weight and bias (and the output bias) are replicated, but each rank
# now computes their gradients from its own tokens only: partial sums, completed by one all-reduce
# after backward.

# %%
show_code("disttutor.tensor_parallel.sp", "sp_block")

# %% [markdown] id="md-12-10"
# One launch runs the block three ways on the same data and dropout mask: unsplit in one process,
# with TP, with SP. It measures the bytes autograd keeps for backward (every tensor an operation
# saves, seen through `torch.autograd.graph.saved_tensors_hooks`, parameters left out).

# %%
sp = disttutor.launch(PROGRAM, nproc=2, args={"part": "sp"}, **LAUNCH)
SP = sp.results[0]["sp"]
for mode in ("tp", "sp"):
    print(f"{mode.upper()} block vs one process (output, input grad, all weight grads): "
          f"{verdict(max(q['sp'][mode]['diff'] for q in sp.results))}")

# %% tags=["nbval-check-output"]
for mode in ("tp", "sp"):
    r = SP[mode]
    print(f"{mode.upper()}: forward {calls(r['forward']):45} backward {calls(r['backward'])}")
    print(f"    bytes saved for backward per rank: {r['saved_bytes']:6,}   ring bytes sent per rank: "
          f"{r['ring_bytes']:,.0f}")
print(check_sp_collectives(sp.results, TOL))

# %% [markdown] id="md-12-11"
# Where the bytes go, tensor by tensor (seq 16, batch 2, dim 16, hidden 32 on 2 ranks, so 16
# hidden units each; a Linear saves its input flattened to `[32 tokens, 16]`):

# %%
for mode in ("tp", "sp"):
    print(f"{mode.upper()}: " + " + ".join(f"{shape}" for shape, _ in SP[mode]["saved_tensors"]))

# %% tags=["nbval-check-output"]
s, b, d, h, t, f32 = 16, 2, 16, 32, 2, 4
# derived: LayerNorm saves its input and two per-token statistics; the column layer its input (LayerNorm's
# output, gathered under SP); GELU its input; the row layer its input; dropout its mask
tp_formula = (3 * s * b * d + 2 * s * b * h // t + 2 * s * b) * f32
sp_formula = (s * b * d // t + s * b * d + s * b * d // t + 2 * s * b * h // t + 2 * s * b // t) * f32
ln_sync = (2 * d + d) * f32 * 2 * (t - 1) / t     # ring bytes of the one all-reduce of LayerNorm's and the bias's grads
print(check_sp_bytes(SP, tp_formula, sp_formula, ln_sync))

# %%
from IPython.display import Markdown

tp_b, sp_b = SP["tp"]["saved_bytes"], SP["sp"]["saved_bytes"]
gathered = s * b * d * f32
Markdown(f"Measured: SP keeps **{sp_b:,} bytes** per rank for backward where TP keeps **{tp_b:,}** "
         f"({100 * (1 - sp_b / tp_b):.0f}% less), with equal results and the same ring bytes for the activations "
         f"(plus {ln_sync:.0f} for LayerNorm's gradients). What SP shards is "
         f"the part TP replicated (the block's input, LayerNorm's statistics, the dropout mask); the hidden "
         f"activations were already split by TP. One full-sequence tensor is left: the all-gathered input of the "
         f"column layer ({gathered:,} bytes). Megatron keeps only this rank's shard of it and all-gathers it "
         f"again in backward, which would bring SP to {sp_b - gathered + gathered // t:,} bytes (*derived*). "
         f"The gain grows with the share of replicated activations (*reported*: Korthikanti et al. 2022 count "
         f"10·sbh bytes per transformer layer that TP leaves replicated, against 24/t·sbh that it splits).")

# %% [markdown] id="md-12-12"
# ## 3. Context parallelism: ring attention
#
# SP still gathers the whole sequence for attention. **Context parallelism** (CP) keeps the
# sequence split *through* attention, for sequences too long for one rank. In **ring attention**
# (Liu et al., 2023) each rank passes its key/value block to the next rank, `n - 1` times, while it
# computes its queries against the block it holds.

# %% [markdown] id="md-12-28"
# No rank sees all the scores: each step gives the softmax over *one block* of keys. The **online
# softmax** (the trick FlashAttention uses) merges those results exactly. A block's result is its
# output (normalised by its own softmax denominator) and `lse`, the **log-sum-exp** of its scores
# (the log of that denominator); over two blocks the denominator is `e^lse_a + e^lse_b`:

# %%
show_code("disttutor.tensor_parallel.ring_attention", "merge")

# %% [markdown] id="md-12-13"
# The ring: post the send of the current block and the receive of the next, compute meanwhile,
# wait, swap. With a causal mask, a *later* rank's keys are all in my queries' future: that block is
# skipped but still passed on, and my own block gets the causal mask inside it.

# %%
show_code("disttutor.tensor_parallel.ring_attention", "ring")

# %%
cp = disttutor.launch(PROGRAM, nproc=2, args={"part": "cp"}, **LAUNCH)
CP = [q["cp"] for q in cp.results]
print("ring attention vs full causal attention (F.scaled_dot_product_attention, is_causal=True): "
      + verdict(max(r["diff"] for r in CP)))

# %% tags=["nbval-check-output"]
for rank, r in enumerate(CP):
    print(f"rank {rank}: {r['block_tokens']} tokens of the sequence; calls: {calls(r['calls'])}; "
          f"sends {r['sent_bytes']:,.0f} bytes of keys and values")
print(check_ring_attention(CP, TOL))  # n - 1 steps of the ring

# %% [markdown] id="md-12-14"
# Every rank sends the same bytes, but the causal *work* is uneven: rank `r` computes `r + 1` of
# the `n` blocks. torch's experimental `context_parallel` (its head-tail load balancer) and
# Megatron's CP balance it by giving each rank one chunk from each end of the sequence. This ring
# runs the forward only; training also needs a backward that moves the blocks again.

# %% [markdown] id="md-12-29"
# ## Exercise 12.2 — the online-softmax merge
#
# Write `merge(out_a, lse_a, out_b, lse_b) -> (out, lse)` without copying the code above: `out_*`
# are `[..., queries, d]` outputs over two disjoint key blocks, `lse_*` their log-sum-exps
# `[..., queries]`. The checker tries the usual traps (blocks of different size, scores that
# overflow `exp`, a block that saw no key: `lse = -inf`, output 0). Then it runs the ring with your
# merge against full causal attention.

# %%
card("12.2")

# %%
def merge(out_a, lse_a, out_b, lse_b):
    raise NotImplementedError("Exercise 12.2: weigh each block by its share of the softmax denominator")


# %%
hint("12.2")

# %%
print(check_merge(merge))

# %% [markdown] id="md-12-15"
# ## 4. Expert parallelism: a mixture of experts over the ranks
#
# A **mixture-of-experts** (MoE) layer replaces one feed-forward block by `E` of them, the
# **experts**, plus a **router**: a Linear that scores each token against each expert. Each token
# goes to its **top-k** experts, whose outputs are summed, weighted by the **gates** (a softmax over
# the k chosen scores). The experts' parameters grow `E` times, their compute per token `k` times.

# %% [markdown] id="md-12-30"
# **Expert parallelism** (EP) puts `E/n` experts on each rank; each rank keeps its own batch and
# sends tokens to their experts and back with **all-to-all** (`dist.all_to_all_single`: rank `i`'s
# `j`-th chunk goes to rank `j`, chunks of any size). One layer makes three: the counts (so each
# rank knows how much it will receive), the tokens (**dispatch**), the outputs back (**combine**).

# %%
show_code("disttutor.tensor_parallel.moe", "ep")

# %%
ep = disttutor.launch(PROGRAM, nproc=2, args={"part": "ep"}, **LAUNCH)
EP = [q["ep"] for q in ep.results]
print("expert-parallel MoE vs every expert run in one process: " + verdict(max(r["diff"] for r in EP)))

# %% tags=["nbval-check-output"]
n_exp = len(EP[0]["tokens_per_expert"])
for rank, r in enumerate(EP):
    print(f"rank {rank}: hosts experts {r['experts_here']}; its tokens chose experts "
          f"{dict(enumerate(r['tokens_per_expert']))}; calls: {calls(r['calls'])}")
per_expert = [sum(r["tokens_per_expert"][e] for r in EP) for e in range(n_exp)]
print("tokens per expert, all ranks:", dict(enumerate(per_expert)))
print(check_expert_parallel(EP, TOL, tokens=12, top_k=2))  # the program's 12 tokens per rank, top-2 routing

# %%
fig, ax = plt.subplots(figsize=(6, 2.6))
bottom = [0] * n_exp
for rank, r in enumerate(EP):
    ax.bar(range(n_exp), r["tokens_per_expert"], bottom=bottom, label=f"tokens from rank {rank}")
    bottom = [a + c for a, c in zip(bottom, r["tokens_per_expert"])]
ax.set_xticks(range(n_exp), [f"expert {e}\n(rank {e * len(EP) // n_exp})" for e in range(n_exp)])
ax.set_ylabel("tokens routed")
ax.set_title("who computes what: tokens per expert (measured)")
ax.set_ylim(0, 1.45 * max(per_expert))
ax.legend(fontsize=8, loc="upper left", ncol=2)
fig.tight_layout()

# %%
local = n_exp // len(EP)
rows = [sum(per_expert[r * local:(r + 1) * local]) for r in range(len(EP))]
Markdown(f"Each rank routed {sum(EP[0]['tokens_per_expert'])} (token, expert) pairs "
         f"and computed {', '.join(f'rank {r}: {n}' for r, n in enumerate(rows))} rows. The router decides "
         f"the load: expert {per_expert.index(max(per_expert))} got {max(per_expert)} tokens, expert "
         f"{per_expert.index(min(per_expert))} {min(per_expert)} ({max(per_expert) / min(per_expert):.1f}x), already with an "
         f"untrained router and random tokens; rank {rows.index(max(rows))} computes {max(rows) / min(rows):.2f}x "
         f"the rows of rank {rows.index(min(rows))}, and every rank waits for the busiest at the combine. That is "
         f"why MoE training adds a *load-balancing* loss and caps each expert's tokens (the *capacity factor*; "
         f"tokens over it are dropped or rerouted).")

# %% [markdown] id="md-12-16"
# ## 5. DTensor placements, drawn from what the ranks hold
#
# `parallelize_module` and FSDP2 store the parameters they split as **DTensors**: one logical tensor, a
# **device mesh** (the ranks in a grid, one dimension per kind of parallelism) and one
# **placement** per mesh dimension. `Shard(d)` cuts along tensor dimension `d`, `Replicate()` keeps
# a full copy on each rank, and `Partial()` keeps a full-shaped *addend* per rank (the logical tensor
# is their sum, like a row-parallel output before its all-reduce).

# %% [markdown] id="md-12-31"
# On 4 ranks, with tensors whose elements are their own indices, `to_local()` shows which elements
# each rank stores:

# %%
pl = disttutor.launch(PROGRAM, nproc=4, args={"part": "placements"}, **LAUNCH)
viz.one_dim_figure(pl.results);

# %% tags=["proof", "nbval-check-output"]
ONE = [r["placements"]["one_dim"] for r in pl.results]
print(check_one_dim_placements(ONE))

# %% [markdown] id="md-12-17"
# On a 2-D mesh `(dp=2, tp=2)` a placement is given **per mesh dimension**, left to right.
# `(Shard(0), Shard(1))` cuts rows over `dp` and columns over `tp`; `(Shard(0), Shard(0))` cuts rows
# over `dp`, then each half's rows over `tp`; `(Replicate(), Shard(0))` copies over `dp` and cuts
# rows over `tp`.

# %% [markdown] id="md-12-32"
# The last panel is FSDP2 over TP (chapter 11's 2-D mesh): `ColwiseParallel` shards a weight's rows
# over `tp` **first**, then `fully_shard` shards *each TP shard's* rows over `dp`:

# %%
viz.two_dim_figure(pl.results);

# %% tags=["nbval-check-output"]
TWO = [r["placements"]["two_dim"] for r in pl.results]
coords = [tuple(r["placements"]["coordinate"]) for r in pl.results]
rows_of = lambda held: sorted({i // 8 for i in held})
nested = {c: rows_of(t["(S(0), S(0))"]["held"]) for c, t in zip(coords, TWO)}
strided = {c: rows_of(t["FSDP2 over TP"]["held"]) for c, t in zip(coords, TWO)}
print("rows held, (Shard(0), Shard(0)):", nested)
print("rows held, FSDP2 over TP:       ", strided)
print("FSDP2 over TP's placements:", TWO[0]["FSDP2 over TP"]["placements"])
print(check_two_dim_placements(nested, strided, TWO[0]["FSDP2 over TP"]["placements"]))

# %%
dp0 = sorted(strided[(0, 0)] + strided[(0, 1)])  # every row stored by the ranks with dp = 0
Markdown(f"Under `(Shard(0), Shard(0))` mesh coordinate (0, 1) holds rows {nested[(0, 1)]}; after FSDP2 over TP it "
         f"holds rows {strided[(0, 1)]}: the `dp` index no longer picks a contiguous block, it picks the same "
         f"sub-block *inside each* `tp` shard, so the rows stored with dp = 0 are {dp0}, a strided set. That is "
         f"what `{TWO[0]['FSDP2 over TP']['placements']}` says: over `dp`, `Shard(0)` applied inside each of the "
         f"`sf` = 2 pieces that the `tp` dimension cut first (the *split factor* is the `tp` size). You meet it "
         f"when you print the placements of a model trained with FSDP2 and TP together; `full_tensor()` and DCP "
         f"checkpoints put the rows back in order for you.")

# %% [markdown] id="md-12-18"
# ## 6. The same, as a plain script
#
# Section 1's `parallelize_module` split in one file of plain torch: `torchrun --nproc-per-node 2
# disttutor/plain/tp.py` (gloo on CPU; NCCL and one GPU per rank where there are GPUs). It splits an
# MLP with `parallelize_module` and checks output and gradients against the unsplit copy:

# %%
show_code("disttutor.plain.tp")

# %% [markdown] id="md-12-19" tags=["takeaways"]
# ## Key takeaways
#
# - **Tensor parallelism** splits a layer's matrices, column- then row-parallel: one all-reduce in
#   forward (`g`) and one in backward (`f`) per block; the row layer's bias is added after the sum.
# - **Sequence parallelism** turns that all-reduce into an all-gather and a reduce-scatter (the same
#   ring bytes) and shards LayerNorm and dropout over the sequence: less activation memory, plus
#   one small all-reduce of LayerNorm's gradients.
# - **Context parallelism** keeps the sequence split through attention: key/value blocks travel a
#   ring (`n - 1` sends per rank) and the online softmax merges the partial results exactly.
# - **Expert parallelism** spreads an MoE layer's experts and moves tokens with three all-to-alls;
#   the router decides each rank's load.
# - A **DTensor** has one placement per mesh dimension; `_StridedShard` marks right-to-left sharding
#   (FSDP2 over TP).

# %% [markdown] id="md-12-20" tags=["question"]
# ## Check your understanding
#
# **1.** In the row-parallel layer, why is the bias added after the all-reduce, and what would the
# output be, on `t` ranks, if each rank added it before?
#
# <details><summary>Answer</summary>
#
# The all-reduce sums what every rank holds, so a bias added before would be in all `t` addends:
# the output would carry `t × bias`. Added once, after the sum, it counts once. Its gradient is the
# output gradient summed over tokens, on every rank, with no division (Exercise 12.1).
# </details>

# %% [markdown] id="md-12-21" tags=["question"]
# **2.** Sequence parallelism sends the same bytes as tensor parallelism. Where, then, does it save
# memory, and why does it add an all-reduce after backward?
#
# <details><summary>Answer</summary>
#
# In the regions TP leaves replicated: LayerNorm's input and statistics and the dropout mask are
# stored for `seq/t` tokens per rank (section 2 measured it). LayerNorm's weights stay replicated,
# but each rank computes their gradient from its own tokens: a partial sum, completed by one all-reduce.
# </details>

# %% [markdown] id="md-12-22" tags=["question"]
# **3. Predict, then run.** Ring attention on **4** ranks, causal mask: how many `isend` calls does
# one rank make in one forward pass? Write your number into `my_prediction`, then run the cell after it.

# %% tags=["predict"]
my_prediction = None  # a number: isend calls per rank in one forward, 4 ranks

# %%
cp4 = disttutor.launch(PROGRAM, nproc=4, args={"part": "cp"}, **LAUNCH)
measured = {r["cp"]["calls"]["isend"] for r in cp4.results}
assert len(measured) == 1 and all(r["cp"]["diff"] <= TOL for r in cp4.results)  # same count on every rank
(MEASURED,) = measured
reveal("12.q3", my_prediction, MEASURED, rel_tol=0,  # a count of calls: exact
       explain=f"Each rank sent {MEASURED} times on 4 ranks (ring attention {verdict(max(r['cp']['diff'] for r in cp4.results))}): "
       "the key/value block travels n - 1 hops to reach every rank, and the last block a rank receives is not "
       "passed on. The send happens even for blocks the causal mask skips, so that every rank takes part in "
       "every step of the ring.")

# %%
disttutor.course.chapters.glossary(12)
