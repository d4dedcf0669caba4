# %% [markdown] id="md-01-01"
# # Chapter 1 — Why distributed training?
#
# *Source: §1–§2 of the article "PyTorch distributed training: from beginner to master".*
#
# Training leaves one device for two reasons: its state no longer fits in the device's memory, or the
# run takes too long. This chapter answers two questions with measurements:
#
# 1. **How much memory does training need?** The formulas (weights, gradients, optimizer states,
#    activations), checked against real tensors, then a calculator of what data parallelism,
#    ZeRO/FSDP sharding, tensor and pipeline parallelism each save.
# 2. **What does each kind of parallelism split?** One tiny model, run four ways (data, tensor, layer,
#    pipeline) on four real processes, each rank reporting what it holds.
#
# A box corrects the article's definition of pipeline parallelism. The chapter ends with the article's
# list of challenges, each linked to the chapter that handles it.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(1)

# %% [markdown] id="md-01-02" tags=["opening"]
# **After this chapter you can**
# * estimate the memory training needs — weights, gradients, optimizer states, activations — and what ZeRO-1/2/3 divide;
# * say what data, tensor, layer-wise and pipeline parallelism each split, and check it on real ranks;
# * name the challenges of distributed training and the chapter that handles each.

# %%
import math

import matplotlib.pyplot as plt
import torch
from torch import nn

import disttutor
from disttutor.sharding import memory as mem
from disttutor.workloads.data import regression
from disttutor.workloads.models import MLP, seeded
from disttutor.viz.memory import calculator, calculator_view
from disttutor.viz.parallelism import ownership_picture
from disttutor.viz.zero_partition_traffic import traffic_rows, zero_schematic
from disttutor.course.problems import problem
from disttutor.course.puzzles import puzzle

torch.manual_seed(0)
print("torch", torch.__version__)

# %% [markdown] id="md-01-03"
# ## 1. Where the memory goes
#
# Training a model keeps four kinds of tensors alive on the device:
#
# | part | what it is | grows with |
# |---|---|---|
# | **weights** | the parameters | parameters `P` |
# | **gradients** | one per parameter, filled by `backward()` | `P` |
# | **optimizer states** | e.g. Adam's `exp_avg` and `exp_avg_sq`; in mixed precision also an fp32 master copy of the weights | `P` |
# | **activations** | what the forward pass saves for the backward pass | batch × sequence × width × depth |
#
# Bytes per parameter (the accounting of the ZeRO paper, Rajbhandari et al. 2020):
#
# | precision | optimizer | weights | grads | optimizer states | total |
# |---|---|---|---|---|---|
# | fp32 | SGD | 4 | 4 | 0 | 8 |
# | fp32 | SGD + momentum | 4 | 4 | 4 | 12 |
# | fp32 | Adam | 4 | 4 | 8 | **16** |
# | mixed (fp16/bf16 + fp32 master) | Adam | 2 | 2 | 12 (master 4 + 8) | **16** |
#
# Adam costs 16 bytes per parameter *either way*: mixed precision saves activation memory and
# time, not optimizer memory. `disttutor.sharding.memory.bytes_per_param` holds this table; the next cells
# check it against the tensors PyTorch really allocates for a small model.

# %% tags=["nbval-check-output"]
model = seeded(MLP, 0, 256, [512, 512], 10)
x, target = torch.randn(64, 256), torch.randn(64, 10)
P = sum(p.numel() for p in model.parameters())
n_tensors = len(list(model.parameters()))
print(f"MLP: {P:,} parameters in {n_tensors} tensors; bytes per parameter after one step:")

