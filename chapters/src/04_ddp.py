# %% [markdown] id="md-04-01"
# # Chapter 4 — DistributedDataParallel, and DDP from scratch
#
# *Article §5.1–§5.2 and §5.4.*
#
# DataParallel (chapter 3) runs one process that copies the model to every device. **DistributedDataParallel
# (DDP)** runs **one process per device**: each process (a *rank*) holds a full replica of the model and
# trains on its own shard of every global batch. During `backward()` the ranks **all-reduce** their
# gradients, so every replica takes the same optimiser step:
#
# ```
#  rank 0: shard 0 ─ forward ─ backward ─┐                   ┌─ step (same update)
#  rank 1: shard 1 ─ forward ─ backward ─┼─ all-reduce ──────┼─ step (same update)
#  rank 2: shard 2 ─ forward ─ backward ─┘  (mean of grads)  └─ step (same update)
# ```
#
# Everything here runs as real processes: without GPUs on the **gloo** backend on CPU; with one GPU
# per rank the same code uses **NCCL** on `cuda:LOCAL_RANK`, unchanged.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(4)

# %% [markdown] id="md-04-02" tags=["opening"]
# **After this chapter you can**
# * turn a single-process training script into a correct DDP program (sampler, `set_epoch`, `drop_last`, saving on one rank; Exercise 4.3);
# * prove that DDP's replicas stay identical to one process trained on the whole batch, and say what the wrap broadcasts;
# * write DDP yourself, naive then bucketed and overlapped (Exercises 4.1 and 4.2), and say what overlap saves on a slow network.

# %%
import os
import re
import tempfile

import matplotlib.pyplot as plt
import torch

import disttutor
from disttutor.checks.ddp import check_bucketed_ddp, check_naive_ddp  # the exercises' checkers
from disttutor.checks.ddp_script import check_ddp_script
from disttutor.course.problems import problem  # worked problems, one a cell
from disttutor.course.puzzles import puzzle  # puzzles, one a cell
from disttutor.course.source import show_code

WORK = tempfile.mkdtemp(prefix="ch04-")
os.chdir(WORK)  # the files this chapter writes (a script, checkpoints) go to a scratch folder
print(f"torch {torch.__version__}, {disttutor.cores()} usable CPU cores, torch.cuda.device_count() = "
      f"{torch.cuda.device_count()}")

# %% [markdown] id="md-04-03"
# ## 1. A DDP training script
#
# The article's §5.2 program as you would write it today: one file, started once per device by
# `torchrun`. Five things make it DDP (numbered in the comments); the rest is an ordinary training loop.
#
# 1. `dist.init_process_group(backend)` joins the other ranks (`torchrun` set `RANK`, `WORLD_SIZE`...).
# 2. `DistributedSampler` gives each rank its share of the dataset; `set_epoch` reshuffles it.
# 3. `DDP(model)` broadcasts rank 0's weights and averages the gradients during every `backward()`.
# 4. `dist.all_reduce` of the loss: an epoch loss over all ranks, not rank 0's share alone.
# 5. Rank 0 saves `model.module`, the plain model inside the wrapper; `destroy_process_group` ends.

# %%
%%writefile ddp_train.py
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

local_rank = int(os.environ["LOCAL_RANK"])     # torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT
if torch.cuda.is_available():
    torch.cuda.set_device(local_rank)          # one GPU per process
    device, backend = torch.device("cuda", local_rank), "nccl"
else:
    device, backend = torch.device("cpu"), "gloo"
dist.init_process_group(backend)               # (1) join the other ranks
rank = dist.get_rank()

g = torch.Generator().manual_seed(0)           # the SAME dataset on every rank: the sampler splits it
data = TensorDataset(torch.randn(512, 10, generator=g), torch.randint(0, 10, (512,), generator=g))
sampler = DistributedSampler(data, shuffle=True)                      # (2) this rank's share
loader = DataLoader(data, batch_size=32, sampler=sampler)

torch.manual_seed(rank)                        # different weights on every rank, on purpose
model = nn.Sequential(nn.Linear(10, 100), nn.ReLU(), nn.Linear(100, 10)).to(device)
model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)   # (3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(3):
    sampler.set_epoch(epoch)                   # (2) a new shuffle every epoch, the same on every rank
    total = torch.zeros(2, device=device)      # loss sum, samples
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()                        # (3) DDP averages the gradients over the ranks here
        opt.step()
        total += torch.tensor([loss.item() * len(y), len(y)], device=device)
    dist.all_reduce(total)                     # (4) the epoch's loss over ALL ranks
    if rank == 0:
        print(f"epoch {epoch}: loss {total[0] / total[1]:.4f} over {int(total[1])} samples")
