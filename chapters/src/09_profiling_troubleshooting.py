# %% [markdown] id="md-09-01"
# # Chapter 9 — Troubleshooting every rank, then profiling them
#
# *Article §9 (性能分析与调试): §9.1 shows a `torch.profiler` snippet; §9.2 「常见问题与解决方案」 is an empty heading.*
#
# This chapter fills §9.2: the settings that make a distributed error readable, twenty failure modes reproduced,
# and how to find the rank a hung job waits for. Then §9.1: the profiler on every rank, and a
# **straggler** (the slow rank every other rank waits for) found in the traces.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(9)

# %% [markdown] id="md-09-02" tags=["opening"]
# **After this chapter you can**
# * bound every collective with a timeout and make a mismatch name itself (`TORCH_DISTRIBUTED_DEBUG=DETAIL`);
# * find your error text in an index of 21 failure modes (20 reproduced here), and say which rank a stuck job waits for;
# * profile every rank, find a straggler (Exercise 9.1) and fix two silently wrong programs (9.2, 9.3).

# %%
import os
import tempfile

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

import disttutor
from disttutor.checks.claims import ch09
from disttutor.course.problems import problem
from disttutor.course.puzzles import puzzle
from disttutor.troubleshoot import diagnose, traces
from disttutor.troubleshoot import modes as troubleshoot
from disttutor.viz import profiling as viz

# %% [markdown] id="md-09-28"
# ## 1. The settings to reach for first
#
# * **`init_process_group(timeout=...)`**: how long a collective waits for the other ranks before it fails.
#   The defaults are long (gloo 30 min, NCCL 10 min); while debugging, use seconds.
# * **`TORCH_DISTRIBUTED_DEBUG=DETAIL`** in every rank's environment (read when `torch.distributed` is imported):
#   before each collective, the ranks compare its operation, shapes and dtypes over an extra gloo group, and a
#   mismatch becomes an error naming both sides. That check costs communication: use it to debug.
# * **Every rank's Python stack** (`py-spy dump --pid PID`): where each rank is when a job hangs (section 3).
#
# On GPUs, NCCL has its own: `NCCL_DEBUG=INFO` logs NCCL's set-up, and `TORCH_NCCL_DUMP_ON_TIMEOUT=1` (with
# `TORCH_NCCL_ENABLE_MONITORING=1`) dumps the record of recent collectives when one times out; that record's
# size, `TORCH_NCCL_TRACE_BUFFER_SIZE`, is 2000 entries in the NCCL process group unless you set it (0 turns it
# off; only the opt-in TorchComms backend, `TORCH_DISTRIBUTED_USE_TORCHCOMMS=1`, defaults it to 0).
#
# The script below has one bug: rank 0 calls `all_reduce` while rank 1 calls `broadcast`.

# %%
%%writefile mismatch.py
import datetime
import os

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))  # debug with seconds, not 30 min
x = torch.ones(4)
if rank == 0:
    dist.all_reduce(x)           # rank 0 sums ...
else:
    dist.broadcast(x, src=0)     # ... while rank 1 waits for a broadcast: two different collectives
dist.destroy_process_group()

# %% [markdown] id="md-09-29"
# Run under `torchrun` as it is, it only times out: after 3 s a rank reports that it waited for data that never
# came (the index's row *Different collectives on different ranks*, below); the other rank, if it is still
# waiting when the first gives up, may read `Connection closed by peer` instead. Run with
# `TORCH_DISTRIBUTED_DEBUG=DETAIL`, it prints the error a rank raised itself (abridged):

# %%
run = disttutor.launch("mismatch.py", nproc=2, env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, check=False, stream=False)
print("TORCH_DISTRIBUTED_DEBUG=DETAIL", run.command)
print(troubleshoot.first_error(run))

# %% tags=["proof"]
print(ch09.check_detail_script(run))

# %% [markdown] id="md-09-30"
# The ranks compared fingerprints before any data moved, and the error names each rank's operation
# (`ALLREDUCE` against `BROADCAST`), shape and dtype.

# %% [markdown] id="md-09-05"
# ## 2. Twenty failure modes, reproduced
#
# The failure modes that need ranks run one after another in one torchrun job. Each gets a fresh group
# (`dist.new_group(timeout=...)`, 3 s), so a mode that hangs on purpose breaks only its own group. The rest
# (environment, ports, samplers, `mp.spawn`) run from one plain Python subprocess.

# %%
local = troubleshoot.reproduce_local([m.key for m in troubleshoot.MODES if m.where == "local"])
group, res = troubleshoot.reproduce_group([m.key for m in troubleshoot.MODES if m.where == "group"])
repros = {**local, **group}
print(f"{len(repros)} failure modes reproduced")

