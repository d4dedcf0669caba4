# %% [markdown] id="md-00-01"
# # Chapter 0 — Setup: your first distributed job, and what happens when it goes wrong
#
# Welcome to **disttutor**, a hands-on course on PyTorch distributed training. Everything in it
# really runs: real processes, real collectives. On a machine without GPUs the processes talk over
# **gloo** on the CPU; with a GPU for every process, the same code picks **NCCL** and one GPU each.
#
# This chapter starts with the whole of a distributed program, about 15 lines of plain PyTorch, and runs
# it. Then it breaks it on purpose, three ways, and shows that each one ends with a message naming
# the ranks involved and leaves no process behind.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(0)

# %% [markdown] id="md-00-02" tags=["opening"]
# **After this chapter you can**
# * write a complete distributed script (environment, device, process group with a timeout, all-reduce, teardown) and run it under `torchrun`;
# * launch a job of several processes from a notebook cell and read every rank's result back as data;
# * tell a hang, a crash and an interrupted cell apart, and know that each ends with the rank named and no process left behind.

# %% [markdown] id="md-00-03"
# **Five words this course uses everywhere**
#
# | term | what it means |
# |---|---|
# | **rank** | the number of one process of a job: 0, 1, …, world size − 1. Rank 0 is special only where a program makes it so (printing, saving). |
# | **world size** | how many processes the job has (`WORLD_SIZE`); each usually drives one device. |
# | **collective** | an operation every rank of a group calls together, e.g. *all-reduce*: sum a tensor over all ranks and give every rank the sum. It completes only when every rank has joined. |
# | **backend** | the library that moves the bytes between ranks: **gloo** (CPUs, in PyTorch's standard builds) or **NCCL** (NVIDIA GPUs). |
# | **process group** | the set of ranks a collective runs over; `init_process_group` creates the default one, all ranks. |

# %% [markdown] id="md-00-07"
# ## 1. Your first distributed script
#
# A distributed job is the same script running as several processes. `torchrun` starts them and
# tells each one who it is through environment variables: `RANK`, `WORLD_SIZE`, `LOCAL_RANK` (its
# number on this machine), `LOCAL_WORLD_SIZE`, and `MASTER_ADDR`/`MASTER_PORT` (where the ranks
# meet). The script below does the five things a distributed program does:
#
# 1. **read the environment** torchrun set;
# 2. **pick a device**: with a GPU for every local rank, `torch.cuda.set_device(local_rank)` and the
#    NCCL backend; otherwise the CPU and gloo;
# 3. **join the process group**: `init_process_group` finds the other ranks through
#    `MASTER_ADDR`/`MASTER_PORT`. Its `timeout=` is how long a collective may wait for the others
#    before it fails;
# 4. **communicate**: `all_reduce` sums `x` over all ranks and leaves the sum on every rank;
# 5. **leave**: `destroy_process_group`.
#
# The cell writes it to a file, `first_allreduce.py`, next to this notebook.

# %%
%%writefile first_allreduce.py
import datetime
import os

import torch
import torch.distributed as dist

rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])   # set by torchrun
local_rank = int(os.environ["LOCAL_RANK"])                                 # this process's number on its machine
if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):       # a GPU for every local rank
    torch.cuda.set_device(local_rank)
    device, backend = torch.device("cuda", local_rank), "nccl"
else:
    device, backend = torch.device("cpu"), "gloo"

dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))   # a collective waits 60 s at most
x = torch.full((3,), float(rank + 1), device=device)                       # rank r holds [r+1, r+1, r+1]
dist.all_reduce(x)                                                         # sum over ranks, on every rank
print(f"rank {rank}/{world_size} on {device}: {x.tolist()}")
dist.destroy_process_group()

# %% [markdown] id="md-00-08"
# Run it on 4 ranks. In a terminal you would type the `torchrun` line printed at the end.
# `disttutor.launch` runs that same job from a cell: it prefixes each rank's lines with its rank and
# stops every process if the job fails or hangs. The ranks print in whatever order they happen to
# run, so the order can change from run to run.

# %%
import disttutor

res = disttutor.launch("first_allreduce.py", nproc=4)
print(res.command)

# %% tags=["proof"]
from disttutor.checks.claims import ch00

print(ch00.check_script_sum(res.logs))

# %% [markdown] id="md-00-09"
# Every rank printed the same sum, 1 + 2 + 3 + 4. Nothing in the script names the world size: the
# same file runs on any number of ranks.
#
# **Why a file, and not a function in this notebook?** The article starts its processes with
# `mp.spawn(train, ...)` (chapter 5 runs it), which starts fresh Python interpreters (its default
# start method is `spawn`) and sends each the function to run, pickled *by reference*: its module
# and name. Pickling a notebook's function works; unpickling it in the child fails, because the
# child's `__main__` is not this notebook and has no such function. (Forking this kernel instead
# would copy a process that has run torch ops, with OpenMP and allocator locks possibly held.) A
# script file that `torchrun` starts has neither problem. The collapsed cell below pickles such a
# function and unpickles it in a fresh interpreter, as the child would.

