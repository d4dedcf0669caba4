# %% [markdown] id="md-03-01"
# # Chapter 3 — `nn.DataParallel`: what it really does, and why PyTorch says "use DDP"
#
# The article's section 4 introduces `torch.nn.DataParallel` (DP) with a diagram in which a
# *master* copies the model to every GPU, each GPU computes forward and backward, and the master
# "collects and **averages** the gradients", updates, and "**broadcasts** the new parameters".
# It is a fair first picture, but it is not what the code does. In this chapter we
#
# 1. read the installed PyTorch source and quote the lines that matter (printed live below, so
#    they are always those of *your* torch);
# 2. run the article's training code, corrected, for real: on 2+ GPUs it uses DataParallel; here
#    it says plainly what it does instead;
# 3. measure, with real collectives on CPU processes, the traffic pattern that makes the first
#    device a bottleneck, next to the ring all-reduce that DDP uses (chapter 4).

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(3)

# %% [markdown] id="md-03-02" tags=["opening"]
# **After this chapter you can**
# * say what `nn.DataParallel` really does in one step, from the installed PyTorch source;
# * explain why its first device becomes the bottleneck, with the bytes measured through it;
# * count the bytes rank 0 sends under DataParallel's pattern and under a ring all-reduce (Exercise 3.1).

# %%
import importlib
import inspect
import math
import os

import torch
from torch import nn

import disttutor
from disttutor.checks.claims import check_dp_traffic, check_dp_training, check_same_training
from disttutor.checks.traffic import check_predict_sent
from disttutor.course.source import deeper, source_lines
from disttutor.data_parallel import dataparallel as dp
from disttutor.launcher.results import format_table
from disttutor.viz.data_parallel import plot_traffic, traffic_rows

n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(f"torch {torch.__version__}; GPUs visible: {n_gpu}")
print("DataParallel can run for real here." if n_gpu >= 2 else
      "Fewer than two GPUs: DataParallel cannot parallelise anything on this machine. We read its source,\n"
      "show what it does without GPUs, and measure its communication pattern with CPU processes instead.")

# %% [markdown] id="md-03-03"
# ## 1. From the source: one process, one thread per GPU, a new replica every forward
#
# First, what PyTorch's own documentation for the class says today:

# %%
doc = " ".join(torch.nn.DataParallel.__doc__.split())
start = doc.index("It is recommended")
print(doc[start:doc.index(".", doc.index("single node")) + 1])
assert "DistributedDataParallel" in doc[start:start + 120]

# %% [markdown] id="md-03-04"
# Now `DataParallel.forward`, the whole algorithm in five calls. Each line below is read from the
# installed file (`file:line: code`):

# %%
for line in source_lines(torch.nn.DataParallel.forward, "if not self.device_ids", "return self.module(",
                         "self.scatter(inputs", "self.replicate(", "self.parallel_apply(", "return self.gather("):
    print(line)

# %% [markdown] id="md-03-05"
# Read top to bottom, every **forward** call does:
#
# | step | call | what happens | where the data goes |
# |---|---|---|---|
# | 1 | `scatter` | the batch is cut into `len(device_ids)` chunks along dim 0 | from wherever it is (usually `cuda:0`) to each GPU |
# | 2 | `replicate` | the module is **copied again**, parameters broadcast from `device_ids[0]` | `cuda:0` → every GPU, *every step* |
# | 3 | `parallel_apply` | one Python **thread** per replica runs its forward | stays on each GPU |
# | 4 | `gather` | the outputs are concatenated | every GPU → `output_device` = `device_ids[0]` |
#
# Step 3 is threads in one process, not processes (one GIL for all replicas); the **backward** has no
# code of its own: autograd runs the backward of each function used in forward, and the backward of
# `replicate` is a reduce that **sums** every replica's gradient onto device 0. Both from the installed
# source, folded:

# %% tags=["deeper"]
pa = importlib.import_module("torch.nn.parallel.parallel_apply")
deeper("the threads of parallel_apply, and the output device",
       source_lines(pa.parallel_apply, "threading.Thread(", "thread.start()", "thread.join()"),
       source_lines(torch.nn.DataParallel.__init__, "output_device = device_ids[0]"))

# %% tags=["deeper"]
fn = importlib.import_module("torch.nn.parallel._functions")
comm = importlib.import_module("torch.nn.parallel.comm")
deeper("the backward: replicate's backward is a SUM onto device 0; gather's is a scatter",
       source_lines(fn.Broadcast.backward, "ReduceAddCoalesced.apply"),
       source_lines(fn.Gather.backward, "Scatter.apply"),
       source_lines(comm.reduce_add, "if nccl.is_available(inputs)", "nccl.reduce(", ".to(", "add_("))

