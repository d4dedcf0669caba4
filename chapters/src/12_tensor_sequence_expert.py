# %% [markdown] id="md-12-01"
# # Chapter 12 — Splitting one layer: tensor, sequence, context and expert parallelism
#
# FSDP (chapter 11) shards a model's *storage*, but every rank still runs every layer whole. When one
# layer's activations or one sequence no longer fit, **one layer** has to be split: here four ways,
# each checked against the unsplit module in one process.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(12)

# %% [markdown] id="md-12-02" tags=["opening"]
# **After this chapter you can**
# - split an MLP and an attention block with `parallelize_module` and by hand (Megatron's column- and
#   row-parallel layers), and say how many bytes each block sends;
# - say what sequence parallelism saves;
# - run ring attention over a split sequence, spread a mixture of experts over ranks, and read
#   DTensor placements, FSDP × TP included.

# %%
import matplotlib.pyplot as plt
import torch
import torch.distributed as dist

import disttutor
from disttutor.checks.claims.ch12 import (check_block_ring_bytes, check_expert_parallel, check_one_dim_placements,
                                          check_plain_tp, check_ring_attention, check_sp_bytes, check_sp_collectives,
                                          check_tp_collectives, check_two_dim_placements)
from disttutor.checks.tensor_parallel import check_merge, check_row_parallel
from disttutor.checks.tolerances import SPLIT_TENSOR_ATOL
from disttutor.course.problems import problem
from disttutor.course.puzzles import puzzle
from disttutor.course.source import show_code
from disttutor.viz import placements as viz

LAUNCH = dict(stream=False, timeout=280)
PROGRAM = "tensor_sequence_expert"   # disttutor/programs/tensor_sequence_expert.py
from disttutor.programs.tensor_sequence_expert import SplitDimsConfig

CFG = SplitDimsConfig()   # the sizes every part of the chapter's run uses (its defaults)
RANKS = 2                 # the run's ranks: t for TP and SP, n for ring attention and experts
TOL = SPLIT_TENSOR_ATOL  # fp32 summed in another order: a few ulps (measured < 4e-6); reasons in tolerances.py


def calls(d: dict) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(d.items())) or "none"


# %% [markdown] id="md-12-03"
# ## 1. Tensor parallelism: split the matrices of a layer
#
# **Tensor parallelism** (TP) splits each weight matrix of a layer over `t` ranks. Every rank sees
# the *same* input and computes part of the layer. For `Linear(d, h) → GELU → Linear(h, d)`,
# Megatron-LM (Shoeybi et al., 2019) splits with no communication in the middle:
#
# - the first Linear is **column-parallel**: each rank owns `h/t` output units (rows of the weight
#   `[h, d]`); GELU is elementwise, so it runs on them as they are;
# - the second is **row-parallel**: each rank owns the matching `h/t` input units (columns of
#   `[d, h]`), so its output is a **partial sum**; one all-reduce adds the ranks' parts.

# %% [markdown] id="md-12-25"
# In torch: `parallelize_module(module, mesh, plan)`, with a **device mesh** of the ranks and a plan
# naming `ColwiseParallel` and `RowwiseParallel` layers; the split weights become **DTensor** shards
# (section 5). On two live ranks:

# %%
%load_ext disttutor
%ranks start -n 2

# %% tags=["nbval-check-output"]
%%ranks
import copy
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("tp",))
torch.manual_seed(0)                          # the same full MLP and input on every rank
mlp = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))
ref = copy.deepcopy(mlp)                      # an unsplit copy, to compare with
x = torch.randn(8, 16, requires_grad=True)    # TP splits the weights, not the batch
parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})

with CommDebugMode() as comm:
    y = mlp(x)
    fwd = comm.get_total_counts()
    y.pow(2).sum().backward()
print(f"first weight {tuple(mlp[0].weight.to_local().shape)} of {tuple(ref[0].weight.shape)}; "
      f"all-reduces: {fwd} forward, {comm.get_total_counts() - fwd} backward")

xr = x.detach().clone().requires_grad_()
ref(xr).pow(2).sum().backward()
diff = max([(y - ref(xr)).abs().max().item(), (x.grad - xr.grad).abs().max().item()] +
           [(p.grad.full_tensor() - r.grad).abs().max().item() for p, r in zip(mlp.parameters(), ref.parameters())])

# %% tags=["proof"]
import contextlib
import io