# %% tags=["proof"]
def train(rank):  # a function defined in a notebook cell
    pass


print(ch00.check_spawn_pickle(train))

# %% [markdown] id="md-00-04"
# ### The course's programs start the same way
#
# The course's programs begin with `with runtime.setup() as ctx:` (chapter 6's two RPC programs
# with `runtime.rpc_setup()`). That is the script's
# first and last lines as a context manager: the same environment variables, the same rule for
# the device and backend, `torch.cuda.set_device`, `init_process_group(timeout=...)` (60 s unless a
# launch asks for another), and `destroy_process_group` in a `finally`, so it runs after an error
# too. It adds two things a course needs: it waits until every rank has started before the timeout
# counts, and it writes each rank's result to a small JSON file that the notebook reads back. The
# first program, `hello`, is the script's middle inside it (abridged):
#
# ```python
# with runtime.setup() as ctx:
#     x = torch.full((cfg.size,), float(ctx.rank + 1), device=ctx.device)
#     dist.all_reduce(x)                      # sum over ranks, result on every rank
#     runtime.report(before=..., after=x.tolist(), ...)
# ```

# %% tags=["proof"]
print(ch00.check_setup_is_the_script())

# %% [markdown] id="md-00-16"
# ### Exercise 0.1 — your first distributed script, from nothing
#
# Now write one in the empty function below, without scrolling back. The function is the whole script,
# run on every rank with no process group yet: read the environment, pick the device and backend, join
# with a `timeout=`, all-reduce `rank + 1`, leave, and return the sum. The checker runs it on 2, then 3 ranks.

# %%
card("0.1")

# %%
def first_job():
    """Exercise 0.1: the whole script, run on every rank; return the all-reduced tensor."""
    raise NotImplementedError("Exercise 0.1: write your first distributed script")


# %%
hint("0.1")

# %%
from disttutor.checks.joining import check_first_job

print(check_first_job(first_job))

# %% [markdown] id="md-00-06"
# ## 2. Results as data
#
# A course program's results come back as Python data instead of printed text. Here is `hello` on
# 4 ranks; the cell prints the `torchrun` line of the job, then a rank-sorted table of what each rank
# reported (`hello.results[r]` is rank r's report as a dict).

# %% tags=["nbval-check-output"]
hello = disttutor.launch("hello", nproc=4, stream=False)
print(hello.command)
print(hello.table("before", "after", "expected"))

# %% tags=["proof"]
print(ch00.check_allreduce_sum(hello.results))

# %% [markdown] id="md-00-10"
# Where did the ranks run? The runtime applied the rule of the script's step 2: NCCL and one GPU per rank
# when every rank on the machine can have its own GPU, gloo and the CPU otherwise. This output
# depends on the machine.

# %%
print(hello.table("backend", "device"))

# %% [markdown] id="md-00-05"
# ### On a new machine
#
# `doctor()` reports the torch version, CPU cores, GPUs and which backends this build of torch
# contains, then runs a real 2-rank all-reduce. If a script above failed on your machine, start
# here; the lines differ from machine to machine.

# %%
report = disttutor.doctor()
print(report)
assert report.ok, "not ready: see the problems above"

# %% [markdown] id="md-00-14"
# ## 3. When things go wrong
#
# Distributed programs fail in a way single-process programs cannot: one rank waits in a
# collective that another rank never joins. The `timeout=` of `init_process_group` is what ends
# that wait. Without it, gloo waits for torch's default, printed below; NCCL's default is 10
# minutes (*reported*: the documentation of `init_process_group`).

# %% tags=["nbval-check-output"]
from torch.distributed.constants import default_pg_timeout

print("gloo's default collective timeout:", default_pg_timeout)

# %% [markdown] id="md-00-11"
# The script below is the first one with a short timeout, 3 s, and one mistake, chosen by its
# argument: with `hang`, rank 1 sleeps instead of joining the all-reduce; with `crash`, rank 1 dies
# with `os._exit(3)`: no Python cleanup, as abruptly as a segfault or the out-of-memory killer.

# %%
%%writefile faults.py
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

fault = sys.argv[1]                                  # "hang" or "crash": what rank 1 does wrong
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
x = torch.ones(3)
if rank == 1 and fault == "hang":
    time.sleep(60)                                   # rank 1 does not join the all-reduce in time
if rank == 1 and fault == "crash":
    os._exit(3)                                      # rank 1 dies: no cleanup, no message
