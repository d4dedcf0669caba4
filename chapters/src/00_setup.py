# %% [markdown] id="md-00-01"
# # Chapter 0 — Setup: your first distributed job, and what happens when it goes wrong
#
# Welcome to **disttutor**, a hands-on course on PyTorch distributed training. Everything in it
# really runs: real processes, real collectives. On a laptop without a GPU the processes talk over
# **gloo** on the CPU; on a machine with GPUs the very same programs pick **NCCL** and
# `cuda:LOCAL_RANK` by themselves. (*Rank*, *world size*, *collective*, *backend* and *process group*:
# the box below the chapter's card defines all five.)
#
# In this chapter you will
#
# 1. check your machine with `disttutor.doctor()`;
# 2. launch a 4-process job from a notebook cell and get every rank's results back *as data*;
# 3. see what happens when a collective hangs, when a job runs too long, and when a rank crashes —
#    and that none of them freezes this notebook or leaves processes behind.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(0)

# %% [markdown] id="md-00-02" tags=["opening"]
# **After this chapter you can**
# * check a machine for distributed training with `disttutor.doctor()` and read what it reports;
# * launch a job of several processes from a notebook cell and read every rank's result back as data;
# * tell a hang, a timeout and a crashed rank apart — and know that none of them freezes the notebook or leaves a process behind.

# %% [markdown] id="md-00-03"
# **Five words this course uses everywhere**
#
# | term | what it means |
# |---|---|
# | **rank** | the number of one process of a job: 0, 1, …, world size − 1. Rank 0 is special only where a program makes it so (printing, saving). |
# | **world size** | how many processes the job has (`WORLD_SIZE`); each usually drives one device. |
# | **collective** | an operation every rank of a group calls together, e.g. *all-reduce*: sum a tensor over all ranks and give every rank the sum. It returns only when every rank has joined. |
# | **backend** | the library that moves the bytes between ranks: **gloo** (CPUs, in every PyTorch build) or **NCCL** (NVIDIA GPUs). |
# | **process group** | the set of ranks a collective runs over; `init_process_group` creates the default one, all ranks. |

# %% [markdown] id="md-00-04"
# ### How a cell runs a distributed job
#
# ```
# notebook cell ──disttutor.launch(program, nproc)──▶ torchrun (a subprocess)
#       ▲                                                 │ starts nproc ranks
#       │                                                 ▼
#       │                              program main(), one process per rank:
#       │                                runtime.setup(): env → backend/device → process group
#       │                                runtime.report(...) → run_dir/rank{r}.json
#       │                                process group torn down in `finally`
#       │                                                 │
#       └──── RunResult: per-rank status, results, ◀──────┘
#             logs, wall time → tables, plots, asserts
# ```
#
# Two rules make this safe in Jupyter:
#
# * **The kernel never forks.** A process that has run torch ops can deadlock if it forks (OpenMP
#   and glibc locks are copied mid-use), and `mp.spawn` cannot pickle functions defined in a
#   notebook. So every distributed program is a real module — `python -m disttutor.programs.hello` —
#   started by `torchrun` in a subprocess.
# * **Results come back as files, not parsed text.** Each rank writes a small JSON report; the
#   launcher reads them when the job ends.

# %%
import json
import os

import disttutor
from disttutor.checks.claims.ch00 import (check_allreduce_sum, check_crashed, check_hang_ended, check_live_hang,
                                          check_no_leftovers)

print("disttutor", disttutor.__version__)

# %% [markdown] id="md-00-05"
# ## 1. Check the machine
#
# `doctor()` reports the torch version, CPU cores, GPUs and which process-group backends this
# build of torch contains — then proves the whole chain works with a real 2-rank all-reduce.
# (The lines differ from machine to machine, so this cell's output is not compared by the tests;
# the `assert` below is.)

# %%
report = disttutor.doctor()
print(report)
assert report.ok, "the environment is not ready: see the problems above"

# %% [markdown] id="md-00-06"
# ## 2. Hello, all-reduce
#
# The first program, `disttutor/programs/hello.py`, is a dozen lines. Each rank starts with a
# tensor filled with `rank + 1`; `all_reduce` replaces every rank's tensor with the **sum over all
# ranks**. Here is its core, read from the installed program:

# %%
from disttutor.course.source import show_code

show_code("disttutor.programs.hello", "allreduce")