print(f"rank {rank}: {len(sampler)} samples an epoch")
if rank == 0:
    torch.save(model.module.state_dict(), "ddp_train.pt")            # (5) the plain model's keys
dist.destroy_process_group()                   # (5)

# %% [markdown] id="md-04-31"
# In a terminal you would type the `torchrun` line this cell prints. The cell runs that job on 2 ranks
# and shows what they printed:

# %%
script = disttutor.launch("ddp_train.py", nproc=2, stream=False)
print(script.command)
print("\n".join(ln for log in script.logs for ln in log if ln.startswith(("epoch", "rank "))))

# %% tags=["proof"]
from disttutor.checks.claims.ch04 import check_plain_script

print(check_plain_script(script.logs, samples=512, saved=os.path.exists("ddp_train.pt")))

# %% [markdown] id="md-04-04"
# Each rank saw half of the 512 samples an epoch, and the loss printed is the mean over all of them.
#
# <details><summary><b>The article says</b> <code>mp.spawn(train, nprocs=torch.cuda.device_count())</code>
# with <code>MASTER_PORT='12355'</code> and <code>backend='nccl'</code></summary>
#
# Today: `torchrun` starts the ranks and sets their environment (chapter 5); without GPUs
# `device_count()` (printed at the top) is 0, and `mp.spawn` starts no process at all. A fixed port
# collides with a second job on the machine; NCCL needs GPUs. `model.to(rank)` uses the rank it gives
# `init_process_group`, the **global** one, as a GPU index, wrong on a second node: `LOCAL_RANK` is. The unseeded
# `RandomDataset` differs in every process (checked below); `print(loss.item())` shows rank 0's last batch.
# </details>
#
# The course's version of this script, `disttutor.programs.ddp`, runs the same loop and reports what
# each rank saw. Each rank again starts from *different* weights; watch what the wrap does with them.

# %%
run2 = disttutor.launch("ddp", nproc=2, stream=False, args={"epochs": 3, "save": "ddp2.pt"})
print(run2.command)

# %% tags=["nbval-check-output"]
print(run2.table("init_sum_before_wrap", "init_sum_after_wrap", "data_sha", "per_rank", "loaded_equal"))

# %% [markdown] id="md-04-05"
# Read the table column by column:
#
# * `init_sum_before_wrap` differs between ranks; `init_sum_after_wrap` is **rank 0's value on every rank**:
#   the `DDP(...)` constructor broadcasts rank 0's parameters (and buffers).
# * `data_sha` (a hash of the dataset) is equal: one dataset, sharded by the sampler.
# * `loaded_equal`: rank 0 saved `model.module.state_dict()`; after a barrier every rank loaded it and
#   found it equal to its own replica.
#
# The wrapper's own `state_dict()` prefixes every key with `module.`; saving `.module` keeps the keys a
# plain model loads:

# %% tags=["nbval-check-output"]
print("model.module.state_dict():", run2.results[0]["saved_keys"])
print("model.state_dict():       ", run2.results[0]["ddp_keys"])

# %% tags=["proof"]
from disttutor.checks.claims.ch04 import check_ddp_run

print(check_ddp_run(run2.results))

# %% [markdown] id="md-04-06"
# Now **4 ranks**, with a dataset of 510 samples — not divisible by 4. The program reports each
# rank's full sampler order per epoch, so we can count exactly which samples each rank saw.

# %%
run4 = disttutor.launch("ddp", nproc=4, stream=False, args={"samples": 510, "epochs": 3, "show": 0})
print(run4.command)

# %% tags=["nbval-check-output"]
print(run4.table("init_sum_after_wrap", "per_rank", "total_size", "batches"))
# Trained weights depend on the CPU's float kernels, so we print whether they agree, not their hash.
print("identical trained replicas:", len({r["final_sha"] for r in run4.results}) == 1)

# %% [markdown] id="md-04-07"
# ## 2. `DistributedSampler`: padding, `drop_last` and `set_epoch`
#
# **Padding.** 510 samples over 4 ranks: each rank must get the same number of samples (else one rank
# would run an extra step whose gradient all-reduce no other rank joins: an error or a hang, as
# section 4 shows), so by default the sampler rounds up to `ceil(510/4)·4 = 512` indices and
# **repeats** the first ones. Count the repeats:

# %% tags=["nbval-check-output"]
def coverage(run, epoch=0):
    """How many dataset indices the ranks were handed in one epoch, how many distinct, how many repeated."""
    handed = [i for r in run.results for i in r["orders"][epoch]]
    return {"handed": len(handed), "distinct": len(set(handed)), "repeated": len(handed) - len(set(handed))}