with contextlib.redirect_stdout(io.StringIO()):  # the magics' own status lines
    get_ipython().run_line_magic("ranks", "pull diff")
    get_ipython().run_line_magic("ranks", "stop")
print(check_plain_tp(diff, TOL))

# %% [markdown] id="md-12-18"
# The same as a script: `torchrun --nproc-per-node 2 disttutor/plain/tp.py`.
#
# **What one block sends.** Forward, the all-reduce adds partial outputs `[s·b, d]` (`s` tokens,
# `b` sequences). Backward, the input gradient, also `[s·b, d]`, is a partial sum over the ranks'
# hidden units: a second all-reduce. A ring all-reduce of `N` numbers sends $2\frac{t-1}{t}N$ per
# rank, so per block and training step each rank sends
# $2 \times 2\frac{t-1}{t}\, sbd \times 4$ bytes (fp32), whatever `h`. Section 2 checks it.

# %% [markdown] id="md-12-24"
# By hand, Megatron writes the communication as two **conjugate operators**. `f` enters the parallel
# region: identity forward, all-reduce backward (each rank's input gradient covers only its hidden
# units). `g` leaves it: all-reduce forward, identity backward (the output is the same on every rank):

# %%
show_code("disttutor.tensor_parallel.tp", "conjugates")

# %% [markdown] id="md-12-04"
# The MLP is then `f`, the column-parallel Linear, GELU, the row-parallel Linear through `g`, and
# the bias, added **after** the sum (before it, it would count `t` times). Attention splits by
# **heads**: `q`, `k`, `v` column-parallel, the output projection row-parallel.

# %% tags=["schematic"]
from disttutor.viz.tp_split import tp_block_figure

tp_block_figure(CFG.seq, CFG.batch, CFG.dim, CFG.hidden, t=RANKS)
plt.show()

# %% [markdown] id="md-12-36" tags=["caption"]
# *Figure: the run's feed-forward block on its ranks, to scale: whole input, each rank's hidden units, partial sums that `g` adds.*

# %% [markdown] id="md-12-37" tags=["derivation"]
# **Derivation: TP's communication against its compute**, one transformer layer forward, $e$ bytes a number:
#
# * compute per rank, in the weights' matmuls: $2sb(4d^2 + 2dh)/t$ FLOPs, $= 24\,sbd^2/t$ when $h = 4d$, at $F$ FLOP/s (the attention scores add $4s^2bd/t$);
# * communication: attention's and the MLP's all-reduce, each $S = sbd\,e$ bytes: $4(t-1)\alpha + 4\frac{t-1}{t}\cdot\frac{sbd\,e}{B}$;
# * ratio, α and the scores aside: $\frac{T_\text{comm}}{T_\text{compute}} = \frac{(t-1)\,e\,F}{6\,d\,B}$: independent of $s$ and $b$, smaller for wider models.
#
# The run measures the bytes; problems 12.p2 and 12.p3 put GPUs' $F$ and $B$ in.

# %% [markdown] id="md-12-06"
# One 2-rank launch runs the chapter's program, all four parts. Its first: the MLP and the attention
# block from scratch and with `parallelize_module`, their collectives counted:

# %% tags=["nbval-check-output"]
run = disttutor.launch(PROGRAM, nproc=RANKS, args=CFG, **LAUNCH)   # --part all: tp, sp, cp, ep in one job
print(run.command)
TP = run.results[0]["tp"]
for name, r in TP.items():
    print(f"{name:18} forward: {calls(r['forward']):14} backward: {calls(r['backward'])}")

# %% tags=["proof", "nbval-check-output"]
print(check_tp_collectives(run.results, TOL))  # and every block equals one process, output and gradients

# %% [markdown] id="md-12-07"
# DTensor attention all-reduces 3 times in backward, the one from scratch once: `q`, `k` and `v` are
# three `ColwiseParallel` layers, and each one's input hook all-reduces its share of the input
# gradient. By hand, autograd adds the three shares at `x` first. A fused `qkv` Linear would reduce once.
#
# <details><summary><b>The article says</b> tensor parallelism and 3D parallelism are "more
# efficient communication algorithms" (§11.2)</summary>
#
# Today: they are ways to split the model, and they add communication (the counts above) on top of
# data parallelism's.
# </details>

