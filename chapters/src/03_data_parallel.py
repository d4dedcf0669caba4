# %% [markdown] id="md-03-01"
# # Chapter 3 — `nn.DataParallel`: what one step costs, and why PyTorch says "use DDP"
#
# `torch.nn.DataParallel` (DP) trains on several GPUs of one machine with one line: wrap the model. Here
# you read what one DP step does, name what it costs, and measure the bytes through its first device.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions
from disttutor.course.problems import problem
from disttutor.course.puzzles import puzzle

disttutor.course.chapters.header(3)

# %% [markdown] id="md-03-02" tags=["opening"]
# **After this chapter you can**
# * write the DataParallel loop and say what each of its steps does, from the installed PyTorch source;
# * name its real costs: a new replica every step, one GIL for every device, outputs gathered on device 0;
# * count the bytes through device 0 and through DDP's ring all-reduce (Exercise 3.1).

# %% [markdown] id="md-03-03"
# ## 1. The code you write
#
# The article's §4.2 loop, cut to one step. `nn.DataParallel(model)` takes every visible GPU as its
# `device_ids`; the inputs can stay on the CPU: DP cuts the batch and sends each piece to its GPU.

# %%
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 100), nn.ReLU(), nn.Linear(100, 10))  # the article's SimpleModel
dp = nn.DataParallel(model)             # device_ids: every visible GPU
if torch.cuda.is_available():
    dp = dp.cuda()                      # the article's order: the wrapped model goes to cuda:0 = device_ids[0]
opt = torch.optim.SGD(dp.parameters(), lr=0.01)

x, y = torch.randn(64, 10), torch.randint(0, 10, (64,))
out = dp(x)                             # outputs come back on device_ids[0]
loss = nn.functional.cross_entropy(out, y.to(out.device))
opt.zero_grad()
loss.backward()
opt.step()
n_gpu = torch.cuda.device_count()
print(f"GPUs visible: {n_gpu}; device_ids = {dp.device_ids}; one step, loss {loss.item():.3f}")
if n_gpu < 2:
    print(f"SKIPPED: real DataParallel needs >= 2 GPUs and this machine has {n_gpu}; the wrapper called the module.")

# %% [markdown] id="md-03-04"
# With no accelerator, DP's constructor sets `device_ids = []` and its forward just calls the module.
# Wrapping first and calling `.cuda()` after, as the article does, is fine: `.cuda()` moves the wrapped
# module to the current device, `cuda:0` unless you changed it, the default `device_ids[0]`. Parameters
# on `device_ids[0]` before the forward is the rule DP checks at every forward.

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch03 import check_cuda_after_wrap
from disttutor.course.source import source_lines

inner = nn.Linear(3, 2)
print(check_cuda_after_wrap(nn.DataParallel(inner).to(torch.float64), inner, torch.float64, source_lines, nn.Module))

# %% [markdown] id="md-03-05"
# ## 2. What one forward does
#
# The whole algorithm is a few lines of `DataParallel.forward`, read here from the installed file
# (`file:line: code`):

# %%
from disttutor.course.source import source_lines

for line in source_lines(nn.DataParallel.forward, "if not self.device_ids", "self.scatter(inputs",
                         "self.replicate(", "self.parallel_apply(", "return self.gather("):
    print(line)

# %% [markdown] id="md-03-06"
# With two or more devices, every **forward** runs:
#
# | step | call | what happens |
# |---|---|---|
# | 1 | `scatter` | the batch is cut into one chunk per GPU, along dim 0 |
# | 2 | `replicate` | the module is **copied again**: parameters and buffers broadcast from `device_ids[0]` |
# | 3 | `parallel_apply` | one Python **thread** per replica runs its forward, all in this one process |
# | 4 | `gather` | the outputs are concatenated on `device_ids[0]` (the default `output_device`) |
#
# The backward has no code of its own: the backward of `replicate` **sums** every replica's gradient
# into the original module on `device_ids[0]`, and `optimizer.step()` updates that one module.