# %% [markdown] id="md-03-06"
# So the gradient of each parameter in the original module (on `device_ids[0]`) is the **sum** of
# the replicas' gradients: `loss.backward()` ends with a reduce onto the first device, and
# `optimizer.step()` updates the module there, once. Nothing is broadcast after the update: the new
# parameters reach the other GPUs at the *next* forward, when `replicate` copies them again.
#
# ### Where the article is wrong or misleading
#
# > **The article says** a *master* process sends work to GPU0..GPU2 — **on PyTorch 2.13** there is one
# > process; GPU 0 *is* the "master" and also computes a replica.
#
# > **The article says** DataParallel "collects the gradients and **averages** them" — **on PyTorch
# > 2.13** they are **summed** (`ReduceAddCoalesced`): the loss is already a mean over the whole gathered
# > batch, so the sum is exactly the full-batch gradient; an average would be N times too small
# > (measured in section 4).
#
# > **The article says** the master "updates and **broadcasts** the new parameters" — **on PyTorch
# > 2.13** nothing is broadcast after the step; `replicate` re-copies *all* parameters (and rebuilds
# > the replicas in Python) at the start of every forward. And outputs do come back: they are
# > **gathered on device 0**, where the loss and its gradient are computed.
#
# > **The article says** `if torch.cuda.is_available(): model = nn.DataParallel(model)`, then
# > `model.cuda()` — **on PyTorch 2.13** one GPU makes DataParallel pure overhead
# > (`if len(self.device_ids) == 1`), and the rule is "parameters on `device_ids[0]` before forward":
# > move first, then wrap with explicit `device_ids`.
#
# > **The article says** `print(loss.item())` after each epoch, on random inputs with random labels —
# > **on PyTorch 2.13** as on any version, that is the loss of the epoch's *last, smaller* batch
# > (10000 = 156 × 64 + 16), and random labels leave nothing to learn that carries over: a uniform guess
# > scores ln(10), and the loss stays near it (measured next).
#
# The article's three drawbacks are right (device 0 is the bottleneck, all gradients pass through
# it, single machine only). Add two more from the source: Python threads share one GIL, and the
# gradient reduce is one node at the very end of backward, so communication never overlaps compute
# (DDP overlaps it bucket by bucket).
#
# ## 2. On this machine: `DataParallel` without GPUs calls the module
#
# `__init__` returns early when there is no accelerator (`device_ids = []`), and `forward` then
# goes straight to `self.module(...)`. Live:

# %%
print(*source_lines(torch.nn.DataParallel.__init__, "if device_type is None", "self.device_ids = []"), sep="\n")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 100), nn.ReLU(), nn.Linear(100, 10))
wrapped = nn.DataParallel(model)
calls = []
model.register_forward_hook(lambda mod, inp, out: calls.append(inp[0].device))
x = torch.randn(64, 10)
same = torch.equal(wrapped(x), model(x))
print(f"device_ids = {wrapped.device_ids}; wrapped(x) == model(x): {same}; module forwards run: {len(calls)}")
if n_gpu == 0:
    assert wrapped.device_ids == [] and wrapped.module is model and same
    assert len(calls) == 2  # one per call above: no replicas, no threads

# %% [markdown] id="md-03-07"
# ## 3. The article's training code, corrected
#
# `dp.train_dataparallel` is the article's §4.2 loop with the fixes from the callouts above. It uses
# real DataParallel when at least two GPUs are visible and otherwise trains the plain module (the
# function says which path it took). Its source, folded:

# %% tags=["deeper"]
deeper("dp.train_dataparallel: the article's §4.2 loop, corrected", inspect.getsource(dp.train_dataparallel).splitlines())

# %% [markdown] id="md-03-08"
# First the article's data (random inputs, random labels), then data with something to learn
# (Gaussian blobs, one per class). Same model, same hyper-parameters (batch 64, SGD lr 0.01);
# 1000 samples and 3 epochs instead of 10000 × 10 to keep this chapter quick on a laptop's CPU.