print("with padding (default):", coverage(run4))

# %% [markdown] id="md-04-08"
# Two samples count double in every epoch — harmless for training, but wrong for an **evaluation**
# metric. `drop_last=True` instead drops the tail: `floor(510/4)·4 = 508` indices, no repeats, two
# samples unseen this epoch (with `set_epoch`, most likely another two next epoch, since the shuffle changes).
#
# **`set_epoch`.** The sampler shuffles with a generator seeded by `seed + epoch`. The epoch is only
# known if you tell it: forget `sampler.set_epoch(epoch)` and **every epoch repeats epoch 0's order**.
# The next run does both: `drop_last=True` and *no* `set_epoch`. (It also gives the last rank one
# batch fewer per epoch and uses `Join` — section 4 explains that part.)

# %%
run_noepoch = disttutor.launch("ddp", nproc=4, stream=False,
                               args={"samples": 510, "epochs": 3, "show": 0, "no_set_epoch": True,
                                     "drop_last": True, "uneven": 1, "join": True})
print(run_noepoch.command)


# %% tags=["nbval-check-output"]
def first(run, rank=0, k=8):
    return [order[:k] for order in run.results[rank]["orders"]]


print("rank 0, first 8 indices of each epoch")
print("  with set_epoch:   ", *first(run4), sep="\n    ")
print("  without set_epoch:", *first(run_noepoch), sep="\n    ")
print("drop_last=True:", coverage(run_noepoch))

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch04 import check_set_epoch

print(check_set_epoch(run4.results[0]["orders"], run_noepoch.results[0]["orders"], coverage(run_noepoch),
                      samples=510, world=4, padded=coverage(run4)))

# %% [markdown] id="md-04-09"
# ## 3. Proof: DDP equals one process on the whole batch
#
# Why is DDP *correct*? Take a global batch of `B` samples split into `W` equal shards. Each rank's loss
# is the **mean** over its `B/W` samples; DDP **averages** the gradients over ranks. The average of `W`
# equal-sized means is the mean over all `B` samples, and the gradient is linear — so the averaged
# gradient *is* the full-batch gradient, and plain SGD takes the same step as one process would.
#
# The program `ddp_scratch` checks this after **every** step: each rank also trains a single-process
# model on the full global batch (same seed, same data) and reports `max |p − p_ref| / max |p_ref|`.
# Equal, not bitwise: the ranks sum their shards, then the all-reduce sums the partial sums, while the
# reference sums in one go, and float addition is not associative (fp32: ~1e-7 relative). The check
# allows **1e-5**, ~100× that noise and far below what a bug gives (a missing division doubles the gradient).

# %%
# One launch, two wrappers in turn: torch's DDP now, the from-scratch one of Exercise 4.2 in section 6.
ref = disttutor.launch("ddp_scratch", nproc=2, stream=False,
                       args={"wrappers": ["torch", "bucketed"], "reference": True, "trace": True, "steps": 4})
print(ref.command)
ref_torch = [r["runs"]["torch"] for r in ref.results]
for rank, r in enumerate(ref_torch):
    print(f"rank {rank}: max relative error after each step:", [f"{e:.1e}" for e in r["max_rel_err"]])

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch04 import check_equals_single_process
# fp32 summation-order noise is ~1e-7 per step; a bug is far larger: a missing division doubles the gradient (the text above). The course's one constant:
from disttutor.checks.tolerances import DATA_PARALLEL_RTOL as RTOL

print(check_equals_single_process("torch DDP", ref_torch, RTOL))

# %% [markdown] id="md-04-10"
# ## 4. How DDP is fast
#
# A naive DDP would wait for `backward()` to finish and then all-reduce each gradient tensor. Real DDP
# does better in two ways:
#
# * **Buckets.** Gradients are packed into buckets of about `bucket_cap_mb` MiB (25 by default, and
#   then 1 MiB for the first bucket): a bucket closes once it reaches the cap, so a large tensor can
#   take it past the cap. Each bucket is reduced as **one** message: a collective has a fixed latency,
#   so a few large messages beat many small ones.
# * **Overlap.** Backward produces gradients from the **last layer to the first**. Buckets are filled in
#   that reverse order, and as soon as a bucket is complete its all-reduce is started
#   **asynchronously** — while autograd keeps computing the earlier layers' gradients.
#
# The run above gave torch's DDP a tiny `bucket_cap_mb`, hence two buckets, and recorded the order of
# events in its last step (through a communication hook and per-parameter hooks):