# %% [markdown] id="md-00-07"
# Launch it on 4 ranks. Each rank's lines appear as they are printed, prefixed with the rank;
# they arrive in whatever order the processes happen to run (that order is *not* deterministic —
# which is why the tests never compare this cell's output).

# %%
res = disttutor.launch("hello", nproc=4)
res

# %% [markdown] id="md-00-08"
# `res` holds every rank's report as Python data. A rank-sorted table is deterministic, so the
# course's tests compare this cell's output on every run:

# %% tags=["nbval-check-output"]
print(res.table("before", "after", "expected"))

# %% [markdown] id="md-00-09"
# And the claim — *every rank ends with the sum over ranks* — is checked, not just shown:

# %%
print(check_allreduce_sum(res.results))

# %% [markdown] id="md-00-10"
# Where did the ranks run? The runtime picked the backend and device for them: NCCL and one GPU
# per rank when every rank on the machine can have its own GPU, gloo + CPU otherwise.
# (Machine-dependent, so not compared.)

# %%
print(res.table("backend", "device"))
backends = sorted({r.info["backend"] for r in res.ranks})
print(f"on this machine ({disttutor.cores()} usable CPU cores): backend {', '.join(backends)}")
print(f"wall time of the job: {res.wall_s:.1f} s (torchrun start-up, 4 x `import torch`, the job)")

# %% [markdown] id="md-00-11"
# That choice is `launch()`'s default, `backend="auto"`. A teacher can fix it for every launch of a
# class — gloo on a shared GPU box, say — by setting `DISTTUTOR_DEFAULT_BACKEND` before JupyterLab
# starts. The default in force in this notebook, and where it came from (machine-dependent, not
# compared):

# %%
print(disttutor.default_backend())

# %% [markdown] id="md-00-12"
# The same program on 2 ranks: nothing in it mentions a world size, so it just works.

# %% tags=["nbval-check-output"]
res2 = disttutor.launch("hello", nproc=2, stream=False)
print(res2.table("after"))
print(check_allreduce_sum(res2.results))

# %% [markdown] id="md-00-13"
# ### What travels back
#
# Each rank wrote `rank{r}.json` into the run directory; big tensors never leave a rank (the
# runtime summarises a tensor as shape, dtype, sum and a hash). The keys of one report:

# %% tags=["nbval-check-output"]
with open(os.path.join(res.run_dir, "rank0.json")) as f:
    rank0 = json.load(f)
print(sorted(rank0))
print(sorted(rank0["results"]))

# %% [markdown] id="md-00-14"
# ## 3. When things go wrong
#
# Distributed programs fail in ways single-process programs do not: one rank waits forever for a
# message another rank never sends. Gloo's default collective timeout is **30 minutes** — a frozen
# notebook. The course's runtime sets it to 60 s, and you can shorten it per launch.
#
# ### A hung collective
#
# `--skip-rank 1` makes rank 1 skip the all-reduce (it sleeps instead). Rank 0 enters the
# collective and waits; after `collective_timeout=3` seconds it gives up with an error, torchrun
# stops rank 1, and the cell ends. The summary shows each rank's status and its last line; the
# whole traceback stays in the result (`hung.ranks[0].log`) for when you need it.

# %%
hung = disttutor.launch("hello", nproc=2, args={"skip_rank": 1}, collective_timeout=3, check=False,
                        stream=False)
print(hung.summary(lines=1))

# %% [markdown] id="md-00-15"
# The statuses are data too, so the story can be checked: rank 0 failed because it waited too long,
# rank 1 was still running and was stopped.

# %% tags=["nbval-check-output"]
print(hung.table())
print(check_hang_ended(hung, skipped=1, timeout_s=3))

# %% [markdown] id="md-00-16"
# ### A job that runs too long
#
# If a collective timeout is long (or a rank spins in Python), the launcher's own wall-clock
# `timeout=` ends the job: it stops torchrun (which stops its workers), kills anything left, and
# raises `LaunchTimeout` naming the ranks that were still running and their last lines.

# %%
try:
    disttutor.launch("hello", nproc=2, args={"skip_rank": 1}, collective_timeout=600, timeout=20,
                     stream=False)
except disttutor.LaunchTimeout as e:
    timed_out = e
    print(e)