# %% tags=["proof", "nbval-check-output"]
import importlib

from disttutor.checks.claims.ch03 import check_dp_source

print(check_dp_source(source_lines, nn.DataParallel, importlib.import_module("torch.nn.parallel.parallel_apply").parallel_apply,
                      importlib.import_module("torch.nn.parallel._functions")))

# %% [markdown] id="md-03-07"
# ## 3. What it costs
#
# * **A replica every step.** `replicate` runs inside every forward: it broadcasts every parameter and
#   buffer from device 0 and rebuilds the module's Python objects on each device, then drops them.
# * **One GIL.** The replicas are threads of one Python process: while one runs Python (the forward's
#   code, hooks, the Python side of each op), the others wait for the interpreter lock. DDP runs a
#   process per GPU.
# * **Outputs gathered on device 0.** The outputs, the loss, its gradient and the optimizer step all
#   live on `device_ids[0]`, which holds more memory and does more work than the other devices.
#
# And the gradient reduce is one node at the end of backward, so it never overlaps computation (DDP
# reduces bucket by bucket during backward, chapter 4). PyTorch's documentation of the class:

# %%
doc = " ".join(nn.DataParallel.__doc__.split())
start = doc.index("It is recommended")
print(doc[start:doc.index(".", doc.index("single node")) + 1])

# %% [markdown] id="md-03-08"
# <details><summary><b>The article says</b> a master process copies the model to each GPU</summary>
#
# Today there is one process; GPU 0 is the "master": it holds the original module, computes a replica
# of its own, and is the source of every copy.
# </details>
#
# <details><summary><b>The article says</b> the master averages the gradients</summary>
#
# Today `replicate`'s backward **sums** them onto device 0. The loss is already a mean over the whole
# batch, so the sum is the full-batch gradient; an average would be n times too small (section 4).
# </details>
#
# <details><summary><b>The article says</b> the master broadcasts the new parameters after the update</summary>
#
# Today nothing is sent after `optimizer.step()`: the next forward's `replicate` copies them.
# </details>
#
# <details><summary><b>The article says</b> <code>print(loss.item())</code> each epoch, on random labels</summary>
#
# Today, as always, that prints the epoch's last batch (10000 = 156 × 64 + 16 samples), and random labels
# leave nothing to learn: the loss stays near ln(10). The proof trains on random labels and on blobs.
# </details>

# %% tags=["proof"]
import math

from disttutor.checks.claims.ch03 import check_dp_training
from disttutor.data_parallel import dataparallel as dp

article = dp.train_dataparallel(dp.DPTrainConfig(labels="random", n_samples=1000))  # 3 epochs, not 10
fixed = dp.train_dataparallel(dp.DPTrainConfig(labels="blobs", n_samples=1000))
print(check_dp_training(article, fixed, uniform_loss=math.log(10)))

# %% [markdown] id="md-03-09"
# ## 4. Measure the bytes through device 0
#
# Without GPUs we run DP's **communication pattern** for real between CPU processes, rank 0 playing
# device 0. In `torch.distributed` terms DP's forward is three transfers rooted at rank 0; DDP only
# all-reduces gradients. On two live ranks (`%%ranks`, chapter 0, defines `rank`, `world_size`, `dist`):

# %%
%load_ext disttutor
%ranks start -n 2

# %% tags=["nbval-check-output"]
%%ranks
from torch.nn.utils import parameters_to_vector

torch.manual_seed(0)                       # every rank: the same model and the same batch
model = nn.Sequential(nn.Linear(10, 100), nn.ReLU(), nn.Linear(100, 10))
x, y = torch.randn(96, 10), torch.randint(0, 10, (96,))
n = world_size