# %% [markdown] id="md-12-26"
# ## Exercise 12.1 — the row-parallel linear's backward
#
# The row-parallel layer as one `torch.autograd.Function`, forward given:
# `y = all_reduce(x_shard @ w_shard.T) + bias`, with `x_shard` `[tokens, in/t]`, `w_shard`
# `[out, in/t]` and `bias` whole. Write `backward(ctx, grad_y)` returning the three gradients; decide
# first whether it must communicate. The checker compares them with an unsplit `nn.Linear`'s and
# records every collective your backward calls.

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
# Under TP, LayerNorm, dropout and the residual add run on the **whole** sequence on every rank, and
# LayerNorm and dropout store what they save whole. **Sequence parallelism** (SP; Korthikanti et al., 2022) runs them on
# `s/t` tokens per rank, and splits the all-reduce into its two halves:
#
# - **all-gather** the sequence shards before the column-parallel layer (backward: reduce-scatter);
# - **reduce-scatter** the row-parallel layer's partial sums, so each rank gets its own tokens'
#   summed output (backward: all-gather).
#
# A ring reduce-scatter and a ring all-gather each send $\frac{t-1}{t}N$ numbers per rank: together
# $2\frac{t-1}{t}N$, the all-reduce they replace. The swap moves no extra bytes.

# %% [markdown] id="md-12-27"
# Activations are laid out `[seq, batch, dim]`, so a sequence shard is contiguous. The collectives are
# `dist.all_gather_single` and `dist.reduce_scatter_single`. LayerNorm's weights (and the output bias)
# stay replicated, but each rank computes their gradients from its own tokens: partial sums, completed
# by one all-reduce after backward.

# %%
show_code("disttutor.tensor_parallel.sp", "sp_block")

# %% tags=["schematic"]
tp_block_figure(CFG.seq, CFG.batch, CFG.dim, CFG.hidden, t=RANKS, sequence_parallel=True)
plt.show()

# %% [markdown] id="md-12-38" tags=["caption"]
# *Figure: the same block under SP: each rank's own tokens outside, an all-gather in, a reduce-scatter out, the same bytes sent.*

# %% [markdown] id="md-12-10"
# **What each keeps for backward**, per rank, in fp32 numbers:
#
# | saved tensor | TP | SP |
# |---|---|---|
# | LayerNorm input, dropout mask | `2·sbd` | `2·sbd/t` |
# | LayerNorm mean and 1/std | `2·sb` | `2·sb/t` |
# | column layer input (all-gathered under SP) | `sbd` | `sbd` |
# | GELU and row layer inputs | `2·sbh/t` | `2·sbh/t` |
#
# For `s = 16, b = 2, d = 16, h = 32, t = 2`: TP keeps 10,496 bytes, SP 8,320 (21 % less). As rings,
# both send 4,096 bytes, SP 192 more for LayerNorm's and the bias's `3d` gradients. Section 1's run
# (ring bytes *derived* from the recorded calls' sizes), against one process on the same data and mask:

# %% tags=["nbval-check-output"]
SP = run.results[0]["sp"]
for mode in ("tp", "sp"):
    r = SP[mode]
    print(f"{mode.upper()}: saved for backward {r['saved_bytes']:,} bytes; ring bytes sent {r['ring_bytes']:,.0f}")
    print(f"    forward {calls(r['forward'])}; backward {calls(r['backward'])}")

# %% tags=["proof", "nbval-check-output"]
print(check_sp_collectives(run.results, TOL))  # and both blocks equal one process, output and all gradients