dist.all_reduce(x)                                   # rank 0 waits here for rank 1, 3 s at most
dist.destroy_process_group()

# %% [markdown] id="md-00-12"
# ### A hung collective
#
# Rank 0 enters the all-reduce and waits; after 3 s it raises, and `torchrun` stops rank 1 because
# another rank failed. `check=False` makes `launch` return the failed result instead of raising;
# `summary` shows one line per rank, its status and why.

# %%
hung = disttutor.launch("faults.py", nproc=2, args=["hang"], check=False, stream=False)
print(hung.command)
print(hung.summary(lines=1))

# %% tags=["proof"]
print(ch00.check_hang_ended(hung, skipped=1, timeout_s=3))

# %% [markdown] id="md-00-13"
# Rank 0's line is gloo's own error: it waited 3000 ms for rank 1 in the all-reduce, then gave up.
# Under plain `torchrun` without the `timeout=`, it would simply wait: here for rank 1's 60 s sleep,
# and up to torch's default, printed above, for a rank that never comes. (`launch` gives a script
# that passes no `timeout=` its own collective timeout, 60 s.)
#
# ### A crashed rank
#
# A rank that dies closes its connections to the others. The launcher names the rank that died
# first, with its exit code. The other rank either fails reading from the closed connection or is
# stopped by `torchrun`, whichever comes first.

# %%
crashed = disttutor.launch("faults.py", nproc=2, args=["crash"], check=False, stream=False)
print(crashed.command)
print(crashed.summary(lines=1))

# %% [markdown] id="md-00-15"
# When rank 0 fails before `torchrun` stops it, its error is a connection error naming its peer's
# address: from inside a rank, a crash elsewhere looks like a network failure. The rank at fault is
# the one with the exit code.

# %% tags=["proof"]
print(ch00.check_crashed(crashed, rank=1, exit_code=3))

# %% [markdown] id="md-00-19"
# ### An interrupted cell
#
# The ■ button (or `Ctrl-C` in a terminal) interrupts a cell. `launch` then stops `torchrun`, which
# stops its ranks, kills whatever is still alive, and raises `LaunchInterrupted` naming the ranks
# that were running. The collapsed cell below presses ■ for you, one second after the two ranks of
# `faults.py hang` have started, and then counts this kernel's leftover processes. Restarting or
# killing the kernel takes its jobs with it too: on Linux, `torchrun` and every rank are tied to
# their parent with `PR_SET_PDEATHSIG`, which has the operating system stop a process when its
# parent dies.
#
# One more limit covers the case no collective timeout can: a rank that spins in Python.
# `launch` stops any job after a wall-clock limit (`timeout=`, 120 s unless you pass another). The
# launcher's options are all in its appendix, `docs/launcher.md` in the course's folder.

# %% tags=["proof"]
import os
import signal
import threading
import time


def press_stop_when_running(script: str, nproc: int) -> None:  # what the ■ button does: SIGINT to this kernel
    while sum(script in " ".join(p.cmdline()) for p in ch00.our_jobs()) < nproc + 1:  # torchrun + its ranks
        time.sleep(0.1)
    time.sleep(1)
    os.kill(os.getpid(), signal.SIGINT)


threading.Thread(target=press_stop_when_running, args=("faults.py", 2), daemon=True).start()
try:
    disttutor.launch("faults.py", nproc=2, args=["hang"], stream=False)
except disttutor.LaunchInterrupted as e:
    print(ch00.check_interrupted(e.result, ch00.our_jobs()))
else:
    raise AssertionError("the launch ended before the interrupt arrived")

# %% [markdown] id="md-00-20"
# ## 4. Live ranks: type distributed code straight into a cell
#
# A script starts clean every time, which timed runs need. To *explore*, it is quicker to keep the
# ranks alive between cells. `%ranks start -n 4` starts four ranks once, under `torchrun` and
# `runtime.setup()` like any program; each `%%ranks` cell is then sent to every rank as source
# and run in that rank's own namespace, where `torch`, `dist`, `rank`, `world_size` and `device`
# are already defined. The last expression's value is shown per rank, in rank order.

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
# The same mistake again: rank 1 skips the all-reduce. A live cell has a timeout of its own
# (`--timeout 5` here; 30 s unless you say otherwise). When it expires, each rank still busy is
# asked for its Python stack, and the message names the line of *your cell* it waits in. A rank
# blocked inside a C++ collective cannot be interrupted, so the ranks are restarted and their
# namespaces are lost, as the message says. A failed `%%ranks` cell stops *Run All* like any
# failing cell; `--keep-going` lets this chapter go on past it.

# %%
%%ranks --timeout 5 --keep-going
t = torch.ones(2)
if rank != 1:
    dist.all_reduce(t)
t