# %% tags=["nbval-check-output"]
trace_torch = ref_torch[0]["trace"]
for kind, what in trace_torch:
    print(f"  {'gradient ready' if kind == 'grad' else 'ALL-REDUCE launched'}: "
          f"{what if kind == 'grad' else f'bucket {what}'}")

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch04 import check_overlap_order

print(check_overlap_order(trace_torch, first_layer="0.weight"))

# %%
from disttutor.viz.ddp import plot_trace

plot_trace({"torch DDP": trace_torch})
plt.show()

# %% [markdown] id="md-04-33" tags=["caption"]
# *Figure: events in order, not in time: bucket 0's all-reduce (orange) starts while the first layer's gradients (blue, `0.`) are still to come.*

# %% [markdown] id="md-04-11"
# ### Explore it live: buckets and gradients per rank
#
# To poke at DDP yourself, keep two ranks alive (`%ranks`, met in chapter 0) and type at them: change
# `bucket_cap_mb`, the model or the batch, and re-run. A communication hook sees every bucket just
# before DDP reduces it, so it can record which parameters each bucket holds:

# %%
%load_ext disttutor
%ranks start -n 2

# %% tags=["nbval-check-output"]
%%ranks
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from disttutor.workloads.models import MLP, seeded

model = DDP(seeded(MLP, 0), bucket_cap_mb=0.004)   # ~1000 floats (4 KiB) a bucket: two buckets here
names = {p: n for n, p in model.module.named_parameters()}
buckets = {}

def record(state, bucket):  # called once per bucket, when it is full
    buckets[bucket.index()] = [names[p] for p in bucket.parameters()]
    return default_hooks.allreduce_hook(None, bucket)  # then the usual averaging all-reduce

model.register_comm_hook(None, record)
x = torch.randn(8, 16, generator=torch.Generator().manual_seed(rank))  # each rank its own batch
for step in range(2):  # after step 1 DDP re-plans its buckets in the order gradients arrived
    model.zero_grad()
    model(x).pow(2).mean().backward()
buckets

# %% [markdown] id="md-04-12"
# Bucket 0 holds the *last* layers: their gradients are ready first. Now the gradients themselves.
# Each rank also runs the same model without DDP on its own batch: those local gradients differ
# between ranks, DDP's are the same on every rank — their average.

# %% tags=["nbval-check-output"]
%%ranks
local = seeded(MLP, 0)                              # the same weights, no DDP
local(x).pow(2).mean().backward()
g_local, g_ddp = local[0].weight.grad, model.module[0].weight.grad
print(f"first layer: local grad sum {g_local.sum().item():+.4f}   DDP grad sum {g_ddp.sum().item():+.4f}")

# %%
%ranks pull g_local
%ranks pull g_ddp

# %% tags=["proof"]
from disttutor.checks.claims.ch04 import check_ddp_gradients

print(check_ddp_gradients(g_ddp, g_local))

# %%
%ranks stop

# %% [markdown] id="md-04-13"
# ### `find_unused_parameters`: for parameters that get no gradient
#
# With `find_unused_parameters=True`, DDP walks the autograd graph from every forward's outputs to find
# parameters that will get **no** gradient this iteration (a branch not taken) and marks them ready,
# so their bucket can still be reduced. Without the flag such a bucket never fills, and DDP raises an
# error at the next step. Below, a model with a layer `forward` never calls, without and with the flag:
#
# <details><summary><b>The article says</b> use <code>DDP(find_unused_parameters=True)</code> to
# overlap computation and communication (§8.3)</summary>
#
# Today: overlap is DDP's default. The trace of section 4 was recorded without the flag, and the
# buckets' all-reduces started during backward. The flag adds the graph walk to every forward
# (the reducer's `prepare_for_backward`, called at the end of `forward` in
# `torch/nn/parallel/distributed.py`); turn it on only for a model with
# unused parameters, or use `static_graph=True`, with which DDP "will not search graph in each
# iteration" (torch's docstring).
# </details>

# %%
unused = disttutor.launch("ddp", nproc=2, stream=False, args={"unused_demo": True})
print(unused.command)
for flag in (False, True):
    print(f"find_unused_parameters={flag}: {unused.results[0][f'find_unused_{flag}']}")

# %% tags=["proof"]
from disttutor.checks.claims.ch04 import check_unused_parameters

print(check_unused_parameters(unused.results))

# %% [markdown] id="md-04-15"
# ### Uneven inputs and `Join`
#
# Every backward is a collective: all ranks must run the **same number of steps**. If one rank runs out
# of data early (uneven shards, a filtered dataset), it moves on to its *next* collective while the others
# are still inside a gradient all-reduce — the collectives no longer match. Here the last rank skips one
# batch, without `Join`. A short collective timeout guarantees the cell ends either way:

# %%
uneven = disttutor.launch("ddp", nproc=2, stream=False, check=False, collective_timeout=5, timeout=60,
                          args={"samples": 64, "epochs": 1, "batch_size": 8, "uneven": 1})
print(uneven.command)
print("ended:", uneven.headline())
said = [m.group(0) for r in uneven.ranks for m in [re.search(r"Received data size doesn't match expected size",
        " ".join([r.raw_error or "", r.error or "", *r.log]))] if m]
print("gloo said:", said[0] if said else "(no size-mismatch message this time)")

# %% [markdown] id="md-04-16"
# Gloo noticed the mismatch (a gradient bucket met the 2-number loss all-reduce) and aborted; on NCCL
# the same bug typically **hangs** until the timeout. The fix is `torch.distributed.algorithms.Join`:
# a rank that has run out of batches keeps *shadowing* the others' all-reduces (contributing zeros)
# until everyone is done:
#
# ```python
# with Join([ddp]):
#     for x, y in loader: ...
# ```
#
# The `run_noepoch` run of section 2 did exactly that — the last rank ran one batch fewer per epoch and
# the job finished with identical replicas:

# %% tags=["nbval-check-output"]
print(run_noepoch.table("batches"))
print("identical trained replicas:", len({r["final_sha"] for r in run_noepoch.results}) == 1)

# %% tags=["proof"]
from disttutor.checks.claims.ch04 import check_join

print(check_join(uneven, run_noepoch))


# %% [markdown] id="md-04-17"
# ## 5. Exercise 4.1 — naive DDP
#
# Write the gradient synchronisation of a data-parallel step yourself. The checker runs your function on
# 2 real ranks: each rank computes the gradients of its shard, calls `sync_gradients(model)`, and steps
# SGD. After **every** step it compares each rank's parameters with the single-process reference and
# tells you which parameter diverged, on which rank. Its model has frozen parameters and one unused
# every other step: their `.grad` is `None`.
#
# *Hint:* `dist.all_reduce(t)` sums `t` over all ranks, in place; `dist.get_world_size()`.
# (The checker runs your cell's code on the ranks, with `torch` and `torch.distributed as dist`
# imported for it; the import below only makes the names known in this notebook.)

# %%
card("4.1")

# %%
import torch.distributed as dist


def sync_gradients(model):
    """Exercise 4.1: make every parameter's .grad the average of that gradient over all ranks."""
    raise NotImplementedError("Exercise 4.1: all-reduce each p.grad (a SUM), then divide by the world size")


# %%
hint("4.1")


# %%
print(check_naive_ddp(sync_gradients))

# %% [markdown] id="md-04-18"
# One collective per tensor is correct — and slow when a model has hundreds of tensors, and it starts
# only after backward is over. (Solution: `solutions/ex4_1_naive_ddp.py`.)
#
# ## 6. Exercise 4.2 — bucketed and overlapped DDP
#
# Now do what DDP does. The skeleton plans buckets (`plan_buckets`: parameters in **reverse** order, at
# most `bucket_cap` elements each, a larger parameter alone) and registers `grad_ready` as a
# `register_post_accumulate_grad_hook` on every parameter that requires grad: autograd calls it the
# moment that `.grad` is complete. Your part:
#
# * `grad_ready(p)`: count `p` off its bucket. When bucket `self.next` is complete, flatten its gradients
#   (`torch.cat([q.grad.reshape(-1) ...])`), start `dist.all_reduce(flat, async_op=True)`, keep the handle,
#   advance `self.next` — and repeat while the next bucket is complete too.
# * `finish()` (called after backward, before `optimizer.step()`): first launch, in order, any bucket
#   still incomplete (a parameter got no gradient this step: zeros in its place); then `work.wait()` on
#   every handle, divide by the world size, copy the slices back into each `.grad` that exists; reset
#   the counters for the next step.
#
# **Why launch strictly in bucket order?** Collectives are matched by the order in which ranks call
# them, not by name: if one rank launched bucket 1 first and another bucket 0, each would be summed with
# a *different* bucket on the other (wrong numbers, a size-mismatch crash or a hang). The checker also
# watches `dist.all_reduce`: once per bucket, **asynchronously**, the complete buckets **during
# backward**; a mismatched order ends in an error (at the latest at its 10 s collective timeout), not a hang.

# %%
card("4.2")