# %% tags=["proof", "nbval-check-output"]
s, b, d, h, t, f32 = CFG.seq, CFG.batch, CFG.dim, CFG.hidden, RANKS, 4   # the run's sizes, fp32
tp_formula = (3 * s * b * d + 2 * s * b + 2 * s * b * h // t) * f32                  # the table's TP column
sp_formula = (2 * s * b * d // t + 2 * s * b // t + s * b * d + 2 * s * b * h // t) * f32
print(check_sp_bytes(SP, tp_formula, sp_formula, (2 * d + d) * f32 * 2 * (t - 1) / t))

# %% tags=["proof", "nbval-check-output"]
print(check_block_ring_bytes(SP, s, b, d, t))

# %% [markdown] id="md-12-11"
# One tensor is left whole, the column layer's gathered input: Megatron keeps only its shard
# and gathers again in backward (7,296 bytes here, *derived*).

# %% [markdown] id="md-12-05"
# ## Exercise 12.2 — sequence parallelism's all-gather and its backward
#
# Write `GatherSeq`, a `torch.autograd.Function`: `forward(ctx, shard)` all-gathers the sequence
# shards `[seq/t, batch, dim]` in rank order; `backward(ctx, grad)` returns the gradient of this
# rank's shard, sending each rank no more than its own rows' sum (an all-reduce then a slice is right but
# sends twice the bytes, and is rejected). The checker compares outputs and input gradients with one process, on 2 and 4 ranks,
# alone and inside an SP block.

# %%
card("12.2")

# %%
class GatherSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, shard):
        raise NotImplementedError("Exercise 12.2: all-gather the sequence shards along dim 0, in rank order")

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("Exercise 12.2: this rank's rows of the gradient, summed over the ranks")


# %%
hint("12.2")

# %%
from disttutor.checks.sequence_parallel import check_gather_seq

print(check_gather_seq(GatherSeq))

# %% [markdown] id="md-12-12"
# ## 3. Context parallelism: ring attention
#
# SP still gathers the whole sequence for attention. **Context parallelism** (CP) keeps it split
# *through* attention. In **ring attention** (Liu et al., 2023) each rank passes its key/value block
# to the next rank, `n - 1` times, computing its queries against the block it holds meanwhile.

# %% [markdown] id="md-12-28"
# No rank sees all the scores: each step gives the softmax over *one block* of keys. The **online
# softmax** (as in FlashAttention) merges those results exactly. A block's result is its output,
# normalised by its own softmax denominator, and `lse`, the **log-sum-exp** of its scores (the log of
# that denominator); over two blocks the denominator is `e^lse_a + e^lse_b`. Exercise 12.3, below, has you
# write that merge.

# %% [markdown] id="md-12-13"
# The ring: post the send of the current block and the receive of the next, compute, wait, swap.
# With a causal mask, a *later* rank's keys are all in my queries' future: that block is skipped but
# still passed on.

# %%
show_code("disttutor.tensor_parallel.ring_attention", "ring")

# %% tags=["schematic"]
from disttutor.viz.ring_attention_steps import ring_attention_figure

ring_attention_figure(CFG.seq, CFG.batch, CFG.dim, n=RANKS)
plt.show()

# %% [markdown] id="md-12-39" tags=["caption"]
# *Figure: the causal attention matrix in blocks: each score block is computed by its queries' rank at the step its keys arrive; blocks above the diagonal are skipped.*

# %% [markdown] id="md-12-33"
# Each rank sends `n - 1` blocks of keys and values, `2·b·(s/n)·d` numbers each: on 2 ranks with
# `s = 16, b = 2, d = 16`, one send of 2,048 bytes. Section 1's run (its recorded sends' sizes):

# %% tags=["nbval-check-output"]
for rank, q in enumerate(run.results):
    r = q["cp"]
    print(f"rank {rank}: {r['block_tokens']} tokens; {calls(r['calls'])}; sent {r['sent_bytes']:,.0f} bytes")

# %% tags=["proof", "nbval-check-output"]
print(check_ring_attention([q["cp"] for q in run.results], TOL))  # n - 1 steps of the ring

# %% [markdown] id="md-12-14"
# The causal *work* is uneven: rank `r` computes `r + 1` of the `n` blocks. torch's experimental
# `context_parallel` and Megatron balance it by giving each rank one chunk from each end of the
# sequence.

# %% [markdown] id="md-12-29"
# ## Exercise 12.3 — the online-softmax merge
#
# Write `merge(out_a, lse_a, out_b, lse_b) -> (out, lse)`: `out_*` are
# `[..., queries, d]` outputs over two disjoint key blocks, `lse_*` their log-sum-exps `[..., queries]`.
# The checker tries the usual traps (blocks of different size, scores that overflow `exp`, a block
# that saw no key: `lse = -inf`), then runs the ring with your merge.

# %%
card("12.3")

# %%
def merge(out_a, lse_a, out_b, lse_b):
    raise NotImplementedError("Exercise 12.3: weigh each block by its share of the softmax denominator")


# %%
hint("12.3")

# %%
print(check_merge(merge))

# %% [markdown] id="md-12-15"
# ## 4. Expert parallelism: a mixture of experts over the ranks
#
# A **mixture-of-experts** (MoE) layer replaces one feed-forward block by `E` **experts** plus a
# **router**, a Linear that scores each token against each expert. Each token goes to its **top-k**
# experts, whose outputs are summed, weighted by the **gates** (a softmax over the k chosen scores).
# Expert parameters grow `E` times, compute per token `k` times.

# %% [markdown] id="md-12-30"
# **Expert parallelism** (EP) puts `E/n` experts on each rank; each rank keeps its own batch and
# sends tokens to their experts and back with `dist.all_to_all_single` (rank `i`'s `j`-th chunk goes
# to rank `j`, chunks of any size). One layer makes three: the counts, the tokens (**dispatch**), the
# outputs back (**combine**).

# %%
show_code("disttutor.tensor_parallel.moe", "ep")

# %% tags=["schematic"]
from disttutor.viz.moe_dispatch import moe_dispatch_figure

moe_dispatch_figure([q["ep"]["tokens_per_expert"] for q in run.results], dim=CFG.dim)
plt.show()

# %% [markdown] id="md-12-40" tags=["caption"]
# *Figure: the run's dispatch and combine all-to-alls as matrices: token rows each rank sends to each expert's rank, and the same rows back.*

# %% tags=["nbval-check-output"]
EP = [q["ep"] for q in run.results]   # from section 1's run
for rank, r in enumerate(EP):
    print(f"rank {rank} hosts experts {r['experts_here']}; its tokens chose {dict(enumerate(r['tokens_per_expert']))}")
n_exp = len(EP[0]["tokens_per_expert"])
per_expert = [sum(r["tokens_per_expert"][e] for r in EP) for e in range(n_exp)]
rows = [sum(per_expert[r * n_exp // len(EP):(r + 1) * n_exp // len(EP)]) for r in range(len(EP))]
print(f"busiest expert: {max(per_expert) / min(per_expert):.1f}x the tokens of the idlest; "
      f"busiest rank: {max(rows) / min(rows):.2f}x the rows of the other")

# %% tags=["proof", "nbval-check-output"]
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

# %% [markdown] id="md-12-41" tags=["caption"]
# *Figure: tokens routed to each expert, stacked by the rank they came from (measured); unequal bars are the imbalance printed above.*

# %% [markdown] id="md-12-34"
# Even an untrained router on random tokens loads experts unevenly (the ratios above), and every rank
# waits for the busiest at the combine. So MoE training usually adds a *load-balancing* loss and
# often caps each expert's tokens (the *capacity factor*).

# %% [markdown] id="md-12-16"
# ## 5. DTensor placements, drawn from what the ranks hold
#
# `parallelize_module` and FSDP2 store the parameters they split as **DTensors**: a logical tensor, a
# **device mesh** and one **placement** per mesh dimension. `Shard(d)` cuts along tensor dimension
# `d`, `Replicate()` copies, `Partial()` keeps a full-shaped *addend* per rank (the tensor is their
# sum). With tensors whose elements are their own indices, `to_local()` shows what each of 4 ranks
# stores:

# %%
pl = disttutor.launch(PROGRAM, nproc=4, args={"part": "placements"}, **LAUNCH)
print(pl.command)
viz.one_dim_figure(pl.results);

# %% [markdown] id="md-12-42" tags=["caption"]
# *Figure: `Shard(0)`, `Shard(1)` and `Replicate()` on 4 ranks: the ranks storing each element; below, `Partial()`'s four addends and their sum.*

# %% tags=["proof", "nbval-check-output"]
ONE = [r["placements"]["one_dim"] for r in pl.results]
print(check_one_dim_placements(ONE))

# %% [markdown] id="md-12-17"
# On a 2-D mesh `(dp=2, tp=2)` a placement is given **per mesh dimension**, left to right:
# `(Shard(0), Shard(0))` cuts rows over `dp`, then each half's rows over `tp`.

# %% [markdown] id="md-12-32"
# **FSDP × TP.** Large jobs compose the two: TP inside a node, where fast links carry an all-reduce
# in every block, FSDP across nodes:
#
# ```python
# mesh = init_device_mesh("cuda", (nodes, gpus_per_node), mesh_dim_names=("dp", "tp"))
# parallelize_module(model, mesh["tp"], plan)   # TP first
# fully_shard(model, mesh=mesh["dp"])           # then FSDP2 over the TP shards
# ```
#
# The last panel is this on one weight: rows over `tp` first, then each TP shard's rows over `dp`:

# %%
viz.two_dim_figure(pl.results);

# %% [markdown] id="md-12-43" tags=["caption"]
# *Figure: an 8 × 8 weight on the 2 × 2 mesh under four placements: which ranks store each element; compare `(S(0), S(0))` with FSDP2 over TP.*

# %% tags=["nbval-check-output"]
TWO = [r["placements"]["two_dim"] for r in pl.results]
coords = [tuple(r["placements"]["coordinate"]) for r in pl.results]
rows_of = lambda held: sorted({i // 8 for i in held})
nested = {c: rows_of(t["(S(0), S(0))"]["held"]) for c, t in zip(coords, TWO)}
strided = {c: rows_of(t["FSDP2 over TP"]["held"]) for c, t in zip(coords, TWO)}
print("rows held, (Shard(0), Shard(0)):", nested)
print("rows held, FSDP2 over TP:       ", strided)
print("FSDP2 over TP's placements:", TWO[0]["FSDP2 over TP"]["placements"])

# %% tags=["proof", "nbval-check-output"]
print(check_two_dim_placements(nested, strided, TWO[0]["FSDP2 over TP"]["placements"]))

# %% [markdown] id="md-12-35"
# Coordinate (0, 1) holds rows 2–3 under `(Shard(0), Shard(0))` but 4–5 under FSDP2 over TP: `dp = 0`
# stores rows 0, 1, 4, 5, the same sub-block *inside each* `tp` shard. DTensor writes that
# `_StridedShard(dim=0, sf=2)`; `full_tensor()` and DCP put the rows back in order.

# %% [markdown] id="md-12-45"
# ## Puzzles
#
# One exact answer each: write yours into `mine`, then run the cell.

# %% tags=["puzzle"]
puzzle("12.z1", mine=None)

# %% tags=["puzzle"]
puzzle("12.z2", mine=None)

# %% tags=["puzzle"]
puzzle("12.z3", mine=None)

# %% tags=["puzzle"]
puzzle("12.z4", mine=None)

# %% [markdown] id="md-12-44"
# ## Worked problems
#
# Write your number into `mine`, run the cell, then open the worked answer.

# %% tags=["problem"]
problem("12.p1", mine=None)

# %% tags=["problem"]
problem("12.p2", mine=None)

# %% tags=["problem"]
problem("12.p3", mine=None)

# %% tags=["problem"]
problem("12.p4", mine=None, seq=CFG.seq, batch=CFG.batch, dim=CFG.dim, t=RANKS)

# %% tags=["problem"]
problem("12.p5", mine=None)

# %% [markdown] id="md-12-19" tags=["takeaways"]
# ## Key takeaways
#
# - **Tensor parallelism**: column- then row-parallel, one all-reduce of `[s·b, d]` forward (`g`) and
#   one backward (`f`) per block; the bias is added after the sum.
# - **Sequence parallelism**: the same bytes as an all-gather and a reduce-scatter, with LayerNorm
#   and dropout sharded over the sequence: less activation memory.
# - **Context parallelism**: key/value blocks travel a ring (`n - 1` sends per rank); the online
#   softmax merges the partial results exactly.
# - **Expert parallelism**: experts spread over ranks, tokens moved by three all-to-alls; the router
#   decides the load.
# - A **DTensor** has one placement per mesh dimension; FSDP × TP gives `_StridedShard`.

# %% [markdown] id="md-12-20" tags=["question"]
# ## Check your understanding
#
# **1.** Why is the row-parallel layer's bias added after the all-reduce? What would the output be,
# on `t` ranks, if each rank added it before?
#
# <details><summary>Answer</summary>
#
# The all-reduce sums all `t` addends, so the output would carry `t × bias`. Added after the sum, it
# counts once. Its gradient is the output gradient summed over tokens, on every rank (Exercise 12.1).
# </details>

# %% [markdown] id="md-12-21" tags=["question"]
# **2.** Sequence parallelism sends the same bytes as tensor parallelism. Where does it save memory,
# and why does it add an all-reduce after backward?
#
# <details><summary>Answer</summary>
#
# Where TP replicates: LayerNorm's input and statistics and the dropout mask are stored for `s/t`
# tokens per rank. LayerNorm's weights stay replicated, but each rank's gradient of them covers its
# own tokens only: a partial sum, completed by one all-reduce.
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
       explain="n - 1 = 3: a block needs 3 hops to reach every rank, and is sent even when the mask skips it.")

# %%
disttutor.course.chapters.glossary(12)