# %% tags=["proof", "nbval-check-output"]
import disttutor.live

print(ch00.check_live_hang(disttutor.live.last_result(), skipped=1, line=3, call="dist.all_reduce(t)"))

# %% [markdown] id="md-00-24"
# The restarted ranks work (and `t` is gone, as promised). `%ranks stop` ends them.

# %% tags=["nbval-check-output"]
%%ranks
print("t" in dir())
x = torch.ones(1)
dist.all_reduce(x)
x.item()

# %%
%ranks stop

# %% tags=["proof"]
print(ch00.check_no_leftovers(ch00.our_jobs()))

# %% [markdown] id="md-00-25"
# ## 5. The same jobs from a terminal
#
# Everything here also works outside Jupyter:
#
# ```bash
# torchrun --nproc-per-node=4 first_allreduce.py        # the first script
# torchrun --nproc-per-node=2 faults.py hang             # rank 0 fails after 3 s
# disttutor run hello -n 4                               # a course program: its lines, then a summary
# disttutor doctor
# ```
#
# <details><summary><b>The article says</b> <code>python -m torch.distributed.launch --nproc_per_node=4 ...</code></summary>
#
# Today `torch.distributed.launch` is deprecated in favour of **`torchrun`**, which sets `RANK`,
# `LOCAL_RANK` and `WORLD_SIZE` in the environment instead of passing a `--local-rank` argument
# (spelled `--local_rank` before torch 2.0). Chapter 5 runs both.
# </details>
#
# <details><summary><b>The article says</b> <code>dist.init_process_group(backend='nccl', rank=rank, world_size=world_size)</code>, with no timeout</summary>
#
# That works, but a rank that never joins a collective then holds the others for torch's default
# (printed in section 3 for gloo; 10 minutes for NCCL). Pass `timeout=` as the first script does;
# under `torchrun`, `rank` and `world_size` can be left out too: they are read from the environment.
# </details>
#
# %% [markdown] id="md-00-30"
# ### For readers of the article: every correction in one table
#
# Each chapter corrects the article where it is wrong or outdated, in a box like the two above. The
# table gathers them all: the article's section, what it says, what is true today, and the chapter
# that shows it running.

# %%
import disttutor.course.errata
disttutor.course.errata.index()

# %% [markdown] id="md-00-31"
# **Next:** chapter 1 asks *why* we distribute training at all, and chapter 2 opens up the process
# group and every collective the course uses.

# %% [markdown] id="md-00-26" tags=["takeaways"]
# ## Key takeaways
#
# * A distributed script reads its rank from the environment, picks its device, calls `init_process_group(timeout=...)`, communicates, and calls `destroy_process_group`; `torchrun` starts one copy per rank.
# * A collective completes only when every rank of its group has called it: a missing rank is a hang, which the collective timeout turns into an error on the waiting ranks.
# * A crashed rank fails the whole job: the launcher names it with its exit code, its peers fail or are stopped, and no process is left behind.
# * Programs are files started fresh by `torchrun`: a notebook's function cannot be unpickled in an `mp.spawn` child.
# * gloo on CPUs, NCCL with a GPU for every rank: the same script picks its backend and device itself.

# %% [markdown] id="md-00-27" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 0.1 (predict, then run).** `hello` gives rank r a tensor filled with r + 1, then calls `dist.all_reduce(x)` with no `op`. On **5** ranks, what number does **rank 3** hold afterwards? Write it into `my_prediction`, then run the next cell.

# %% tags=["predict"]
my_prediction = None  # a number: what rank 3 holds after the all-reduce on 5 ranks

# %%
import disttutor

q1 = disttutor.launch("hello", nproc=5, stream=False)
measured = q1.results[3]["after"][0]
assert all(set(r["after"]) == {measured} for r in q1.results)  # every rank, every element: the same sum
reveal("0.q1", my_prediction, measured, rel_tol=0,  # small integers summed in float32: exact
       explain=f"Every rank holds {measured:g} = " + " + ".join(f"{r['before'][0]:g}" for r in q1.results)
       + ": `all_reduce` sums by default (`ReduceOp.SUM`) and leaves the sum on **every** rank.")

# %% [markdown] id="md-00-28" tags=["question"]
# **Question 0.2.** Rank 1 of a 4-rank job never calls the all-reduce; the collective timeout is 3 s. Which ranks end with an error, which are stopped, and why does nobody wait forever?

# %%
answer("0.q2")

# %% [markdown] id="md-00-29" tags=["question"]
# **Question 0.3.** Why does every job here run a file (a script, or `python -m disttutor.programs.NAME`) under `torchrun` instead of `mp.spawn` of a function defined in a notebook cell?

# %%
answer("0.q3")

# %%
disttutor.course.chapters.glossary(0)