# %% tags=["proof"]
print(ch09.check_reproduced(res, troubleshoot.mismatches(repros), len(repros)))

# %% tags=["proof"]
print(ch09.check_mismatch_plain_and_detail(repros))

# %% [markdown] id="md-09-03"
# ### The index: what you see → the fix
#
# The middle column is the beginning of what each reproduction above really printed (the lowest rank that
# raised an error, else rank 0). Find your error, then apply its fix.

# %%
display(Markdown(troubleshoot.table_markdown(repros)))

# %% [markdown] id="md-09-04"
# **Paste your error**: `troubleshoot.lookup(text)` searches the same table.

# %% tags=["nbval-check-output"]
pasted = """[rank0]: RuntimeError: Expected to have finished reduction in the prior iteration before starting
a new one. This error indicates that your module has parameters that were not used in producing loss."""
for m in troubleshoot.lookup(pasted):
    print(f"{m.title} -> fix: {m.fix}")
assert [m.key for m in troubleshoot.lookup(pasted)] == ["unused_parameters"]

# %% [markdown] id="md-09-25"
# A **skipped** collective and **uneven inputs** raise a timeout only on the rank that waited; the rank that went
# on reports no error. Seven modes raise **nothing** (`different_seeds`, `no_sampler`, `rank_local_loss`,
# `sampler_padding`, `set_epoch`, `accumulation_without_no_sync`, `dataloader_oversubscription`): the training
# runs and is wrong or slow. A wrong one shows against one process that replays every rank's batches.

# %% [markdown] id="md-09-08"
# ## 3. Where is my job stuck?
#
# A hung job prints nothing: every rank waits. `py-spy dump --pid PID` prints a running process's Python stack
# without changing it; `disttutor.troubleshoot.diagnose` does that for every rank of a job and names the
# collective each one waits in (`python -m disttutor.troubleshoot.diagnose RUN_DIR` from a terminal).
#
# Below, chapter 0's `hello` runs with `skip_rank=1` (rank 1 never calls the all-reduce) under a 12 s
# collective timeout; a watcher dumps the stacks 2 s after the ranks start.

# %% [markdown] id="md-09-31" tags=["derivation"]
# **Derivation** (a rank enters the group's collective number $k$ at time $t_k$; $T$ is the collective timeout):
#
# * collective $k$ completes only when every rank has made its call number $k$; a rank that never does leaves the others waiting;
# * each waiting rank raises at $t_k + T$, never sooner, so a stack dump at $t_d < t_k + T$ finds every rank alive;
# * the launch lasts $W = t_\text{start} + T + t_\text{stop}$ (start-up, timeout, teardown): $W > T$, and $W - T$ does not grow with $T$.

# %% tags=["schematic"]
from disttutor.viz.hang_schematic import plot_hang

WORLD, SKIP_RANK, TIMEOUT_S, DUMP_AFTER_S = 2, 1, 12, 2  # the stuck job below
plot_hang(world=WORLD, skip_rank=SKIP_RANK, timeout_s=TIMEOUT_S, dump_after_s=DUMP_AFTER_S)
plt.show()

# %% [markdown] id="md-09-32" tags=["caption"]
# *Figure: the stuck job idealised: rank 0 sits in all-reduce number 0 until the timeout; rank 1 never calls it and raises nothing; the dump falls inside the wait.*

# %%
run_dir = tempfile.mkdtemp(prefix="disttutor-run-")
watch = diagnose.watch(run_dir, world=WORLD, after_s=DUMP_AFTER_S)
hung = disttutor.launch("hello", WORLD, {"skip_rank": SKIP_RANK}, run_dir=run_dir, check=False, stream=False,
                        timeout=120, collective_timeout=TIMEOUT_S)
print(hung.command)
report = watch.report()
print(report)
print(f"launch: {hung.wall_s:.1f} s = the {TIMEOUT_S} s timeout + {hung.wall_s - TIMEOUT_S:.1f} s of start-up and teardown")

# %% tags=["proof"]
print(ch09.check_stacks(report, waiting=0, elsewhere=SKIP_RANK))

# %% tags=["proof"]
print(ch09.check_timeout_bound(hung, timeout_s=TIMEOUT_S, waiting=0))

# %% [markdown] id="md-09-09"
# Rank 0 waits in `all_reduce`; rank 1 is in **no** collective, at the line of `hello.py` where it went its own
# way. The rank to look at is not the one that timed out but the one that is somewhere else.