measured = {}
for name, make_opt in [("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1)),
                       ("momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
                       ("adam", lambda ps: torch.optim.Adam(ps, lr=1e-3))]:
    m = seeded(MLP, 0, 256, [512, 512], 10)
    opt = make_opt(m.parameters())
    nn.functional.mse_loss(m(x), target).backward()
    opt.step()  # optimizer states are created lazily, at the first step
    got = measured[name] = mem.measured_state_bytes(m, opt)
    print(f"  {name:9s} weights {got['weights'] / P:g}  gradients {got['gradients'] / P:g}  "
          f"optimizer {got['optimizer'] / P:g}  (+ {got['step_counters']} B of step counters)")

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims import ch01

print(ch01.check_state_bytes(measured, P, n_tensors))

# %% [markdown] id="md-01-04"
# Those are the table's fp32 rows, to the byte; Adam's `step` counter is one scalar per tensor, not
# per parameter. The mixed row needs a second, fp32 copy of the weights. The next cell builds that
# scheme by hand — a bf16 model, an fp32 master copy, Adam on the master — and measures it.

# %% tags=["nbval-check-output"]
half = seeded(MLP, 0, 256, [512, 512], 10).to(torch.bfloat16)
master = [p.detach().float().requires_grad_() for p in half.parameters()]  # fp32 copy the optimizer updates
opt = torch.optim.Adam(master, lr=1e-3)
nn.functional.mse_loss(half(x.bfloat16()), target.bfloat16()).backward()
for p16, p32 in zip(half.parameters(), master):
    p32.grad = p16.grad.float()  # (a real implementation reuses one buffer for this)
opt.step()
mixed = mem.measured_state_bytes(half)  # 16-bit weights and gradients
mixed["optimizer"] = (sum(p.numel() * p.element_size() for p in master)  # the fp32 master copy
                      + sum(t.numel() * t.element_size() for st in opt.state.values()
                            for k, t in st.items() if k != "step"))  # Adam's exp_avg, exp_avg_sq
print("bf16 + fp32 master + Adam, bytes per parameter:", {k: mixed[k] // P for k in ("weights", "gradients", "optimizer")})

# %% tags=["proof", "nbval-check-output"]
print(ch01.check_mixed_precision(mixed, P))

# %% [markdown] id="md-01-23"
# `torch.autocast` (the API chapter 8 uses) is a different scheme: it runs eligible operations (such
# as `Linear`'s matmul) in 16 bits and leaves the parameters, and so their gradients, in fp32. The
# dtypes it produces:

# %% tags=["nbval-check-output"]
auto = seeded(MLP, 0, 256, [512, 512], 10)
with torch.autocast("cpu", dtype=torch.bfloat16):
    y = auto(x)
nn.functional.mse_loss(y.float(), target).backward()
print("output", y.dtype, "| weight", auto[0].weight.dtype, "| gradient", auto[0].weight.grad.dtype)

# %% tags=["proof", "nbval-check-output"]
print(ch01.check_autocast(y, auto))

# %% [markdown] id="md-01-05"
# ### Activations
#
# Activations are what autograd *saves* in the forward pass to compute the backward pass. We can
# watch it do so with `torch.autograd.graph.saved_tensors_hooks` (`mem.saved_activation_bytes`
# wraps it, counting each storage once and skipping parameters).
#
# For our MLP the count is exact: every `Linear` saves its input (needed for the weight gradient),
# every `ReLU` its output — which *is* the next `Linear`'s input, stored once. So the MLP saves
# `batch × (d_in + Σ hidden)` numbers:

# %% tags=["nbval-check-output"]
saved = {}
for batch in (16, 64):
    xb = torch.randn(batch, 256)
    got = mem.saved_activation_bytes(lambda: model(xb).sum(), params=model.parameters())
    want = mem.mlp_activation_bytes(batch, 256, [512, 512], elem_bytes=4)  # batch x (256 + 512 + 512) x 4 B
    saved[batch] = (got, want)
    print(f"batch {batch:3d}: autograd saved {got:,} bytes; the formula says {want:,}")

# %% tags=["proof", "nbval-check-output"]
assert all(got == want for got, want in saved.values()), saved  # integers: exact
print("✓ autograd saved exactly batch × (d_in + Σ hidden) × 4 bytes, at batch 16 and 64")

# %% [markdown] id="md-01-06"
# For a Transformer layer we use the estimate of Korthikanti et al. (2022), written for `e`-byte
# activations, sequence `s`, micro-batch `b`, hidden `h`, heads `a`, tensor-parallel degree `t`:
#
# $$\text{bytes per layer} \approx s\,b\,h\,\bigl(4e + 2 + \tfrac{12e}{t}\bigr) + a\,s^2\,b\,\tfrac{2e+1}{t}
# \qquad(e=2,\ t=1:\ 34\,sbh + 5\,a s^2 b)$$
#
# It is an **estimate** for one implementation (Megatron-LM's, with 1-byte dropout masks); it leaves
# out embeddings and logits, and fused attention kernels (FlashAttention) do not store the
# `s × s` scores at all. So let us see how close it comes for PyTorch's own
# `nn.TransformerEncoderLayer` — and check our parameter formula `12h² + 13h` per layer on the way.

# %% tags=["nbval-check-output"]
h, a, s, b = 64, 4, 32, 2
layer = seeded(nn.TransformerEncoderLayer, 0, h, a, 4 * h, dropout=0.1, batch_first=True)
n_layer = sum(p.numel() for p in layer.parameters())  # 12h^2 + 13h: the per-block term of mem.transformer_params
xs = torch.randn(b, s, h)
got = mem.saved_activation_bytes(lambda: layer(xs), params=layer.parameters())
est = mem.activation_bytes_per_layer(s, b, h, a, elem_bytes=4)
ratio = got / est
print(f"parameters {n_layer:,} (12h² + 13h = {12 * h * h + 13 * h:,})")
print(f"activations: measured {got:,} B, estimate {est:,.0f} B, ratio {ratio:.2f}")

# %% tags=["proof", "nbval-check-output"]
print(ch01.check_transformer_layer(n_layer, h, ratio))

# %% [markdown] id="md-01-07"
# PyTorch eager saved more than the estimate (the ratio printed above): the estimate counts the
# tensors of Megatron-LM's layer, not of this one. Good enough to size a job; to be sure, measure your
# own model (chapter 9 reads each rank's peak memory from the profiler; on a GPU,
# `torch.cuda.memory_summary()` gives the CUDA allocator's account).
#
# ## 2. The memory calculator
#
# `disttutor.sharding.memory.per_device` turns the formulas into bytes per device for a GPT-style model
# (parameters `12Lh² + 13Lh + (V + s)h + 2h`), and says how each strategy on `N` devices changes each part:
#
# * **data parallel (DP)**: every device keeps a full copy of the weights, gradients and optimizer
#   states; only the batch is split, so only activations shrink.
# * **ZeRO-1 / -2 / -3** (FSDP's `fully_shard` is ZeRO-3 by default): shard the optimizer states / +
#   gradients / + weights over the `N` data-parallel replicas (`÷ N`), gathering weights layer by
#   layer when needed (that transient buffer is ignored here).
# * **tensor parallel**: each layer's matrices split `N` ways: model states `÷ N`, most activations
#   `÷ N`, but every device still sees the whole batch.
# * **pipeline parallel**: each device holds `L/N` layers: model states `÷ N`; we assume the GPipe
#   schedule, where a stage keeps its layers' activations for *all* micro-batches until the backward.
#
# First the picture of ZeRO for the calculator's default set-up, then the calculator itself (`calculator_view`).

# %% tags=["schematic"]
calc = dict(preset="GPT 7B-like (32 x 4096)", batch=32, seq=1024, precision="mixed", optimizer="adam", n=8)
zero_schematic(**calc)  # the same set-up as the calculator's figure below
plt.show()

# %% [markdown] id="md-01-24" tags=["caption"]
# *Figure: each rank keeps only its own slice (filled) of a sharded state; ZeRO-3 holds the least of the four but sends 1.5× DDP's bytes.*

# %% [markdown] id="md-01-25" tags=["derivation"]
# **Derivation: the bytes each rank sends per step.** $S$ is the gradients' bytes (as many as the weights the forward uses), $n$ the ranks;
# $b$ sequences of $s$ tokens, width $h$, $e$ bytes per activation, $L$ layers.
#
# * DDP: a ring all-reduce is a reduce-scatter plus an all-gather, $\frac{n-1}{n}S$ each: $2\frac{n-1}{n}S$
# * ZeRO-1/2: reduce-scatter the gradients, update one shard, all-gather the new weights: the same $2\frac{n-1}{n}S$
# * ZeRO-3: all-gather the weights for the forward, again for the backward, reduce-scatter the gradients: $3\frac{n-1}{n}S$
# * tensor parallel: two all-reduces of $bshe$ bytes per layer forward, two backward: $4L \cdot 2\frac{n-1}{n}\,bshe$
# * pipeline: a middle stage sends its output forward and its input's gradient back: $2\,bshe$, whatever $S$ is
#
# Time is then about bytes$/B$, plus α per message; the `sent` column below is this count.

# %% tags=["nbval-check-output"]
rows, fig = calculator_view(**calc)
plt.show()
sent = {r["strategy"]: r["sent"] for r in traffic_rows(**calc)}  # GiB each device sends per step
print("GiB per device:")
for r in rows:
    print(f"  {r['strategy']:15s}", "  ".join(f"{k} {r[k]:.1f}" for k in ("weights", "gradients", "optimizer",
                                                                         "activations", "total")),
          f"  sent {sent[r['strategy']]:.1f}")

# %% tags=["proof", "nbval-check-output"]
cfg = mem.TrainingSetup(layers=32, hidden=4096, heads=32, seq=1024, batch=32)
print(ch01.check_calculator(rows, cfg.params, n=8, device_gib=80))

# %% tags=["proof", "nbval-check-output"]
print(ch01.check_traffic(sent, cfg, n=8))

# %% [markdown] id="md-01-26" tags=["caption"]
# *Figure: GiB per device for each strategy; compare each bar's height with the dashed line of one device's memory.*

# %% [markdown] id="md-01-08"
# Read the bars: plain data parallelism (`DP x8`) leaves every device with the same weights, gradients
# and Adam states as one device alone — it buys speed, not room. ZeRO/FSDP removes that redundancy;
# tensor and pipeline parallelism split the model itself (tensor parallelism keeps the whole batch on
# every device, hence its larger activations). The `sent` column is the price of the room: here ZeRO-3 sends
# 1.5× DDP's bytes and tensor parallelism more still, while a pipeline stage sends only activations and their gradients.
#
# The article's §2.1 motivates all this with models grown "from millions to hundreds of billions or
# even trillions of parameters (GPT-3, PaLM, ...)". GPT-3 has 175 billion (*reported*: Brown et al.
# 2020; the article gives no count). Its model states alone, before a single activation (*derived*):

# %% tags=["nbval-check-output"]
gpt3 = 175e9  # reported: Brown et al. 2020 (an input, not a result)
gib = gpt3 * sum(mem.bytes_per_param("mixed", "adam").values()) / mem.GIB
print(f"GPT-3 model states: {gib:,.0f} GiB -> at least {math.ceil(gib / 80)} devices of 80 GiB, even fully sharded")

# %% [markdown] id="md-01-09"
# Now try it yourself: change the model, the batch, the sequence length, the precision, the
# optimizer and the number of devices. (Strategies a shape cannot be split into — e.g. 12 layers
# over 8 pipeline stages — are left out rather than rounded.)

# %%
calculator()

# %% [markdown] id="md-01-27" tags=["caption"]
# *Figure: move a control and watch which bars cross the dashed line of one device's memory.*

# %% [markdown] id="md-01-10"
# ### Exercise 1.1 — memory per device under DDP and ZeRO-1/2/3
#
# Write `zero_memory(n_params, bytes_per_param, world, stage)`: the bytes **one device** holds for
# the weights, the gradients and the optimizer states when `n_params` parameters are trained on
# `world` data-parallel devices, plain DDP (`stage=0`) or ZeRO stage 1, 2 or 3. `bytes_per_param` is
# the table measured above, e.g. `mem.bytes_per_param("mixed", "adam")`. Return a dict with the keys
# `"weights"`, `"gradients"`, `"optimizer"`. The checker compares your function with the calculator
# for two model sizes, both precisions, three optimizers, 1, 2, 4 and 8 devices and every stage, and with the
# bytes a real model and `torch.optim.Adam` hold after one step.

# %%
card("1.1")

# %%
def zero_memory(n_params, bytes_per_param, world, stage):
    """Exercise 1.1: bytes per device of "weights", "gradients", "optimizer" (a dict)."""
    raise NotImplementedError("Exercise 1.1: which parts does each ZeRO stage divide by world?")


# %%
hint("1.1")


# %%
from disttutor.checks.memory import check_zero_memory

print(check_zero_memory(zero_memory))

# %% [markdown] id="md-01-11"
# ## 3. What each kind of parallelism splits
#
# | strategy | each device holds | each device sees | communication |
# |---|---|---|---|
# | data parallel | the whole model | 1/N of the samples | all-reduce of gradients |
# | tensor (intra-layer) parallel | 1/N of *every* layer | all samples | all-reduce of activations, inside every layer block |
# | layer (inter-layer) model parallel | a block of whole layers | all samples | send activations to the next device |
# | pipeline parallel | a block of whole layers | all samples, as micro-batches | same sends, overlapped |
#
# Pipeline parallelism is layer-wise model parallelism **plus micro-batching**: the batch is cut into
# micro-batches so that stage 1 works on micro-batch 0 while stage 0 already works on micro-batch 1.
# No weight is replicated and no gradient is averaged. Combining data parallelism with pipeline or
# model parallelism is *hybrid* or "3D" parallelism (the article's §7.1, chapter 7).
#
# <details><summary><b>The article says</b> pipeline parallelism "combines data parallelism and model
# parallelism"</summary>
#
# Its §2.1 lists data parallelism (split the data), model parallelism (split the model) and pipeline
# parallelism, which "combines data parallelism and model parallelism for more efficient training".
# Today: "model parallelism" covers two different splits (the table's tensor and layer rows), and a
# pipeline holds no replica and averages no gradient. Section 3.5 measures the difference.
# </details>
#
# The rest of this section runs small MLPs on the same 32 samples, each way on 4 real ranks.

# %% [markdown] id="md-01-13"
# ### 3.1 Data parallelism: split the samples
#
# Every rank builds the whole model and takes the samples `r, r+N, r+2N, ...` (what
# `torch.utils.data.DistributedSampler` hands rank `r` without shuffling). Each computes the mean loss
# over *its* samples; an all-reduce then averages the gradients. The shards are the same size, so the
# average of the shard means is the mean over all samples: every rank should end with the full-batch
# gradient. Four live ranks (`%ranks`, chapter 0) run it as a learner would write it:

# %%
%load_ext disttutor
%ranks start -n 4

# %%
%%ranks
from disttutor.workloads.data import regression
from disttutor.workloads.models import MLP, seeded

X, Y = regression(n=32, d_in=16, d_out=4, seed=0).tensors  # the same 32 samples on every rank
model = seeded(MLP, 0, 16, [32, 32, 32], 4)                 # the same weights on every rank
mine = list(range(rank, 32, world_size))                    # my samples: r, r+N, r+2N, ...
nn.functional.mse_loss(model(X[mine]), Y[mine]).backward()  # the mean over MY samples
for p in model.parameters():
    dist.all_reduce(p.grad)                                 # the sum over the ranks ...
    p.grad /= world_size                                    # ... / N: the mean over ALL samples
grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
print(f"rank {rank}: samples {mine}")

# %%
%ranks pull mine
%ranks pull grad

# %% tags=["proof", "nbval-check-output"]
X, Y = regression(n=32, d_in=16, d_out=4, seed=0).tensors  # the same data, in this one process
ref = seeded(MLP, 0, 16, [32, 32, 32], 4)  # the whole model, the whole batch
nn.functional.mse_loss(ref(X), Y).backward()
g_ref = torch.cat([p.grad.reshape(-1) for p in ref.parameters()])
print(ch01.check_data_parallel(mine, grad, g_ref, n_samples=32))

# %%
ownership_picture("data parallel", mine, 32, "sample index",
                  "each rank processes 1/N of the samples (and holds all layers)")
plt.show()

# %% [markdown] id="md-01-28" tags=["caption"]
# *Figure: each sample is coloured in the row of the one rank that processed it: r, r+N, r+2N, ...*

# %% [markdown] id="md-01-34"
# ### Exercise 1.2 — the mean and variance of uneven shards
#
# Real shards are often uneven. Write `global_stats(x_local)`: each rank passes its own samples,
# shape `(n_r, 3)` with `n_r` possibly 0, and every rank gets back `(mean, var)` of all ranks' samples
# (the variance divides by the total count), leaving `x_local` unchanged. The checker compares with
# one process on all the data, on 2 and 3 ranks.

# %%
card("1.2")

# %%
def global_stats(x_local):
    """Exercise 1.2: (mean, var) over every rank's samples; x_local is this rank's (n_r, 3) shard."""
    raise NotImplementedError("Exercise 1.2: combine each rank's partial results with a collective")


# %%
hint("1.2")


# %%
from disttutor.checks.shard_stats import check_global_stats

print(check_global_stats(global_stats))

# %% [markdown] id="md-01-14"
# ### 3.2 Tensor (intra-layer) parallelism: split every layer
#
# Megatron-LM's split of the MLP block `Linear(16→32) → ReLU → Linear(32→4)`: rank `r` keeps 8 of the
# 32 hidden units — 8 rows of the first weight and the matching 8 columns of the second. The first
# layer needs no communication (ReLU is elementwise); the second produces a *partial sum* over each
# rank's hidden units, and one all-reduce adds the four parts. The last bias is added once, after it.

# %%
%%ranks
block = seeded(MLP, 0, 16, [32], 4)                 # Linear(16→32) → ReLU → Linear(32→4), the same everywhere
fc1, fc2 = block[0], block[2]
k = 32 // world_size
units = list(range(k * rank, k * (rank + 1)))       # my hidden units
with torch.no_grad():
    hid = torch.relu(X @ fc1.weight[units].T + fc1.bias[units])  # my rows of W1: no communication
    out = hid @ fc2.weight[:, units].T              # my columns of W2: a partial sum
    dist.all_reduce(out)                            # add the N partial sums
    out += fc2.bias                                 # the bias once, after the sum
print(f"rank {rank}: hidden units {units[0]}-{units[-1]}, output {tuple(out.shape)}")

# %%
%ranks pull units
%ranks pull out
%ranks stop

# %% tags=["proof", "nbval-check-output"]
ref_t = seeded(MLP, 0, 16, [32], 4)  # the unsplit block, in one process
with torch.no_grad():
    want_t = ref_t(X)
print(ch01.check_tensor_parallel(units, out, want_t, n_units=32))

# %%
ownership_picture("tensor parallel", units, 32, "hidden unit",
                  "each rank holds 1/N of every layer (and sees all samples)")
plt.show()

# %% [markdown] id="md-01-29" tags=["caption"]
# *Figure: each rank's row covers one contiguous block of the hidden units, and no unit sits on two ranks.*

# %% [markdown] id="md-01-12"
# The course's program `disttutor.programs.parallelism` runs all four splits of the table above
# under `torchrun`, every rank reporting what it held; the command is printed below. All four modes
# run in one job, one after the other, to pay the start-up cost once.

# %%
res = disttutor.launch("parallelism", nproc=4, args={"mode": "all"}, stream=False, timeout=120)
print(res.command)
W = res.world_size


def view(mode, *keys):
    """What each rank reported for one mode, one line a rank."""
    for r in range(W):
        print(f"rank {r}:", "  ".join(f"{k} {res.results[r][mode][k]}" for k in keys))


# %% [markdown] id="md-01-15"
# ### 3.3 Layer-wise model parallelism: split the layers
#
# Rank `r` keeps a block of whole layers and passes its output to rank `r+1` with `dist.send` /
# `dist.recv`. With the whole batch as one piece of work, rank 1 cannot start before rank 0 has
# finished — each rank counts its work with a logical clock (a *tick* is one piece of work, after
# both its own previous tick and the tick of the activation it received):

# %% tags=["nbval-check-output"]
view("layer", "layers", "params_held", "ticks")

# %% tags=["proof", "nbval-check-output"]
layers = [res.results[r]["layer"]["layers"] for r in range(W)]
with torch.no_grad():
    want_l = ref(X)  # the whole model, in one process
ticks = [res.results[r]["layer"]["ticks"] for r in range(W)]
print(ch01.check_layer_parallel(layers, res.results[W - 1]["layer"]["out"], want_l, ticks, n_modules=7))  # 4 Linear + 3 ReLU

# %%
ownership_picture("layer model parallel", layers, 7, "module of the Sequential (even = Linear, odd = ReLU)",
                  "each rank holds whole layers (and sees all samples)")
plt.show()

# %% [markdown] id="md-01-30" tags=["caption"]
# *Figure: each rank's row covers a contiguous block of whole modules, and the blocks differ in size.*

# %% [markdown] id="md-01-16"
# The model is split, but only one rank works at a time: with `N` devices, `1/N` utilisation. The
# split is also **unbalanced** (`params_held`): the middle layers are 32×32, the first 16×32 and the
# last 32×4. Balancing stages is a real problem of model and pipeline parallelism (chapter 7).
#
# ### 3.4 Pipeline parallelism: the same split, plus micro-batches
#
# The same program with `micro_batches=4`: the 32 samples go through as 4 micro-batches of 8.
# Rank 0 sends micro-batch 0 on and immediately starts micro-batch 1, so the stages overlap:

# %% tags=["nbval-check-output"]
view("pipeline", "layers", "micro_batches", "ticks")

# %% tags=["proof", "nbval-check-output"]
pl = [res.results[r]["pipeline"] for r in range(W)]
print(ch01.check_pipeline(pl, layers, want_l, M=4))

# %%
n_ticks_p = max(max(p["ticks"]) for p in pl) + 1
fig, ax = plt.subplots(figsize=(9, 1.9))
for r, p in enumerate(pl):
    for m, t in zip(p["micro_batches"], p["ticks"]):
        ax.add_patch(plt.Rectangle((t, r - 0.4), 0.95, 0.8, color=plt.cm.tab10(m)))
        ax.text(t + 0.47, r, f"mb {m}", ha="center", va="center", fontsize=8, color="white")
ax.set(xlim=(0, n_ticks_p), ylim=(W - 0.5, -0.5), xlabel="tick (logical clock measured by the ranks)",
       title="pipeline: stage r works on micro-batch m at tick r + m; white = idle (the bubble)")
ax.set_yticks(range(W), [f"stage {r}" for r in range(W)])
fig.tight_layout()
plt.show()

# %% [markdown] id="md-01-31" tags=["caption"]
# *Figure: stage r works on micro-batch m at tick r + m; the white cells are the bubble.*

# %% [markdown] id="md-01-17"
# The staircase is the article's §7.2 timeline, measured. More micro-batches shrink the bubble
# `(N-1)/(M+N-1)` but make each piece of work smaller.
#
# <details><summary><b>The article says</b> each pipeline stage processes "different data batches"</summary>
#
# Today: the pieces are **micro-batches of one batch**. The optimizer steps only after every
# micro-batch has gone forward *and* backward, so the step is the whole batch's (chapter 7 builds the
# backward half and the 1F1B schedule).
# </details>
#
# ### 3.5 Data against pipeline parallelism
#
# How many ranks hold each layer, and how many ranks process each sample, in the program's data and
# pipeline modes:

# %% tags=["nbval-check-output"]
def copies(held, n):
    """How many ranks hold (or process) each of n items."""
    return sorted({sum(i in h_ for h_ in held) for i in range(n)})


table = [{"mode": mode, "ranks holding each layer": copies([r[mode]["layers"] for r in res.results], 7),
          "ranks processing each sample": copies([r[mode]["samples"] for r in res.results], 32)}
         for mode in ("data", "pipeline")]
for row in table:
    print(row)

# %% tags=["proof", "nbval-check-output"]
print(ch01.check_opposites(table, W))

# %% [markdown] id="md-01-18"
# Data parallelism replicates the model and splits the samples; pipeline parallelism splits the model
# and passes every sample through every stage. They are opposites, not a mix — which is exactly why
# large jobs *combine* them (hybrid / 3D parallelism).
#
# ## 4. The challenges (article §2.2) and where this course handles them
#
# | challenge (article) | what it means, concretely | seen in this chapter | handled in |
# |---|---|---|---|
# | **communication overhead** | gradients (DP), activations (tensor, pipeline) cross the network every step; a device waiting for data does no work | the all-reduce in 3.1/3.2, the sends in 3.3/3.4 | chapters [2](02_process_groups_collectives.ipynb) (costs), [4](04_ddp.ipynb) (buckets, overlap), [8](08_performance.ipynb) (precision, accumulation, compression) |
# | **load balance** | the slowest device sets the pace: unequal stages, unequal data shards, a pipeline's bubble | unbalanced `params_held` in 3.3, the bubble in 3.4 | chapters [4](04_ddp.ipynb) (`DistributedSampler`), [7](07_pipeline_parallel.ipynb) (the bubble, schedules) |
# | **fault tolerance** | one dead or stuck process stalls every other one at the next collective | — | chapters [0](00_setup.ipynb) (timeouts), [5](05_multi_node.ipynb) (rendezvous), [9](09_profiling_troubleshooting.ipynb) (one rank's faults), [10](10_capstone_lm.ipynb) (kill, checkpoint, resume) |
# | **implementation complexity** | every strategy above changes the training code | the same model split four ways | chapters [4](04_ddp.ipynb), [6](06_model_parallel_rpc.ipynb), [7](07_pipeline_parallel.ipynb), [10](10_capstone_lm.ipynb), [11](11_beyond_ddp.ipynb) and [12](12_tensor_sequence_expert.ipynb) |
#
# A challenge the article does not list, and the first section of this chapter is about: **memory**.
# Data parallelism alone does not help with it; sharding (ZeRO/FSDP, [chapter 11](11_beyond_ddp.ipynb)) and model
# splitting (chapters 6, 7 and 12) do.

# %% [markdown] id="md-01-33"
# ## Puzzles
#
# One exact answer each: write yours into `mine`, then run the cell.

# %% tags=["puzzle"]
puzzle("1.z1", mine=None)

# %% tags=["puzzle"]
puzzle("1.z2", mine=None)

# %% [markdown] id="md-01-32"
# ## Problems
#
# The fourth uses the gradients measured in section 1.

# %% tags=["problem"]
problem("1.p1", mine=None)

# %% tags=["problem"]
problem("1.p2", mine=None)

# %% tags=["problem"]
problem("1.p3", mine=None)

# %% tags=["problem"]
problem("1.p4", mine=None, grad_bytes=measured["adam"]["gradients"], ranks=W)

# %% tags=["problem"]
problem("1.p5", mine=None)

# %% [markdown] id="md-01-19" tags=["takeaways"]
# ## Key takeaways
#
# * Training with AdamW in fp32 costs 16 bytes per parameter — 4 weight, 4 gradient, 8 optimizer states — before any activation.
# * Activations grow with batch × sequence × width × depth; sharding the model states does not shrink them.
# * Data parallelism splits the samples and replicates the model; ZeRO/FSDP shard the replicated states over the data-parallel ranks.
# * Tensor parallelism splits inside every layer, layer-wise model parallelism splits the layers, pipeline parallelism is layer splitting plus micro-batches — not a mix of data and model parallelism.
# * Memory, not only time, is why a model gets distributed.

# %% [markdown] id="md-01-20" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 1.1 (predict, then run).** One step of **Adam with AMSGrad** (`torch.optim.Adam(..., amsgrad=True)`: it also keeps the largest second moment seen so far) on chapter 1's MLP. How many bytes of **optimizer state** does it keep per parameter (fp32)? Write a number into `my_prediction`, then run the next cell: it counts the bytes of every tensor in `optimizer.state`.

# %% tags=["predict"]
my_prediction = None  # a number: bytes of Adam (amsgrad=True) state per parameter

# %%
import torch

from disttutor.workloads.models import MLP, seeded

q1_model = seeded(MLP, 0, 16, [32, 32, 32], 4)
q1_opt = torch.optim.Adam(q1_model.parameters(), amsgrad=True)
q1_model(torch.randn(8, 16)).sum().backward()
q1_opt.step()  # the optimizer creates its state at the first step
n_params = sum(p.numel() for p in q1_model.parameters())
state_bytes = sum(t.numel() * t.element_size() for s in q1_opt.state.values() for t in s.values()
                  if isinstance(t, torch.Tensor))
measured = state_bytes / n_params
reveal("1.q1", my_prediction, measured, rel_tol=0.05,  # 5 %: 12 bytes plus the few step counters; Adam's 8 fails
       explain=f"Three fp32 tensors per parameter and one `step` per tensor: {state_bytes} B for {n_params} parameters, "
       f"{sorted({k for s in q1_opt.state.values() for k in s})} in every tensor's state.")

# %% [markdown] id="md-01-21" tags=["question"]
# **Question 1.2.** A 7-billion-parameter model, AdamW in fp32, 8 GPUs of 80 GB. How much model-state memory does each GPU need under plain data parallelism, ZeRO-1, ZeRO-2 and ZeRO-3, and which fit?

# %%
answer("1.q2")

# %% [markdown] id="md-01-22" tags=["question"]
# **Question 1.3.** The article calls pipeline parallelism "a mix of data and model parallelism". Why is that wrong, in terms of what the table in section 3.5 measured?

# %%
answer("1.q3")

# %%
disttutor.course.chapters.glossary(1)