# %%
class OverlappedDDP:
    """Exercise 4.2: one async all-reduce per full bucket, launched from gradient hooks during backward."""

    def __init__(self, model, bucket_cap):
        from disttutor.scratch.buckets import plan_buckets

        self.world = dist.get_world_size()
        params = [p for p in model.parameters() if p.requires_grad]
        self.buckets = plan_buckets(params, bucket_cap)  # reverse order: the last layer's grads come first
        self.bucket_of = {id(p): k for k, b in enumerate(self.buckets) for p in b}
        self.missing = [len(b) for b in self.buckets]    # gradients each bucket still waits for
        self.next = 0                                    # the next bucket to launch
        self.handles = []                                # (bucket index, flat tensor, work handle)
        for p in params:
            p.register_post_accumulate_grad_hook(self.grad_ready)

    def grad_ready(self, p):
        raise NotImplementedError("Exercise 4.2: count p off its bucket; launch complete buckets, in order, "
                                  "with dist.all_reduce(flat, async_op=True)")

    def finish(self):
        raise NotImplementedError("Exercise 4.2: wait on every handle, divide by the world size, copy back "
                                  "into .grad, reset the counters")


# %%
hint("4.2")


# %%
print(check_bucketed_ddp(OverlappedDDP))

# %% [markdown] id="md-04-19"
# (Solution: `solutions/ex4_2_bucketed_ddp.py`.) The same algorithm as a full wrapper, with a trace, is
# `disttutor.scratch.ddp.BucketedDDP`. Its hook, the heart of it — autograd calls it once per parameter
# when that gradient is complete:

# %%
show_code("disttutor.scratch.ddp", "hook")


# %% [markdown] id="md-04-20"
# and what one bucket costs: one flat copy, one asynchronous all-reduce, and at `finish()` the wait,
# the division (a SUM becomes a mean) and the copy back into `.grad`:

# %%
show_code("disttutor.scratch.buckets", "bucket")

# %% [markdown] id="md-04-21"
# `async_op=True` is the overlap: `dist.all_reduce` returns a handle at once and autograd carries on
# while the bytes travel; `work.wait()` is the only place a rank blocks. torch's DDP does the same in
# C++ (its `Reducer`), plus the rebuilt bucket order after the first step and the unused-parameter
# walk of section 4. It copies as this wrapper does, by default: with `gradient_as_bucket_view=False`
# each gradient is copied into its bucket and the average back into `.grad`; `True` makes each `.grad`
# a view into its bucket and saves both copies.
#
# Section 3's launch also ran this wrapper on the same 2 ranks and data, compared with the
# single-process model after every step. Its buckets, and its event order next to torch's:

# %% tags=["nbval-check-output"]
ref_scratch = [r["runs"]["bucketed"] for r in ref.results]
print("buckets (reverse order):", ref_scratch[0]["buckets"])

# %% tags=["proof", "nbval-check-output"]
print(check_equals_single_process("from-scratch bucketed DDP", ref_scratch, RTOL))

# %%
plot_trace({"torch DDP": trace_torch, "from scratch": ref_scratch[0]["trace"]})
plt.show()

# %% [markdown] id="md-04-34" tags=["caption"]
# *Figure: torch's DDP and the from-scratch wrapper, event by event: each launches a bucket right after that bucket's last gradient is ready.*

# %% [markdown] id="md-04-22"
# ## 7. What overlap saves, on a slow network
#
# **Derive.** Call `C` the time of a step's compute (forward, backward, optimiser step) with nothing
# sent, and `M` the time of the all-reduce of its gradients alone. Reduced after backward, a step pays
# `C + M`. Reduced bucket by bucket during backward, it pays at best about `max(C, M)` (only the
# backward can hide the sending), plus the last bucket (the first layers), which only starts when
# backward ends.
#
# **Measure, on a network that behaves like one.** On one machine the ranks' "network" is loopback:
# the all-reduce is CPU work on the same cores as the backward, with little to hide it behind. So the
# program `emulated_link` puts DDP's buckets on an **emulated 1 GbE link**: the real gloo all-reduce
# still runs, and a timer hands its result back no earlier than the link's all-reduce time (from its
# latency and bandwidth), without using the CPU. A communication hook sends each bucket as soon as it is ready (overlap) or holds all
# until the last is ready (no overlap); `no_sync` times compute alone. Interleaved rounds, medians:

# %% [markdown] id="md-04-32" tags=["derivation"]
# **Derivation, bucket by bucket.** The backward hands over buckets $b = 1 \dots k$ of $S_b$ bytes, bucket $b$ at time $r_b$.
#
# * One bucket's ring all-reduce on $n$ ranks: $t_b = 2(n-1)\,\alpha + \frac{2(n-1)}{n}\cdot\frac{S_b}{B}$.
# * The link carries one at a time: bucket $b$ ends at $e_b = \max(r_b, e_{b-1}) + t_b$.
# * It hides if $e_b \le T_\text{bwd}$, the backward's end: the backward still to come, $T_\text{bwd} - r_b$, covers its queue and $t_b$.
# * The last bucket (the first layers) is ready at $T_\text{bwd}$: exposed $= e_k - T_\text{bwd} \ge t_k$.
# * If every earlier bucket hides, a step takes $C + t_k$ rather than $C + M$, with $M = \sum_b t_b$.

# %%
emu = disttutor.launch("emulated_link", nproc=2, stream=False, timeout=300,
                       args={"link": "1GbE", "parts": ("overlap",)})
print(emu.command)
o = emu.results[0]["overlap"]
C, M, OV, DE = (1e3 * o[k] for k in ("compute_s", "comm_s", "overlap_s", "deferred_s"))
print(f"C = {C:.0f} ms, M = {M:.0f} ms: max(C, M) = {max(C, M):.0f} ms, C + M = {C + M:.0f} ms")
print(f"step with overlap {OV:.0f} ms, without overlap {DE:.0f} ms")

# %% tags=["proof"]
from disttutor.checks.claims.ch04 import overlap_verdict

print(overlap_verdict(o, quiet=disttutor.quiet(ranks=2)))

# %% tags=["schematic"]
from disttutor.links.presets import preset
from disttutor.viz.bucket_overlap import plot_bucket_overlap

link, compute = preset(emu.results[0]["link"]), o["compute_s"]  # the run's link; its step with nothing sent
# A backward does about twice a forward's matmul FLOPs: a third of the compute forward, two thirds backward.
plot_bucket_overlap(o["bucket_bytes"], emu.results[0]["world"], link, forward_s=compute / 3, backward_s=2 * compute / 3)
plt.show()

# %% [markdown] id="md-04-35" tags=["caption"]
# *Figure: the derivation drawn with this run's buckets, link and compute time: green bars hide under the backward, red ones run after it.*

# %%
from disttutor.viz.links import plot_overlap, plot_overlap_timeline

fig, (ax_time, ax_bars) = plt.subplots(2, 1, figsize=(7.5, 5.8), layout="constrained")
plot_overlap_timeline(o, link.caption(), ax=ax_time)
plot_overlap(o, link.caption(), ax=ax_bars)
plt.show()

# %% [markdown] id="md-04-36" tags=["caption"]
# *Figure: the same step measured on the emulated link: top, where the buckets really went; below, the step times against max and sum.*

# %% [markdown] id="md-04-23"
# The line above gives the measured ratio and its direction. The emulated time is a floor: when the
# real loopback all-reduce outlasts the link (a busy machine), the real time shows. A GPU computes a
# backward far faster than this CPU while the network does not speed up with it, so `M` grows next to
# `C`: that is what buckets and overlap are for. Chapter 8 takes this run further: bucket sizes and compression.

# %% [markdown] id="md-04-25"
# ## 8. DDP's pros and cons (article §5.4), revisited
#
# * **Pros.** One process per device: no master bottleneck, no GIL contention, no scatter/gather of the
#   model each step (chapter 3). Communication is a bucketed all-reduce overlapped with backward, and the
#   same program scales from one machine to many (chapter 5).
# * **Cons — and what you now know to do about them.** A process group to set up (`init_process_group`
#   under torchrun); data to shard (`DistributedSampler`, `set_epoch`, `drop_last`); every rank must make
#   the same collectives in the same order (uneven inputs → `Join`; unused parameters →
#   `find_unused_parameters`); and every replica holds the **whole** model, gradients and optimiser
#   state — which is what FSDP (chapter 11) removes.
#
# To take with you: `python3 course.py plain ddp --out DIR` copies `ddp.py`, a script like section 1's with
# gradient accumulation under `no_sync()` (one all-reduce per optimiser step), to run with
# `torchrun --nproc-per-node 2 ddp.py` on your machine or cluster.

# %% [markdown] id="md-04-39"
# ## 9. Exercise 4.3 — a single-process script, made DDP
#
# Section 1 from your own hands: the stub's docstring holds a single-process loop; write its DDP version.
# The checker runs it on every rank, each with different initial weights, and compares the result with
# one process trained on the same global batches.

# %%
card("4.3")