# %% [markdown] id="md-09-10"
# ## 4. Profiling every rank (article §9.1)
#
# The article's `profile(schedule=...)`, CPU activity only, on every rank of a DDP job. It records torch's
# operators, our own `record_function` regions (`forward`, `backward`, `optimizer`) and gloo's all-reduces;
# `export_chrome_trace` writes one **Chrome trace** (a JSON file of timed events) per rank, which
# https://ui.perfetto.dev opens. `schedule(wait=1, warmup=1, active=3)` skips a step, warms up for one, then
# records three; `prof.step()` advances it (without it nothing is recorded). Rank 1 is a straggler: it sleeps
# 40 ms in each forward.

# %%
%%writefile profile_step.py
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule

out_dir = sys.argv[1]                                      # each rank writes its trace here
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 8)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
trace = os.path.join(out_dir, f"trace_rank{rank}.json")

with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3),
             on_trace_ready=lambda p: p.export_chrome_trace(trace)) as prof:
    for step in range(5):
        x, y = torch.randn(64, 64), torch.randn(64, 8)
        with record_function("forward"):
            if rank == 1:
                time.sleep(0.040)                          # the straggler: a slow data loader, a slow core...
            loss = F.mse_loss(model(x), y)
        with record_function("backward"):
            loss.backward()                                # DDP's gradient all-reduces run in here
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad()
        prof.step()                                        # advance the schedule
dist.destroy_process_group()

# %%
os.makedirs("traces", exist_ok=True)
prof = disttutor.launch("profile_step.py", nproc=2, args=["traces"], stream=False)
print(prof.command)
tr = traces.load("traces")
viz.plot_timeline(tr)
plt.show()

# %% [markdown] id="md-09-33" tags=["caption"]
# *Figure: three profiled steps per rank; rank 1 sleeps 40 ms in each forward. Which bars grew, and on which rank?*

# %% [markdown] id="md-09-15"
# ### Exercise 9.1 — find the straggler
#
# The checker profiles **3 ranks** and picks the slow one at random during the run; your function sees only the
# traces. Write `find_straggler(traces)`: `traces` is `{rank: [Chrome-trace events]}`, dicts with `name`, `cat`,
# `ph`, `ts` and `dur` (microseconds), as `traces.load` returns; return the slow rank.
# Try it from the figure alone: the next section reads the profile.

# %%
card("9.1")

# %%
def find_straggler(traces):
    """The rank whose own work is slowest (traces: {rank: [events]})."""
    raise NotImplementedError("Exercise 9.1: find the slow rank from the traces")


# %%
hint("9.1")


# %%
from disttutor.checks.profiling import check_straggler

check_straggler(find_straggler)

# %% [markdown] id="md-09-12"
# ### Reading the profile
#
# Blue: forward; orange: backward; green: optimizer (main thread); red, thinner: gloo's all-reduce in its own
# thread. The straggler's **forward** is long, and the other rank's **backward** is long: it waits there for
# the straggler's gradients. Each rank's totals over the three recorded steps:

# %%
tot = {r: traces.totals(ev) for r, ev in tr.items()}
for r in sorted(tot):
    print(f"rank {r}: " + ", ".join(f"{k} {v:.0f} ms" for k, v in sorted(tot[r].items())))

# %% tags=["proof"]
print(ch09.check_straggler_profile(tot, slow_rank=1, sleep_ms=40, steps=3))  # 3 recorded steps x 40 ms of sleep

# %% [markdown] id="md-09-13"
# <details><summary><b>The article says</b> export with <code>tensorboard_trace_handler('./log')</code> and
# read the profile in TensorBoard</summary>
#
# Today (*reported*, from the projects' own threads): the TensorBoard profiler plugin, `torch-tb-profiler`, is
# deprecated since August 2023 (pytorch/kineto#1009) and its tutorial was removed in April 2026
# (pytorch/tutorials#3813). The handler still exists in this PyTorch (checked below) and writes the same
# Chrome-trace JSON as `prof.export_chrome_trace(path)`: open it in https://ui.perfetto.dev. **Holistic Trace
# Analysis** (`pip install HolisticTraceAnalysis`) reads these traces too, but its analyses are made for GPU
# kernels and NCCL collectives.
#
# </details>

# %% tags=["proof"]
print(ch09.check_trace_handler())

# %% [markdown] id="md-09-17"
# ## 5. Fix the bug (Exercises 9.2 and 9.3)
#
# Two programs from the index **run without an error but are wrong**: fix each in place, run its cell, then its
# check. The checker runs your function on 2 gloo ranks (10 s collective timeout) and compares the weights, and
# for 9.3 the log, with **one process that replays every rank's batches**.

# %% [markdown] id="md-09-27"
# ### Exercise 9.2 — gradient accumulation under DDP
#
# `accumulate_step(ddp_model, optimizer, micro_batches)` must move the weights as one SGD step on the **mean**
# loss over all ranks' samples does, with **one** all-reduce per step (the checker counts them with a
# communication hook). See *Gradient accumulation without no_sync* in the index.

# %%
card("9.2")