# %% tags=["nbval-check-output"]
article = dp.train_dataparallel(dp.DPTrainConfig(labels="random", n_samples=1000))
fixed = dp.train_dataparallel(dp.DPTrainConfig(labels="blobs", n_samples=1000))
print(f"ln(10) = {math.log(10):.3f}: the loss of a uniform guess over 10 classes")
for name, r in (("article (random labels)", article), ("corrected (blobs)", fixed)):
    print(f"{name:24s} epoch mean loss: {[round(v, 3) for v in r.epoch_loss]}")
    print(f"{'':24s} last-batch loss ({r.last_batch_size} samples, what the article prints): "
          f"{[round(v, 3) for v in r.last_batch_loss]}")
print(check_dp_training(article, fixed, uniform_loss=math.log(10)))

# %%
print("this run:", fixed.path)

# %% [markdown] id="md-03-09"
# The real multi-GPU run. On a machine with two or more GPUs this cell trains the same model with
# `nn.DataParallel` over all of them; here it says why it does not.

# %%
if n_gpu >= 2:
    real = dp.train_dataparallel(dp.DPTrainConfig(n_samples=1000))
    print(real.path)
    print("epoch mean loss:", [round(v, 3) for v in real.epoch_loss])
    assert real.device_ids and real.epoch_loss[-1] < real.epoch_loss[0]
else:
    print(f"SKIPPED: real DataParallel needs >= 2 GPUs and this machine has {n_gpu}. The function above ran\n"
          "the plain module on the CPU instead; nothing here pretends that CPU threads are GPUs.")

# %% [markdown] id="md-03-10"
# ## 4. Why the first device becomes the bottleneck: measure the traffic
#
# We cannot run DataParallel's GPU copies here, but we can run its **communication pattern** for
# real between processes. `disttutor.programs.dp_traffic` starts N CPU ranks; rank 0 plays
# `device_ids[0]` (it holds the module, the batch and the labels), the others play the other
# devices, and each step trains the article's MLP on one fixed batch of 96 exactly as
# DataParallel does: broadcast parameters from 0, scatter inputs from 0, forward, gather outputs
# to 0, loss on 0, scatter output gradients from 0, backward, reduce (sum) gradients to 0,
# update on 0. It does this for three patterns:
#
# * **dp-copy** — parameters and gradients are copied between rank 0 and each rank in turn
#   (torch's path without NCCL, and exactly the article's diagram): (N−1)·S each way through rank 0;
# * **dp-chain** — the same, but parameters and gradients travel along a pipelined chain
#   0→1→…→N−1 and back (the shape of the NCCL broadcast/reduce torch uses on GPUs): S each way;
# * **ddp-ring** — DDP: every rank computes the loss of its own shard; a ring all-reduce of the
#   gradients (reduce-scatter, then all-gather) sends 2(N−1)/N·S per rank; no activations move.
#
# S is the size of the gradients (= the parameters). Each byte is counted from the size of a
# tensor handed to a real gloo send/recv/scatter/gather, and compared with the formula in
# `dp.expected_bytes`. What this measures: bytes and *CPU-process* timings. The byte counts are
# the same on GPUs; the times are not (GPU links are much faster, and these CPU ranks share the
# cores of one machine, with each other and with whatever else runs on it: the timings below say
# how many cores and how busy).

# %%
job = disttutor.launch("dp_traffic", nproc=4, args={"steps": 3, "sizes": [2, 3, 4]}, timeout=150)
runs = {n: [job.results[k]["runs"][str(n)] for k in range(n)] for n in (2, 3, 4)}  # runs[n][rank][pattern]
rows = traffic_rows(job)
print(f"{len(rows)} (N, pattern, rank) rows; all ranks ok: {job.ok}")

# %% [markdown] id="md-03-11"
# Every rank of every run, measured bytes against the formula:

# %% tags=["nbval-check-output"]
S = 4 * job.results[0]["n_params"]
print(f"model: {job.results[0]['n_params']} parameters, S = {S} bytes; batch 96 x 10 inputs, 96 x 10 outputs")
print(format_table([{k: r[k] for k in ("N", "pattern", "rank", "sent", "recv", "expected", "matches")}
                    for r in rows if r["rank"] == 0]))
assert all(r["matches"] for r in rows), [r for r in rows if not r["matches"]]

# %% [markdown] id="md-03-12"
# Where rank 0's bytes go in one step with N = 4, phase by phase, folded:

# %% tags=["nbval-check-output", "deeper"]
r4 = runs[4][0]
deeper("rank 0's bytes per phase, N = 4 (sent/received)", format_table([{"pattern": p, **{f"{k} (out/in)": f"{r4[p]['sent_phases'].get(k, 0)}/{r4[p]['recv_phases'].get(k, 0)}"
                                      for k in ("replicate", "scatter inputs", "gather outputs",
                                                "scatter output grads", "reduce grads")}}
                    for p in ("dp-copy", "dp-chain")]).splitlines(),
       [""], format_table([{"pattern": "ddp-ring", **{f"{k} (out/in)": f"{r4['ddp-ring']['sent_phases'][k]}/"
                                                      f"{r4['ddp-ring']['recv_phases'][k]}"
                                                      for k in ("reduce-scatter", "all-gather")}}]).splitlines())

# %%
fig = plot_traffic(rows, param_bytes=S)

# %% [markdown] id="md-03-13"
# What the picture and the checks below show:

# %% tags=["nbval-check-output"]
through = {(r["N"], r["pattern"]): r["through"] for r in rows if r["rank"] == 0}
others = {(n, p): sum(r["through"] for r in rows if (r["N"], r["pattern"]) == (n, p) and r["rank"] > 0) / (n - 1)
          for (n, p) in through}
copy_growth = [through[(n + 1, "dp-copy")] - through[(n, "dp-copy")] for n in (2, 3)]
print("dp-copy: rank 0 carries", [through[(n, "dp-copy")] for n in (2, 3, 4)], "bytes; each extra device adds",
      copy_growth, f"(2S = {2 * S} of parameters/gradients + its share of activations)")