# DataParallel's forward, rooted at rank 0 ("device 0"):
w = parameters_to_vector(model.parameters()).detach()
dist.broadcast(w, src=0)                   # replicate: the whole model, every step
xs = torch.empty(96 // n, 10)
dist.scatter(xs, list(x.chunk(n)) if rank == 0 else None, src=0)   # the batch, cut on device 0
out = model(xs)
outs = [torch.empty_like(out) for _ in range(n)] if rank == 0 else None
dist.gather(out.detach(), outs, dst=0)     # every output back to device 0, where the loss is

# DDP instead: each rank its own shard and loss, then one all-reduce of the gradients.
nn.functional.cross_entropy(model(x[rank::n]), y[rank::n]).backward()
g = parameters_to_vector([p.grad for p in model.parameters()])
dist.all_reduce(g)
if rank == 1:
    print(f"DP: got {w.numel()} parameters and {xs.numel()} inputs from rank 0, sent back {out.numel()} outputs; "
          f"DDP: all-reduced {g.numel()} gradients")

# %%
%ranks stop

# %% [markdown] id="md-03-10"
# The course's program `dp_traffic` runs whole training steps for 2, 3 and 4 devices in one job (4 CPU
# ranks; bytes do not depend on the cores), counting every byte handed to gloo. S is the parameters' size:
#
# * **dp-copy**: device 0 copies to and from each device in turn (torch without NCCL; the article's
#   diagram): (N−1)·S each way through device 0.
# * **dp-chain**: a pipelined chain 0→1→…→N−1, the shape of the NCCL broadcast and reduce torch uses
#   on GPUs (built here from gloo sends): S each way.
# * **ddp-ring**: DDP's ring all-reduce of the gradients, no activations: 2(N−1)/N·S per rank.
#
# First the ddp-ring step drawn, for the run's own configuration and its largest N:

# %% tags=["schematic"]
import matplotlib.pyplot as plt

from disttutor.programs.dp_traffic import TrafficConfig
from disttutor.viz.dp_step_schematic import dp_step_schematic

traffic = TrafficConfig(steps=3, sizes=(2, 3, 4))  # the run below launches exactly this
dp_step_schematic(traffic, n=max(traffic.sizes))
plt.show()

# %% [markdown] id="md-03-21" tags=["caption"]
# *Figure: each rank computes its own shard's mean gradient; one all-reduce leaves every rank the same average, so every rank makes the same update.*

# %% [markdown] id="md-03-22" tags=["derivation"]
# **Derivation: why the average of shard means is the full-batch gradient.** $n$ ranks, rank $r$ has
# $b_r$ samples, $b = \sum_r b_r$ in all; $g_i$ is sample $i$'s gradient.
#
# * Rank $r$ computes $\bar g_r = \frac{1}{b_r}\sum_{i \in r} g_i$; the all-reduce and $\div n$ give $\frac{1}{n}\sum_r \bar g_r$.
# * Equal shards, $b_r = b/n$: $\frac{1}{n}\sum_r \frac{n}{b}\sum_{i \in r} g_i = \frac{1}{b}\sum_i g_i$, the full batch's mean.
# * Unequal shards: sample $i$ on rank $r$ weighs $\frac{1}{n\,b_r}$, not $\frac{1}{b}$; a small shard's samples count more.
# * The fix: weight each mean by its share, $\sum_r \frac{b_r}{b}\bar g_r$ (all-reduce $b_r\bar g_r$, then divide by $b$).
#
# DataParallel sums instead: its loss is already the full batch's mean. The run below checks both.

# %% tags=["nbval-check-output"]
import disttutor

job = disttutor.launch("dp_traffic", nproc=max(traffic.sizes), args=traffic, timeout=150, stream=False)
print(job.command)
runs = {n: [job.results[k]["runs"][str(n)] for k in range(n)] for n in (2, 3, 4)}  # runs[n][rank][pattern]
S = 4 * job.results[0]["n_params"]
print(f"S = {S} bytes. Rank 0's bytes per step, sent/received:")
for n, r in runs.items():
    print(f"N={n}   " + "   ".join(f"{p} {r[0][p]['sent']}/{r[0][p]['recv']}" for p in dp.PATTERNS))

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch03 import check_dp_traffic
from disttutor.viz.data_parallel import plot_traffic, traffic_rows

rows = traffic_rows(job)
assert all(r["matches"] for r in rows), [r for r in rows if not r["matches"]]  # every rank, every N: the formula
through = {(r["N"], r["pattern"]): r["through"] for r in rows if r["rank"] == 0}
others = {(n, p): sum(r["through"] for r in rows if (r["N"], r["pattern"]) == (n, p) and r["rank"] > 0) / (n - 1)
          for (n, p) in through}
print(check_dp_traffic(through, others, runs, S, dp.textbook_ring_bytes))

# %%
fig = plot_traffic(rows, param_bytes=S)

# %% [markdown] id="md-03-23" tags=["caption"]
# *Figure: left, kB through rank 0 per step against N, the measured markers on the formula's dashed lines; right, every rank's kB at the largest N, per pattern.*

# %% [markdown] id="md-03-11"
# Above, copies make device 0 carry N−1 times any other device, more than 2S more per added device; the
# ring is even, each rank sending under 2S. With the chain, device 0 sends the model once and comes close to
# the ring: **with NCCL, bytes alone are not what makes DP slow**; section 3's costs are. The proof: all
# patterns train the model one process trains, and DP's gradient is the full-batch one as a sum.

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch03 import check_same_training

ref_losses, ref_params = dp.full_batch_reference(steps=traffic.steps, batch=traffic.batch, d_in=traffic.d_in,
                                                 hidden=traffic.hidden, classes=traffic.classes, lr=traffic.lr)
table = []
for n, res in runs.items():
    for p in dp.PATTERNS:
        got = res[0][p]["params"]["sum"]
        # float32 sums in a different order (chunks, chains, rings): agreement to ~1e-6 relative
        row = {"N": n, "pattern": p, "params match 1 process": abs(got - ref_params["sum"]) < 1e-5 * ref_params["abs_sum"]}
        if p != "ddp-ring":
            g = res[0][p]
            row["sum == full grad"] = g["sum_vs_full"] < 1e-5 * g["grad_norm"]
            row["average == full grad"] = g["mean_vs_full"] < 1e-5 * g["grad_norm"]
        table.append(row)
# DP: rank 0 computes the full-batch loss; DDP: the mean of the N shard losses
losses = {(n, p): res[0][p]["losses"] if p != "ddp-ring" else
          [sum(res[k]["ddp-ring"]["losses"][s] for k in range(n)) / n for s in range(3)]
          for n, res in runs.items() for p in dp.PATTERNS}
print(check_same_training(table, losses, ref_losses))

# %% [markdown] id="md-03-16"
# ### Exercise 3.1 — predict the bytes through rank 0, and through the ring
#
# Write `predict_sent(pattern, n, n_params, batch, d_in, d_out, elem=4)`: the bytes **rank 0 sends** in
# one step on `n` ranks, for `"dp-copy"` and `"ddp-ring"`. The checker compares them with real ranks
# (2 and 3, exactly) and with the formula (4 and 8).

# %%
card("3.1")

# %%
def predict_sent(pattern, n, n_params, batch, d_in, d_out, elem=4):
    """Exercise 3.1: bytes rank 0 sends in one step ("dp-copy" or "ddp-ring") on n ranks."""
    raise NotImplementedError("Exercise 3.1: count what rank 0 sends in one step, for each pattern")


# %%
hint("3.1")


# %%
from disttutor.checks.traffic import check_predict_sent

print(check_predict_sent(predict_sent))

# %% [markdown] id="md-03-26"
# ### Exercise 3.2 — a parameter-server step on real ranks
#
# Write DataParallel's pattern with collectives: `ps_step(model, optimizer)` runs on every rank after
# its backward on its equal shard (the loss is that shard's mean). Gradients go to rank 0, which
# averages them and steps; then its parameters go to every rank. The checker compares every rank with
# one process, for 3 steps on 2 and 3 ranks.

# %%
card("3.2")

# %%
def ps_step(model, optimizer):
    """Exercise 3.2: gradients to rank 0, its optimizer step there, the new parameters back to every rank."""
    raise NotImplementedError("Exercise 3.2: send the gradients to rank 0 and the parameters back")


# %%
hint("3.2")


# %%
from disttutor.checks.param_server import check_ps_step

print(check_ps_step(ps_step))

# %% [markdown] id="md-03-25"
# ## Puzzles
#
# One exact answer each: write yours into `mine`, then run the cell.

# %% tags=["puzzle"]
puzzle("3.z1", mine=None)

# %% tags=["puzzle"]
puzzle("3.z2", mine=None)

# %% tags=["puzzle"]
puzzle("3.z3", mine=None)

# %% [markdown] id="md-03-24"
# ## Problems
#
# The fourth uses your run's shard losses.

# %% tags=["problem"]
problem("3.p1", mine=None)

# %% tags=["problem"]
problem("3.p2", mine=None)

# %% tags=["problem"]
problem("3.p3", mine=None)

# %% tags=["problem"]
problem("3.p4", mine=None, shard_losses=[r["ddp-ring"]["losses"][0] for r in runs[max(runs)]],
        one_process=ref_losses[0])

# %% tags=["problem"]
problem("3.p5", mine=None)

# %% [markdown] id="md-03-17" tags=["takeaways"]
# ## Key takeaways
#
# * `nn.DataParallel` is one process: each forward scatters the batch, builds a **new replica** per device, runs one thread per replica and gathers the outputs on `device_ids[0]`.
# * The backward **sums** the replicas' gradients onto device 0, where the loss and the one optimizer step run.
# * Its costs: a replica per step, one GIL, device 0's extra memory and work, a reduce that waits for the whole backward.
# * Bytes depend on the pattern: copies put (N−1) × the model through device 0; NCCL's chain about 1 ×, near a ring rank's 2(N−1)/N ×.
# * PyTorch recommends DDP (chapter 4) even on one machine.

# %% [markdown] id="md-03-18" tags=["question"]
# ## Check your understanding
#
# Write your answer before you open the one under it; in the first, the run decides.
#
# **Question 3.1 (predict, then run).** With copies (dp-copy), how many **times more bytes** does rank 0 send per step on **8** devices than on **4**? Write a number into `my_prediction`, then run the next cell.

# %% tags=["predict"]
my_prediction = None  # a number: (bytes rank 0 sends on 8 devices) / (bytes on 4 devices)

# %%
q1 = disttutor.launch("dp_traffic", nproc=8, args={"steps": 1, "sizes": [4, 8], "patterns": ["dp-copy"]},
                      stream=False, timeout=150)
sent = {n: q1.results[0]["runs"][str(n)]["dp-copy"]["sent"] for n in (4, 8)}
measured = sent[8] / sent[4]
reveal("3.q1", my_prediction, measured, rel_tol=0.2,  # 20 %: 7/3, the parameter copies alone, counts as right
       explain=f"{sent[4]} -> {sent[8]} bytes: the model copies grow x{7 / 3:.2f} (N − 1), "
               f"the activation shards x{(7 / 8) / (3 / 4):.2f} (3/4 to 7/8)")

# %% [markdown] id="md-03-19" tags=["question"]
# **Question 3.2.** Why does DataParallel's first device run out of memory or time first? Name everything that passes through it, or runs on it, in one training step.

# %%
answer("3.q2")

# %% [markdown] id="md-03-20" tags=["question"]
# **Question 3.3.** A 100-million-parameter fp32 model on 8 GPUs: per step, how many bytes does device 0 send to replicate it with plain copies, and with NCCL's chained broadcast? How many does each rank send in DDP's ring? With NCCL, what makes DP the slower one?

# %%
answer("3.q3")

# %%
disttutor.course.chapters.glossary(3)