# %%
def accumulate_step(ddp_model, optimizer, micro_batches):
    """One optimizer step over this rank's micro-batches (gradient accumulation under DDP).

    Should move the weights exactly as one SGD step on the mean loss of ALL ranks' samples.
    """
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss = torch.nn.functional.mse_loss(ddp_model(x), y)
        loss.backward()
    optimizer.step()


# %%
hint("9.2")


# %%
from disttutor.checks.fixbug import check_accumulation, check_epochs

check_accumulation(accumulate_step)

# %% [markdown] id="md-09-18"
# ### Exercise 9.3 — reshuffle every epoch, log the global loss
#
# `train_epochs(ddp_model, optimizer, dataset, epochs, batch_size)` returns one log entry per step: the mean
# loss over **all** ranks' samples of that step. See *Forgetting sampler.set_epoch* and
# *A rank-local loss printed as global* in the index; a collective that only rank 0 calls waits until the
# timeout (*A rank skipped a collective*).

# %%
card("9.3")

# %%
def train_epochs(ddp_model, optimizer, dataset, epochs, batch_size):
    """Train for `epochs` epochs on this rank's share of `dataset`; return the loss log.

    The log has one entry per step: the mean loss over ALL ranks' samples of that step.
    """
    from torch.utils.data import DataLoader, DistributedSampler

    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    log = []
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp_model(x), y)
            loss.backward()
            optimizer.step()
            log.append(loss.item())
    return log


# %%
hint("9.3")


# %%
check_epochs(train_epochs)

# %% [markdown] id="md-09-35"
# ## Puzzles
#
# One exact answer each: write yours into `mine`, then run the cell.

# %% tags=["puzzle"]
puzzle("9.z1", mine=None)

# %% tags=["puzzle"]
puzzle("9.z2", mine=None)

# %% [markdown] id="md-09-34"
# ## Problems
#
# Work each one on paper, write your number into `mine`, then run the cell. Problems 9.p3 and 9.p5 start from
# your profile and your stuck job.

# %% tags=["problem"]
problem("9.p1", mine=None)

# %% tags=["problem"]
problem("9.p2", mine=None)

# %% tags=["problem"]
problem("9.p3", mine=None, fast_comm_ms=tot[0]["comm"], slow_comm_ms=tot[1]["comm"],
        steps=len(traces.segments(tr[0])["optimizer"]))

# %% tags=["problem"]
problem("9.p4", mine=None)

# %% tags=["problem"]
problem("9.p5", mine=None, timeout_s=TIMEOUT_S, wall_s=hung.wall_s)

# %% [markdown] id="md-09-21" tags=["takeaways"]
# ## Key takeaways
#
# * A hang is a rank missing from a collective: the others wait, and every rank's stack shows which rank is elsewhere.
# * The worst bugs raise nothing: accumulation without `no_sync`, a missing `set_epoch`, a rank-local loss log; compare with one process.
# * In a DDP profile the fast ranks show the longest backward: they wait for the slow one inside the all-reduce.
# * Bound every collective with `init_process_group(timeout=...)`, and set `TORCH_DISTRIBUTED_DEBUG=DETAIL` while a mismatch hides behind a timeout.

# %% [markdown] id="md-09-22" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 9.1 (predict, then run).** On 3 ranks, rank 1 dies hard (`os._exit`) just before the all-reduce; the collective timeout is 30 s. What happens to ranks 0 and 2? Put a letter into `my_prediction`: **a** they wait the full 30 s, then time out; **b** the job ends before the timeout, because the dead rank is noticed; **c** they finish with a wrong sum.

# %% tags=["predict"]
my_prediction = None  # a letter: "a", "b" or "c"

# %%
import disttutor

q1 = disttutor.launch("hello", nproc=3, args={"crash_rank": 1}, collective_timeout=30, check=False, stream=False,
                      timeout=120)
print(q1.command)
measured, what_happened = ch09.crash_outcome(q1, crashed=1, timeout_s=30)  # the ranks' own reports decide
reveal("9.q1", my_prediction, measured, choices={"a": "they wait the full timeout", "b": "the job ends before the timeout",
                                               "c": "a wrong sum"}, explain=what_happened + ch09.CRASH_WHY[measured])

# %% [markdown] id="md-09-23" tags=["question"]
# **Question 9.2.** In a DDP profile where rank 1 is slow, which rank shows the longest backward, and why? How do you find the straggler instead?

# %%
answer("9.q2")

# %% [markdown] id="md-09-24" tags=["question"]
# **Question 9.3.** One rank's data loader has one batch fewer than the others'. What happens at the end of the epoch under DDP, and what are two fixes?

# %%
answer("9.q3")

# %%
disttutor.course.chapters.glossary(9)