# %% tags=["nbval-check-output"]
print("stuck ranks:", timed_out.stuck_ranks)
assert timed_out.stuck_ranks == [0, 1]

# %% [markdown] id="md-00-17"
# ### A crashed rank
#
# `--crash-rank 1` makes rank 1 die with `os._exit(3)` — no Python cleanup, no report, like a
# segfault or the out-of-memory killer. Torchrun notices, stops the other ranks, and the launcher
# names the culprit with its exit code. By default a failed launch raises `LaunchError`; here we
# catch it to look inside.

# %%
try:
    disttutor.launch("hello", nproc=2, args={"crash_rank": 1}, stream=False)
except disttutor.LaunchError as e:
    crashed = e.result
    print(str(e).splitlines()[0])
    print(crashed.summary(lines=1))

# %% tags=["nbval-check-output"]
print(crashed.ranks[1].status, "--", crashed.ranks[1].error)
print(check_crashed(crashed, rank=1, exit_code=3))

# %% [markdown] id="md-00-18"
# ### Nothing is left behind
#
# After each of those failures, no torchrun or worker process of ours is still alive:

# %%
import psutil


def our_jobs():
    mine = psutil.Process().children(recursive=True)
    return [p for p in mine if "disttutor" in " ".join(p.cmdline())]


print(check_no_leftovers(our_jobs()))

# %% [markdown] id="md-00-19"
# Two more guarantees are tested by the course's test suite (`tests/test_lifecycle.py`) rather than
# here, because they need the notebook itself to be interrupted or killed:
#
# * **Interrupting a cell** (the ■ button, or `Ctrl-C` in a terminal) stops the job: the launcher
#   terminates torchrun, which stops its workers, then SIGKILLs whatever remains, and raises
#   `LaunchInterrupted` naming the ranks that were still running.
# * **A killed kernel** (restart, crash, `kill -9`) takes its jobs with it: on Linux torchrun is
#   started with `PR_SET_PDEATHSIG`, so it is told to stop when the kernel dies, and every worker is
#   tied to torchrun the same way.
#
# ### Bad input gets a clear message, before anything starts

# %% tags=["nbval-check-output"]
for bad in [dict(nproc=0), dict(nproc=2.5), dict(nproc=2, backend="mpi"), dict(nproc=2, nprocs=4)]:
    try:
        disttutor.launch("hello", **bad)
    except (ValueError, TypeError) as e:
        print(f"{type(e).__name__}: {str(e).split('. ')[0]}")
try:
    disttutor.launch("helo", nproc=2)
except FileNotFoundError as e:
    print(f"{type(e).__name__}: {e}")

# %% [markdown] id="md-00-20"
# ## Live ranks: type distributed code straight into a cell
#
# Programs are the right tool for timed runs and anything that must start clean. To *explore*,
# it is quicker to keep the ranks alive between cells and type at them. `%ranks start -n 4` starts
# four ranks once (under torchrun, like any program; the process group is set up by the same
# `runtime.setup()`), and each `%%ranks` cell is then sent to every rank as source and run in that
# rank's own persistent namespace — `torch`, `dist`, `rank`, `world_size` and `device` are already
# defined. The last expression's value is shown per rank, always in rank order.

# %%
%load_ext disttutor
%ranks start -n 4

# %% tags=["nbval-check-output"]
%%ranks
t = torch.full((2,), float(rank))
dist.all_reduce(t)
t

# %% [markdown] id="md-00-21"
# Each rank kept its own `t`. `%ranks pull t` brings every rank's value back into this notebook as a
# list in rank order (and `%ranks push name` sends one of yours to every rank):

# %% tags=["nbval-check-output"]
%ranks pull t
print([x.tolist() for x in t])
assert all(x.tolist() == [6.0, 6.0] for x in t)  # 0 + 1 + 2 + 3 on every rank

# %% [markdown] id="md-00-22"
# ### The hung collective, on live ranks
#
# The mistake from section 3 again: rank 1 skips the all-reduce. A live cell has a timeout
# (`--timeout 5` here; 30 s unless you say otherwise). When it expires, the kernel asks every rank
# still busy for its Python stack, tells you which line of *your cell* each is in and what it waits
# in, interrupts them, and — because a rank blocked inside a C++ collective cannot be interrupted —
# restarts the pool. The namespaces are lost, and the message says so. A failed `%%ranks` cell
# fails like any cell that raises, so *Run All* stops there; this one fails on purpose, and
# `--keep-going` lets the chapter go on past it.