print("ddp-ring: each rank sends", [runs[n][0]["ddp-ring"]["sent"] for n in (2, 3, 4)],
      f"bytes, always < 2S = {2 * S}; textbook 2(N-1)/N*S =",
      [round(dp.textbook_ring_bytes(S // 4, n)) for n in (2, 3, 4)])
for n in (2, 3, 4):
    print(f"N={n}: rank 0 / mean of the other ranks:  " + "   ".join(
        f"{p} {through[(n, p)] / others[(n, p)]:.2f}" for p in dp.PATTERNS))
print(check_dp_traffic(through, others, runs, S, dp.textbook_ring_bytes))

# %% [markdown] id="md-03-14"
# With NCCL's pipelined broadcast and reduce (**dp-chain**), rank 0's *parameter* traffic stops
# growing and its bytes come close to the ring's (the relay ranks in the middle of the chain now
# carry 2S each way, see the bars). Honest conclusion: with NCCL, bytes alone are not what makes
# DataParallel slow. What still grows is the activation traffic through rank 0, and what does not
# go away is the rest of
# the first-device tax: the full batch of outputs and the loss live on device 0, the update runs
# there alone, the parameters are re-sent *every* step, and the gradient reduce waits until the
# whole backward is done. DDP moves only gradients, spreads them evenly, and overlaps them with
# the backward.
#
# ### Same training, same numbers
#
# All three patterns are the same mathematics. Each run's parameters after 3 steps, against one
# process training on the whole batch; and the article's "average the gradients" put to the test
# (rank 0 compares the reduced gradient with the full-batch gradient before its first update):

# %% tags=["nbval-check-output"]
ref_losses, ref_params = dp.full_batch_reference(steps=3, batch=96, d_in=10, hidden=100, classes=10, lr=0.1)
table = []
for n, res in runs.items():
    for p in dp.PATTERNS:
        got = res[0][p]["params"]["sum"]
        # float32 sums in a different order (chunks, chains, rings): agreement to ~1e-6 relative
        close = abs(got - ref_params["sum"]) < 1e-5 * ref_params["abs_sum"]
        row = {"N": n, "pattern": p, "params match 1 process": close}
        if p != "ddp-ring":
            g = res[0][p]
            row["sum == full grad"] = g["sum_vs_full"] < 1e-5 * g["grad_norm"]
            row["average == full grad"] = g["mean_vs_full"] < 1e-5 * g["grad_norm"]
        table.append(row)
print(format_table(table))
# DP: rank 0 computes the full-batch loss; DDP: the mean of the N shard losses
losses = {(n, p): res[0][p]["losses"] if p != "ddp-ring" else
          [sum(res[k]["ddp-ring"]["losses"][s] for k in range(n)) / n for s in range(3)]
          for n, res in runs.items() for p in dp.PATTERNS}
print("full-batch loss per step, one process:", [round(v, 4) for v in ref_losses])
print(check_same_training(table, losses, ref_losses))

# %% [markdown] id="md-03-15"
# Timings, for the record (milliseconds per step on rank 0, folded; CPU processes, so expect noise
# when there are more ranks than cores or the machine is busy, and expect GPUs to be very different):

# %% tags=["deeper"]
n_cores = disttutor.cores()  # usable cores: affinity, cgroup limit
deeper(f"ms per step on rank 0: {max(runs)} ranks on {n_cores} usable CPU cores, load average {os.getloadavg()[0]:.1f}"
       + (" (the ranks time-share the cores)" if n_cores < max(runs) else ""),
       format_table([{"N": n, **{p: round(res[0][p]["ms_per_step"], 1) for p in dp.PATTERNS}}
                     for n, res in runs.items()]).splitlines())

# %% [markdown] id="md-03-16"
# ### Exercise 3.1 — predict the bytes through rank 0, and through the ring
#
# Write `predict_sent(pattern, n, n_params, batch, d_in, d_out, elem=4)`: the bytes **rank 0 sends**
# in one training step on `n` ranks, for `pattern="dp-copy"` (DataParallel's device 0 as measured
# above) and `pattern="ddp-ring"` (the ring all-reduce). The checker runs this chapter's traffic
# program once on real ranks (groups of 2 and 3) and compares your numbers with the bytes rank 0 really
# handed to gloo — exactly, they are integers — then with the chapter's formula for 4 and 8 ranks.

# %%
card("3.1")

# %%
def predict_sent(pattern, n, n_params, batch, d_in, d_out, elem=4):
    """Exercise 3.1: bytes rank 0 sends in one step ("dp-copy" or "ddp-ring") on n ranks."""
    raise NotImplementedError("Exercise 3.1: count what rank 0 sends in one step, for each pattern")


# %%
hint("3.1")


# %%
print(check_predict_sent(predict_sent))

# %% [markdown] id="md-03-17" tags=["takeaways"]
# ## Key takeaways
#
# * `nn.DataParallel` is one process: each forward scatters the batch, **replicates the module**, runs one thread per device and gathers the outputs on `device_ids[0]`.
# * The backward sums the replicas' gradients into the original module on the first device, where the optimizer runs alone.
# * The first device's traffic grows with (n−1) × the model; a ring all-reduce sends about 2 × the model per rank, whatever n.
# * PyTorch recommends DDP (chapter 4) even on one machine: one process per device, no replication per step, no shared GIL.

# %% [markdown] id="md-03-18" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 3.1 (predict, then run).** Under DataParallel's pattern rank 0 sends the model and the others' inputs and output gradients every step. How many **times more bytes** does rank 0 send on **4** devices than on **2**? Write a number into `my_prediction`, then run the next cell.

# %% tags=["predict"]
my_prediction = None  # a number: (bytes rank 0 sends on 4 devices) / (bytes on 2 devices)

# %%
import disttutor

q1 = disttutor.launch("dp_traffic", nproc=4, args={"steps": 1, "sizes": [2, 4], "patterns": ["dp-copy", "ddp-ring"]},
                      stream=False, timeout=150)
sent = {(n, p): q1.results[0]["runs"][str(n)][p]["sent"] for n in (2, 4) for p in ("dp-copy", "ddp-ring")}
measured = sent[(4, "dp-copy")] / sent[(2, "dp-copy")]
reveal("3.q1", my_prediction, measured, rel_tol=0.2,  # 20 %: 3, the parameter copies alone, counts as right
       explain=f"Rank 0 sent {sent[(2, 'dp-copy')]} bytes on 2 devices and {sent[(4, 'dp-copy')]} on 4: x{measured:.2f}. "
       f"It copies the {q1.results[0]['n_params']} parameters to every other device, so the bytes grow like n − 1 "
       f"(1 -> 3), while the inputs and output gradients it hands out grow only from 1/2 of the batch to 3/4 of it, "
       f"so the ratio lies between 1.5 and 3 (Exercise 3.1 counts every byte). Under the ring rank 0 "
       f"sent {sent[(2, 'ddp-ring')]} -> {sent[(4, 'ddp-ring')]} bytes: x{sent[(4, 'ddp-ring')] / sent[(2, 'ddp-ring')]:.2f}, "
       "heading for 2, never more.")

# %% [markdown] id="md-03-19" tags=["question"]
# **Question 3.2.** Why does DataParallel's first device run out of memory or time first? Name everything that passes through it in one training step.

# %%
answer("3.q2")

# %% [markdown] id="md-03-20" tags=["question"]
# **Question 3.3.** A 100-million-parameter fp32 model on 8 GPUs: how many bytes does device 0 send per step just to copy the parameters under DataParallel, and how many does each rank send in a ring all-reduce of the gradients?

# %%
answer("3.q3")

# %%
disttutor.course.chapters.glossary(3)