# %%
def train_ddp(model, train_set, eval_set, epochs, batch_size, lr, checkpoint_path):
    """Exercise 4.3: this single-process loop as DDP, on every rank (the process group exists already).

        opt = torch.optim.SGD(model.parameters(), lr=lr)
        loader = DataLoader(train_set, batch_size=batch_size, shuffle=True)
        losses = []
        for epoch in range(epochs):
            for x, y in loader:
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()
            total, count = 0.0, 0
            with torch.no_grad():
                for x, y in DataLoader(eval_set, batch_size=batch_size):
                    total += F.cross_entropy(model(x), y, reduction="sum").item()
                    count += len(y)
            losses.append(total / count)
        torch.save(model.state_dict(), checkpoint_path)
        return losses

    Return the same list on every rank: after each epoch, the mean loss over ALL of eval_set, each
    sample counted once: split eval_set across the ranks (each sample evaluated on exactly one rank)
    and combine the ranks' sums and counts. Every step takes a full batch of batch_size on every rank, from a
    DistributedSampler with its defaults (seed 0, shuffled). Rank 0 alone saves the plain model.
    The checker looks for the checkpoint on every rank as soon as your function returns there.
    Put your imports inside the function: only its code travels to the ranks.
    """
    raise NotImplementedError("Exercise 4.3: DDP, DistributedSampler, set_epoch, drop_last, dist.all_reduce, "
                              "dist.barrier")


# %%
hint("4.3")

# %%
print(check_ddp_script(train_ddp))

# %% [markdown] id="md-04-38"
# ## Puzzles
#
# One exact answer each: write yours into `mine`, then run the cell.

# %% tags=["puzzle"]
puzzle("4.z1", mine=None)

# %% tags=["puzzle"]
puzzle("4.z2", mine=None)

# %% tags=["puzzle"]
puzzle("4.z3", mine=None)

# %% tags=["puzzle"]
puzzle("4.z4", mine=None)

# %% [markdown] id="md-04-37"
# ## Problems
#
# Work each one on paper, write your number into `mine`, then run the cell. The last one uses section 7's run.

# %% tags=["problem"]
problem("4.p1", mine=None)

# %% tags=["problem"]
problem("4.p2", mine=None)

# %% tags=["problem"]
problem("4.p3", mine=None)

# %% tags=["problem"]
problem("4.p4", mine=None, last_bytes=o["bucket_bytes"][-1], world=emu.results[0]["world"], alpha=link.alpha.value,
        bandwidth=link.beta.value, compute_s=o["compute_s"], overlap_s=o["overlap_s"])

# %% [markdown] id="md-04-26" tags=["takeaways"]
# ## Key takeaways
#
# * DDP runs one process per device; each trains on its shard, and the all-reduced mean gradient makes every replica take the same step.
# * The wrap broadcasts rank 0's weights: replicas start equal and stay equal, step by step equal to one process on the whole batch.
# * `DistributedSampler` pads to equal shards (or drops with `drop_last`); `set_epoch` reshuffles each epoch.
# * Gradients travel in buckets, in reverse parameter order, all-reduced while backward still runs: on a slow network that overlap is why DDP is fast.
# * `find_unused_parameters=True` is for models with unused parameters, and adds a graph traversal to every forward.

# %% [markdown] id="md-04-27" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 4.1 (predict, then run).** `DistributedSampler` with its defaults, **100 samples on 3 ranks**: how many samples does each rank see in one epoch? Write a number into `my_prediction`, then run the next cell (a 1-epoch DDP run).

# %% tags=["predict"]
my_prediction = None  # a number: samples per rank per epoch, 100 samples on 3 ranks

# %%
import disttutor

q1 = disttutor.launch("ddp", nproc=3, args={"samples": 100, "epochs": 1, "show": 0}, stream=False)
measured = q1.results[0]["per_rank"]
assert {r["per_rank"] for r in q1.results} == {measured}  # equal shards: else one rank's extra all-reduce has no partner
reveal("4.q1", my_prediction, measured, rel_tol=0,  # a count: exact
       explain=f"ceil(100 / 3) = {measured}: the sampler hands out {3 * measured} indices, repeating the first "
       f"{3 * measured - 100}; `drop_last=True` would give {100 // 3} each.")

# %% [markdown] id="md-04-28" tags=["question"]
# **Question 4.2.** Why does DDP broadcast rank 0's weights when it wraps the model? What would go wrong, and would anything warn you, if it did not?

# %%
answer("4.q2")

# %% [markdown] id="md-04-29" tags=["question"]
# **Question 4.3.** Why are DDP's buckets filled in *reverse* parameter order, and how does that let communication overlap the backward pass?

# %%
answer("4.q3")

# %%
disttutor.course.chapters.glossary(4)