# %%
%%ranks --timeout 5 --keep-going
t = torch.ones(2)
if rank != 1:
    dist.all_reduce(t)
t

# %% [markdown] id="md-00-23"
# The same story as data: `disttutor.live.last_result()` is the last cell's result.

# %% tags=["nbval-check-output"]
import disttutor.live

stuck = disttutor.live.last_result()
for r in stuck.ranks:
    print(f"rank {r}: {stuck.status[r]:5}  {stuck.stuck.get(r, '').split(' -- ')[0]}")
print(check_live_hang(stuck, skipped=1, line=3, call="dist.all_reduce(t)"))

# %% [markdown] id="md-00-24"
# The restarted pool works (and `t` is gone, as promised). `%ranks stop` ends it; no process is left.

# %% tags=["nbval-check-output"]
%%ranks
print("t" in dir())
x = torch.ones(1)
dist.all_reduce(x)
x.item()

# %%
%ranks stop
print(check_no_leftovers(our_jobs()))

# %% [markdown] id="md-00-25"
# ## 4. The same thing from a terminal
#
# Everything here also works outside Jupyter:
#
# ```bash
# disttutor doctor
# disttutor run hello -n 4                       # same as the cell above
# disttutor run hello -n 2 -- --skip-rank 1      # arguments after -- go to the program
# torchrun --nproc-per-node 4 -m disttutor.programs.hello   # plain torchrun works too
# ```
#
# Note for readers of the source article: it launches jobs with `python -m torch.distributed.launch`
# and `mp.spawn`. `torch.distributed.launch` is deprecated in favour of **`torchrun`**, which sets
# `RANK`, `LOCAL_RANK` and `WORLD_SIZE` in the environment instead of passing a `--local-rank`
# argument (spelled `--local_rank` before torch 2.0); chapter 5 runs both and shows what goes
# wrong when `launch` is combined with `mp.spawn`.
#
# **Next:** chapter 1 asks *why* we distribute training at all, and chapter 2 opens up the process
# group and every collective the course uses.

# %% [markdown] id="md-00-26" tags=["takeaways"]
# ## Key takeaways
#
# * `disttutor.launch(program, nproc)` starts real processes under torchrun; each rank's report comes back as data (`res.results[r]`).
# * A collective returns only when every rank of its group has called it: a missing rank is a hang, which the collective timeout turns into an error naming the waiting ranks.
# * A crashed rank fails the whole job: the ranks waiting for it end with "another rank died", and no process is left behind.
# * The kernel never forks and never `mp.spawn`s a notebook function: programs are modules, started fresh.
# * gloo on CPUs, NCCL on GPUs: the same program picks its backend and device itself.

# %% [markdown] id="md-00-27" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 0.1 (predict, then run).** `hello` gives rank r a tensor filled with r + 1, then calls `dist.all_reduce(x)` with no `op`. On 4 ranks, what number does **rank 3** hold afterwards? Write it into `my_prediction`, then run the next cell.

# %% tags=["predict"]
my_prediction = None  # a number: what rank 3 holds after the all-reduce on 4 ranks

# %%
import disttutor

q1 = disttutor.launch("hello", nproc=4, stream=False)
measured = q1.results[3]["after"][0]
assert all(set(r["after"]) == {measured} for r in q1.results)  # every rank, every element: the same sum
reveal("0.q1", my_prediction, measured, rel_tol=0,  # small integers summed in float32: exact
       explain=f"Every rank holds {measured:g} = " + " + ".join(f"{r['before'][0]:g}" for r in q1.results)
       + ": `all_reduce` defaults to `ReduceOp.SUM` and leaves the result on **every** rank, not only on rank 0.")

# %% [markdown] id="md-00-28" tags=["question"]
# **Question 0.2.** Rank 1 of a 4-rank job never calls the all-reduce; the collective timeout is 3 s. Which ranks end with an error, which are stopped, and why does nobody wait forever?

# %%
answer("0.q2")

# %% [markdown] id="md-00-29" tags=["question"]
# **Question 0.3.** Why does every job here run a module (`python -m disttutor.programs.NAME`) instead of `mp.spawn` of a function defined in a notebook cell?

# %%
answer("0.q3")

# %%
disttutor.course.chapters.glossary(0)
