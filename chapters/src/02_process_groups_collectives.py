# %% [markdown] id="md-02-01"
# # Chapter 2 — Process groups, backends, collectives, and an all-reduce lab
#
# The article's §3 names the three building blocks of `torch.distributed` in a few lines:
# a **process group** (the processes that talk to each other), a **backend** (the library that
# moves the bytes: NCCL, Gloo, MPI) and the training modes built on top. This chapter makes each
# of them concrete on real processes:
#
# 1. **Process groups** — what `torchrun` tells each process, and smaller groups inside the world.
# 2. **Backends** — which ones *this* torch build contains, detected live, and how the same
#    program picks NCCL on GPUs and Gloo on CPUs without edits.
# 3. **Collectives** — every operation later chapters use, each rank's tensor before and after.
# 4. **All-reduce lab** — all-reduce from scratch with point-to-point messages: naive, tree, and
#    the ring (Exercise 2.1), checked against `dist.all_reduce`.
# 5. **Timing** — latency and bus bandwidth of three of them (built-in, naive, ring), with a
#    latency–bandwidth (α–β) model, then naive and ring on an emulated network link.
#
# Every run below is a real `torchrun` job: several processes, a real process group, real
# messages (Gloo over loopback TCP on a CPU-only machine).

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(2)

# %% [markdown] id="md-02-02" tags=["opening"]
# **After this chapter you can**
# * create process groups (the world and subgroups) and say which environment variables torchrun gives each rank;
# * predict what every collective — broadcast, reduce, all-reduce, all-gather, reduce-scatter, gather, scatter, send/recv — leaves on every rank;
# * build an all-reduce from point-to-point messages, and estimate a collective's time from latency and bandwidth (α–β).

# %%
import matplotlib.pyplot as plt
import torch
from IPython.display import display

import disttutor
from disttutor.checks.claims.ch02 import (check_backends, check_collective, check_cost_model, check_current_names,
                                          check_deadlock_ended, check_emulated_link, check_live_collectives,
                                          check_process_groups, check_skipped_new_group, check_sweep,
                                          check_torchrun_env)
from disttutor.course.source import show_code
from disttutor.launcher.results import format_table
from disttutor.viz.collectives import collective_figure, describe_moves

assert disttutor.resolve_program("process_groups")[0] == "disttutor.programs.process_groups"
print("torch", torch.__version__)

# %% [markdown] id="md-02-03"
# ## 1. Process groups
#
# `torchrun` starts one process per device (per *rank*) and gives each one its identity in
# environment variables. `runtime.setup()` reads them and calls `dist.init_process_group`,
# which creates the **default group**: all `WORLD_SIZE` processes.
#
# | variable | meaning |
# |---|---|
# | `RANK` | my number among all processes of the job, `0 .. WORLD_SIZE-1` |
# | `LOCAL_RANK` | my number on *this machine* — the GPU to use is `cuda:LOCAL_RANK` |
# | `WORLD_SIZE`, `LOCAL_WORLD_SIZE` | processes in the job / on this machine |
# | `GROUP_RANK` | which machine (torchrun agent) I am on |
# | `MASTER_ADDR`, `MASTER_PORT` | where the rendezvous store listens |
#
# The program `disttutor/programs/process_groups.py` reports these, then builds subgroups.
# Two ranks first:

# %% tags=["nbval-check-output"]
pg2 = disttutor.launch("process_groups", nproc=2, stream=False)
print(pg2.table("rank", "local_rank", "world_size", "world_sum"))
print(check_process_groups(pg2.results))

# %% [markdown] id="md-02-04"
# Now four. `dist.new_group(ranks)` makes a group of some of the ranks; collectives that get
# `group=` only involve its members. The program makes the even ranks and the odd ranks into two
# groups, and uses `dist.new_subgroups(group_size=2)` for consecutive blocks (the shape of "one
# group per machine"). Each rank contributes `rank + 1`:

# %% tags=["nbval-check-output"]
pg4 = disttutor.launch("process_groups", nproc=4, stream=False)
print(pg4.table("parity_group", "parity_rank", "parity_sum", "block_group", "block_rank", "block_sum",
                "world_sum"))
print(check_process_groups(pg4.results, group_size=2))  # only my group's members were added

# %% [markdown] id="md-02-05"
# A rank has a *global* rank and a rank *inside each group* (`dist.get_rank(group)`): rank 3 is
# number 1 of the odd group. One subtlety is worth its comment in the program: **`new_group` is
# itself collective** — every rank must call it, with the same list, in the same order, even ranks
# that will not be members. What breaks if one rank skips it? `disttutor/programs/skip_new_group.py`
# has rank 0 call `new_group([0, 1])` and rank 1 skip it, then all-reduce over the world; each rank
# prints where it is, and a 10-second collective timeout bounds the wait:

# %% tags=["nbval-check-output"]
skip = disttutor.launch("skip_new_group", nproc=2, args={"skip_rank": 1}, stream=False, check=False,
                        timeout=120, collective_timeout=10)
where = {r.rank: [ln for ln in r.log if ln.startswith(("entering", "left", "skipping"))] for r in skip.ranks}
for r in skip.ranks:
    print(f"rank {r.rank}: {' -> '.join(where[r.rank])} -> {r.status}: {(r.error or '').split(' -- ')[0]}")
print(check_skipped_new_group(skip, where, timeout_s=10))

# %% [markdown] id="md-02-06"
# So nothing "mismatches" quietly: rank 0 waits **inside `new_group`** for rank 1 to join the new
# group, while rank 1 has moved on and waits in the all-reduce for rank 0. Each waits for the other
# in a different call — a deadlock that only the collective timeout ends (here after 10 s; the
# default is many minutes), after which torchrun stops the rank still waiting.
#
# What torchrun set (the values of `MASTER_PORT` and `TORCHELASTIC_RUN_ID` change every launch, so
# only their names are shown):

# %% tags=["nbval-check-output"]
env_rows = [{"rank": r, **{k: v for k, v in rep["env"].items() if k != "MASTER_ADDR"}}
            for r, rep in enumerate(pg4.results)]
print(format_table(env_rows))
print("MASTER_ADDR:", pg4.results[0]["env"]["MASTER_ADDR"], "| also set:", ", ".join(pg4.results[0]["varying_env"]))
print(check_torchrun_env(pg4.results))

# %% [markdown] id="md-02-07"
# ## 2. Backends: NCCL, Gloo, MPI
#
# The backend is the library under `dist.all_reduce` and friends:
#
# * **NCCL** (NVIDIA) — GPU tensors only, uses NVLink / PCIe / InfiniBand directly. The one to use
#   for training on NVIDIA GPUs.
# * **Gloo** (Meta) — CPU tensors (and some GPU collectives, slowly), over TCP. Built into every
#   PyTorch wheel; it is what runs everything in this course on a laptop, and what people use for
#   CPU-side coordination next to NCCL.
# * **MPI** — uses the cluster's MPI library. The article lists it as a choice; the true story is
#   that PyTorch only gets it when *built from source* against an MPI installation — the wheels on
#   PyPI are built with `USE_MPI=OFF`. Newer names exist too (UCC; XCCL for Intel GPUs).
#
# Which ones this torch contains, asked live:

# %%
import re

import torch.distributed as dist

available = {name: getattr(dist, f"is_{name}_available", lambda: False)() for name in ("gloo", "nccl", "mpi", "ucc", "xccl")}
build_flags = dict(re.findall(r"USE_(MPI|NCCL|GLOO)=(\w+)", torch.__config__.show()))
print(format_table([{"backend": k, "built in": v, "build flag": build_flags.get(k.upper(), "-")} for k, v in available.items()]))
print(check_backends(available, build_flags))

# %% [markdown] id="md-02-08"
# `runtime.setup()` picks for you: NCCL with `cuda:LOCAL_RANK` when every local rank has its own
# GPU, otherwise Gloo on CPU. Programs never name a backend, so the same file runs on a laptop and
# on a GPU node. Here is the choice on this machine, and what the ranks actually used:

# %%
from disttutor.rank import runtime

n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
choice = runtime.pick_backend(None, local_world_size=4, local_rank=0)
print(f"GPUs: {n_gpu}; runtime picks: {choice[0]} on {choice[1]}")
print(pg4.table("backend", "device"))
assert {r["backend"] for r in pg4.results} == {choice[0]}
if n_gpu < 4:
    print("No 4 GPUs here: NCCL cannot run, so the ranks above used gloo on CPU. Same code, other backend.")

# %% [markdown] id="md-02-09"
# Asking for NCCL where it cannot run is a clear error before anything starts (not a hang):

# %%
try:
    disttutor.launch("process_groups", nproc=2, backend="nccl", stream=False)
    print("NCCL launch worked: this machine has GPUs")
except ValueError as e:
    print("ValueError:", e)
    assert n_gpu < 2

# %% [markdown] id="md-02-10"
# ## 3. The collectives
#
# A **collective** is an operation every rank of a group calls; the backend moves the data. The
# program `disttutor/programs/collectives.py` runs each one once on 4 ranks. Rank `r` starts from
# `x = [10r+1, 10r+2]` (so you can read off whose data went where). One launch, then, for each
# collective, the line of the program that calls it, a picture of the data it moved, and a checked
# table. The pictures are drawn from what the ranks reported, not by hand
# (`disttutor/viz/collectives.py`): every value a rank holds afterwards is traced back to the rank
# and position it came from (a copy), or to the position whose sum over all ranks it is (a
# reduction), and coloured by its source rank. A thick bar separates **chunks**: the pieces of a
# tensor that move together (here 2 elements). Each result is also checked against the same
# arithmetic done here in one process with plain torch.

# %%
from disttutor.programs.collectives import start

coll = disttutor.launch("collectives", nproc=4, stream=False)
N = coll.world_size
X = torch.stack([start(r, 2, "cpu") for r in range(N)])           # every rank's x, here in one process
X_BIG = torch.stack([start(r, 2, "cpu", k=N) for r in range(N)])  # the 8-element inputs


def show(op):
    """Rank-sorted table of one collective: each rank's tensor before and after ('-': undefined/none)."""
    rows = [{"rank": r, "before": "-" if rep[op]["before"] is None else rep[op]["before"],
             "after": "-" if rep[op]["after"] is None else rep[op]["after"]} for r, rep in enumerate(coll.results)]
    print(format_table(rows))


def picture(op):
    """The call, quoted from the installed program, and the data it moved, from the ranks' own reports."""
    quote = show_code("disttutor.programs.collectives", op)
    display(quote)
    call = next(ln.split("#")[0].strip() for ln in quote.lines if "dist." in ln)
    fig = collective_figure(op, [rep[op]["before"] for rep in coll.results],
                            [rep[op]["after"] for rep in coll.results], chunk=2, code=call)
    plt.show()


def moves(op):
    """The picture in words (checked): where each chunk each rank holds afterwards came from."""
    print("\n".join(describe_moves(op, [rep[op]["before"] for rep in coll.results],
                                    [rep[op]["after"] for rep in coll.results], chunk=2)))


# %% [markdown] id="md-02-11"
# **broadcast** (`src=0`): everybody ends with rank 0's tensor — how DDP makes all replicas start
# from the same weights.

# %%
picture("broadcast")

# %% tags=["nbval-check-output"]
show("broadcast")
moves("broadcast")
print(check_collective("broadcast", coll.results, X, X_BIG))

# %% [markdown] id="md-02-12"
# **reduce** (`dst=0`): the sum arrives on rank 0 only; the other ranks' buffers are *unspecified*
# afterwards (the backend may use them as scratch space), so they are not shown.

# %%
picture("reduce")

# %% tags=["nbval-check-output"]
show("reduce")
moves("reduce")
print(check_collective("reduce", coll.results, X, X_BIG))

# %% [markdown] id="md-02-13"
# **all_reduce**: the sum on every rank — the collective of data parallelism (averaging gradients).

# %%
picture("all_reduce")

# %% tags=["nbval-check-output"]
show("all_reduce")
moves("all_reduce")
print(check_collective("all_reduce", coll.results, X, X_BIG))

# %% [markdown] id="md-02-14"
# **all_gather** (`all_gather_single`): everybody gets everybody's tensor, in rank order — how
# FSDP rebuilds a layer's full weights from the shards just before using them.

# %%
picture("all_gather")

# %% tags=["nbval-check-output"]
show("all_gather")
moves("all_gather")
print(check_collective("all_gather", coll.results, X, X_BIG))

# %% [markdown] id="md-02-15"
# **reduce_scatter** (`reduce_scatter_single`): each rank has `N` chunks; chunk `i` of the *sum*
# lands on rank `i`. It is the first half of a ring all-reduce, and the heart of FSDP/ZeRO (each rank
# keeps only its shard of the gradients). Older Gloo builds lacked it, so the program asks the backend
# live and also computes the equivalent every backend has: all-reduce, then keep your own slice (which
# moves twice the data).

# %%
picture("reduce_scatter")

# %% tags=["nbval-check-output"]
show("reduce_scatter")
moves("reduce_scatter")
native = coll.results[0]["reduce_scatter"]["native"]
print(f"{coll.results[0]['backend']} implements reduce_scatter natively: {native}")
print(check_collective("reduce_scatter", coll.results, X, X_BIG))

# %% [markdown] id="md-02-16"
# **gather** / **scatter** (`dst=0` / `src=0`): like all_gather, but only rank 0 receives; and the
# reverse, rank 0 hands slice `i` of its tensor to rank `i` (the other ranks' input is unused).

# %%
picture("gather")
picture("scatter")

# %% tags=["nbval-check-output"]
show("gather")
moves("gather")
show("scatter")
moves("scatter")
print(check_collective("gather", coll.results, X, X_BIG))
print(check_collective("scatter", coll.results, X, X_BIG))

# %% [markdown] id="md-02-17"
# **all_to_all** (`all_to_all_single`): every rank has `N` chunks, chunk `j` addressed to rank `j`;
# afterwards rank `i` holds chunk `i` of every rank, in rank order — a transpose of the
# ranks × chunks grid. It is how expert parallelism sends each token to the rank holding its expert
# and back (chapter 12), and how sequence-sharded attention regroups heads.

# %%
picture("all_to_all")

# %% tags=["nbval-check-output"]
show("all_to_all")
moves("all_to_all")
print(check_collective("all_to_all", coll.results, X, X_BIG))

# %% [markdown] id="md-02-18"
# ### The names torch 2.13 recommends, and the ones you will meet in older code
#
# The calls above are the current spellings. PyTorch 2.13 marks two older names of the same
# operations as deprecated — `all_gather_into_tensor` and `reduce_scatter_tensor`, which most code
# written for PyTorch 1.13–2.x uses (FSDP and ZeRO implementations, Megatron-style tensor
# parallelism) — and the private `_all_gather_base` / `_reduce_scatter_base` of even older code.
# They still work (each calls the new function) but warn. The installed torch says so itself:

# %% tags=["nbval-check-output"]
renamed = {"all_gather_into_tensor": "all_gather_single", "reduce_scatter_tensor": "reduce_scatter_single",
           "_all_gather_base": "all_gather_single", "_reduce_scatter_base": "reduce_scatter_single"}
for old, new in renamed.items():
    note = getattr(getattr(dist, old), "__deprecated__", "")  # set by typing_extensions.deprecated
    print(f"dist.{old:24s} -> dist.{new}: deprecated in this torch: {new in note}")
# The chapter's program uses only the current names (read from its installed source):
print(check_current_names(dist, renamed, show_code("disttutor.programs.collectives").lines))

# %% [markdown] id="md-02-19"
# **send / recv** are point-to-point, not collective: only the two ranks involved take part.
# Pairs (0→1) and (2→3) with blocking calls, then a *ring shift* where every rank sends to its right
# neighbour and receives from its left one with `isend`/`irecv`:

# %% tags=["nbval-check-output"]
show("send_recv")
show("isend_irecv")
print(check_collective("send_recv", coll.results, X, X_BIG))
print(check_collective("isend_irecv", coll.results, X, X_BIG))

# %% [markdown] id="md-02-20"
# **barrier**: nobody leaves until everybody has arrived. Rank `r` sleeps `0.2·r` s first, so rank 0
# waits longest. (Timings: measured, different every run.)

# %%
print(format_table([{"rank": r, "waited (s)": round(rep["barrier"]["waited_s"], 3)} for r, rep in enumerate(coll.results)]))
waits = [rep["barrier"]["waited_s"] for rep in coll.results]
assert waits[0] > waits[-1], "the first to arrive waits the longest"

# %% [markdown] id="md-02-21"
# ### Try them live: edit a tensor, re-run the cell
#
# Each table above took a program launch. With live ranks (chapter 0) the same four ranks stay up
# and you type the collective yourself: change `x`, the op or the group, and re-run the cell in a
# fraction of a second. Every rank starts from the same `x = [10r+1, 10r+2]` as the program.

# %%
%load_ext disttutor
%ranks start -n 4

# %% tags=["nbval-check-output"]
%%ranks
x = torch.tensor([10. * rank + 1, 10. * rank + 2])
y = x.clone()
dist.all_reduce(y)            # try op=dist.ReduceOp.MAX, or y = x * 2 first
y

# %% [markdown] id="md-02-22"
# A group of some ranks: `new_group` is collective, so **every** rank creates **both** groups, in
# the same order, and then uses its own.

# %% tags=["nbval-check-output"]
%%ranks
groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
z = x.clone()
dist.all_reduce(z, group=groups[rank % 2])   # only my group's members are added
gathered = [torch.zeros(2) for _ in range(world_size)]
dist.all_gather(gathered, x)                 # everyone gets everyone's x
print("group sum", z.tolist())
torch.stack(gathered)

# %% [markdown] id="md-02-23"
# The values come back to the notebook with `%ranks pull`, and are checked against the same
# arithmetic done here in one process (`X` from the program's tables). `%%ranks 0,2` runs a cell
# on some ranks only — fine for looking, but a collective there would wait for the missing ranks.

# %% tags=["nbval-check-output"]
%ranks pull y
%ranks pull z
%ranks pull gathered
print(check_live_collectives(y, z, gathered, X))

# %% tags=["nbval-check-output"]
%%ranks 0,2
print(f"rank {rank}: my group holds {dist.get_world_size(groups[rank % 2])} ranks; I am its rank "
      f"{dist.get_rank(groups[rank % 2])}")

# %%
%ranks stop

# %% [markdown] id="md-02-24"
# ### Why the ring shift used `isend`/`irecv`: a deadlock, shown safely
# In a ring step *every* rank sends and receives. Written as "`send` then `recv`" on both sides of a
# pair, both ranks sit in `send`, each waiting for the other to post a `recv`: Gloo's `send` does not
# complete until the receiver is ready, even for the 2-element tensors used here. (Whether a blocking
# send may finish before its receive is posted depends on the backend and the message size, so code
# that happens to work for small tensors can hang for big ones: never rely on it.) With a 3-second
# collective timeout the demo ends on its own:

# %%
dead = disttutor.launch("collectives", nproc=2, args={"deadlock": True, "ops": ["barrier"]},
                        collective_timeout=3, timeout=60, stream=False, check=False)
print(dead.summary(lines=1))
print(check_deadlock_ended(dead, timeout_s=3))

# %% [markdown] id="md-02-25"
# `isend`/`irecv` return at once with a request; posting both and *then* waiting lets every send find
# its receive. (`dist.batch_isend_irecv` does the same for a list of operations.)
#
# ## 4. All-reduce lab
#
# `dist.all_reduce` is one call, but how does it work? Three ways, each with only point-to-point
# messages. For `n` ranks and a tensor of `N` bytes:
#
# | algorithm | how | steps | bytes sent by the busiest rank |
# |---|---|---|---|
# | naive | everybody → rank 0 adds → rank 0 sends the sum back | `2(n−1)` at rank 0 | `(n−1)·N` (and it receives as much) |
# | tree | pairs add up in `log₂n` rounds, the total flows back down | `2·log₂n` | `≈ log₂n·N` at the root |
# | ring | reduce-scatter then all-gather around a ring, `N/n` per message | `2(n−1)` | `2(n−1)/n·N` — *under 2N for any n* |
#
# The ring's bytes per rank barely grow with `n`: that is why it is the bandwidth-optimal choice for
# large tensors. The picture shows its bookkeeping for 4 ranks: rows are ranks, columns the 4 chunks,
# the number says how many ranks' data a chunk already contains; outlined cells just arrived.

# %%
import matplotlib.pyplot as plt

from disttutor.viz.allreduce import plot_ring_schedule, ring_schedule

fig = plot_ring_schedule(4)
plt.show()
final = ring_schedule(4)[-1]["count"]
assert all(c == 4 for row in final for c in row)  # after 2(n-1) = 6 steps every chunk holds all 4 ranks' data

# %% [markdown] id="md-02-26"
# Reduce-scatter, step `k` (counting from 0): rank `r` sends chunk `(r − k) mod n` to rank `r+1`,
# receives chunk `(r − k − 1) mod n` from rank `r−1` and **adds** it into its own copy. After `n−1`
# steps rank `r` holds the complete sum of chunk `(r+1) mod n`. The all-gather then passes finished
# chunks on: step `k` sends chunk `(r − k + 1) mod n` and receives chunk `(r − k) mod n`, *copying*
# it into place.
#
# ### Exercise 2.1 — the ring all-reduce
# Write `ring_all_reduce(tensor)`: it sums `tensor` over all ranks of the default group **in place**
# (like `dist.all_reduce`) and returns it.
#
# * flatten: `flat = tensor.view(-1)` (a view: writing into it writes into `tensor`; if the tensor is
#   not contiguous, work on a contiguous copy and copy back at the end);
# * `chunks = flat.tensor_split(n)` handles sizes not divisible by `n` (and tensors smaller than `n`:
#   some chunks are empty — skip sending and receiving those);
# * in each step post `dist.isend(chunk, right)` and `dist.irecv(buffer, left)`, then `.wait()` both;
# * everything inside the function: the checker sends its *source* to the ranks (`torch` and `dist`
#   are imported for you).
#
# The checker runs your function on 2, 3 and 4 real ranks for many shapes and dtypes and compares
# every element with a single-process reference and with `dist.all_reduce`.

# %%
card("2.1")

# %%
def ring_all_reduce(tensor):
    """Sum `tensor` over all ranks, in place, with a ring of isend/irecv. Returns `tensor`."""
    raise NotImplementedError("Exercise 2.1: implement the ring all-reduce (reduce-scatter, then all-gather)")


# %%
hint("2.1")


# %% tags=["nbval-check-output"]
from disttutor.checks.allreduce import CASES, check_all_reduce, check_ring_allreduce

result = check_ring_allreduce(ring_all_reduce)
print(result)

# %% [markdown] id="md-02-27"
# (The committed notebook shows the untouched stub: the check tells you it is still a stub.) A wrong
# answer does not just fail: the checker names the rank, the ring chunk and the first wrong element.
# Here is a tempting shortcut that is *not* an all-reduce — each rank adds only its left
# neighbour's tensor, once — checked on 3 ranks:

# %% tags=["nbval-check-output"]
def neighbour_sum(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    buf = torch.empty_like(tensor)
    reqs = [dist.isend(tensor.clone(), (rank + 1) % n), dist.irecv(buf, (rank - 1) % n)]
    for q in reqs:
        q.wait()
    return tensor.add_(buf)  # rank r ends with x[r] + x[r-1]: two ranks' share of the sum, not n


wrong = check_all_reduce(neighbour_sum, world_sizes=(3,))
print(wrong)
assert not wrong.passed and all(f"rank {r}" in str(wrong) for r in range(3))

# %% [markdown] id="md-02-28"
# Your function meets these inputs on 2, 3 and 4 ranks (a transposed, non-contiguous tensor among
# them). The reference implementations in `disttutor/scratch/allreduce.py` (naive, tree and ring)
# pass the same checker, so a failure you see here is about your code, not the checker.

# %% tags=["nbval-check-output"]
print(f"{len(CASES) + 1} cases per world size:")
print(format_table([{"shape": s, "dtype": d} for s, d in CASES] + [{"shape": "(6, 4).t()", "dtype": "float32"}]))
assert len(CASES) + 1 == 12

# %% [markdown] id="md-02-29"
# When your ring passes, `print(check_ring_allreduce(ring_all_reduce))` says *passed ✓*. Stuck? The
# solution is in `solutions/ex2_1_ring_allreduce.py`.
#
# ## 5. How fast? Latency, bandwidth and the α–β model
#
# `disttutor/programs/allreduce_bench.py` times the built-in `dist.all_reduce` and the three
# from-scratch ones: warm-up calls, then each timed call starts right after a barrier, the times of
# all ranks are gathered and a call counts as long as its slowest rank; the median over calls is
# kept. Algorithms are interleaved call by call, so a noisy neighbour hurts them all alike.
#
# Two ways to read a time `t` for `N` bytes on `n` ranks (the nccl-tests convention):
# `algbw = N/t`, and **bus bandwidth** `busbw = algbw·2(n−1)/n` — the rate each rank's link
# actually carries in a bandwidth-optimal all-reduce, comparable across `n`.
#
# The **α–β model** says a call costs a fixed latency plus a per-byte cost: `t(N) = α + β·N`. Small
# messages are all α (busbw tiny), large ones all β (busbw → `1/β`, scaled). A sweep of three of them
# (built-in, naive and ring; add `"tree"` to the first argument to time it too) on 2 and on 4
# ranks, from 64 KB to 16 MB (timings vary from run to run):

# %%
import os

from disttutor.viz.allreduce import fits, plot_sweep, sweep

SIZES = (64 << 10, 1 << 20, 16 << 20)
data = sweep(("builtin", "naive", "ring"), nprocs=(2, 4), sizes=SIZES, iters=5, stream=False)
fig = plot_sweep(data, title=f"2 and 4 ranks on {disttutor.cores()} usable CPU cores (measured now)")
plt.show()
def alpha_share(m, nbytes):  # the part of the fitted time t = alpha + beta*N that is per-call latency
    return m.alpha / (m.alpha + m.beta * nbytes) if m.alpha + m.beta * nbytes > 0 else 0.0


models = fits(data)
for (algo, n), m in models.items():
    bw_text = f"1/beta = {m.bandwidth / 1e9:6.3f} GB/s" if m.beta > 0 else "beta ~ 0: times did not grow with size (noise)"
    print(f"{algo:>7} on {n} ranks: alpha = {m.alpha * 1e6:7.1f} us, {bw_text}")
small, large = SIZES[0], SIZES[-1]
share = {size: [alpha_share(m, size) for m in models.values()] for size in (small, large)}
for size, name in ((small, "smallest"), (large, "largest")):
    lat_bound = sum(a > 0.5 for a in share[size])
    size_text = f"{size >> 10} KB" if size < 1 << 20 else f"{size >> 20} MB"
    print(f"at the {name} size ({size_text}) the fitted latency alpha is {min(share[size]):.0%}-"
          f"{max(share[size]):.0%} of the time: {lat_bound} of {len(share[size])} fits latency-bound (alpha > half)")
load = os.getloadavg()[0]
quiet = disttutor.quiet(load)  # timing claims: asserted only on a quiet machine (house rule)
print(f"load {load:.1f}: " + check_sweep(data, ("builtin", "naive", "ring"), (2, 4), SIZES, quiet))

# %% [markdown] id="md-02-30"
# What to look for: the last two lines split each fitted time into latency α and the per-byte
# part β·N, at the smallest and the largest size this sweep measured. The smaller the message, the
# larger α's share (to see the latency-bound end, rerun `sweep` with smaller sizes, e.g.
# `sizes=(1 << 10, 4 << 10, 64 << 10)`). On a busy machine the points scatter — a call lasts as long as its
# slowest rank, and a rank that loses its CPU core for a moment delays everybody; the fit then says
# so (`beta ~ 0`). Rerun, or raise `iters`, to see how much of the picture is noise. Why are the three so close on 2 ranks? The cost model of the table in section 4,
# evaluated (bytes the busiest rank sends, in units of the tensor size `N`):

# %% tags=["nbval-check-output"]
import math

model = {"naive": lambda n: n - 1, "tree": lambda n: math.ceil(math.log2(n)), "ring": lambda n: 2 * (n - 1) / n}
print(format_table([{"ranks": n, **{a: float(f(n)) for a, f in model.items()}} for n in (2, 4, 8, 16)]))
print(check_cost_model(model))

# %% [markdown] id="md-02-31"
# With 2 ranks every algorithm sends one tensor, so only latency separates them; with more ranks the
# naive root and the tree root carry more and more, while the ring stays below `2N`. What the sweep
# above measured at the largest size:

# %%
t = {(r["algo"], r["nproc"]): r["time_s"] for r in data if r["bytes"] == SIZES[-1]}
grow = {a: t[(a, 4)] / t[(a, 2)] for a in ("naive", "ring")}
faster = "ring" if t[("ring", 4)] < t[("naive", 4)] else "naive"
print(f"{SIZES[-1] >> 20} MB, 2 -> 4 ranks: naive {1e3 * t[('naive', 2)]:.0f} -> {1e3 * t[('naive', 4)]:.0f} ms "
      f"(x{grow['naive']:.2f}), ring {1e3 * t[('ring', 2)]:.0f} -> {1e3 * t[('ring', 4)]:.0f} ms (x{grow['ring']:.2f})")
print(f"on 4 ranks the {faster} all-reduce was faster here, by a factor "
      f"{max(t[('ring', 4)], t[('naive', 4)]) / min(t[('ring', 4)], t[('naive', 4)]):.2f}"
      + ("" if faster == "ring" else " -- against the model: on one machine with few cores, ranks share cores "
         "and memory instead of links; rerun on a quiet machine"))
# The robust part: the naive root receives and sends (n - 1) tensors, so its time grows with n.
assert t[("naive", 4)] > t[("naive", 2)]

# %% [markdown] id="md-02-32"
# All ranks of this sweep share one machine's cores and memory, not separate network links, so the
# ring's advantage here is smaller than across machines. Try other sizes and rank counts in the
# widget below.
#
# **The widget** measures what you pick (algorithms, ranks, size range) with a progress bar while it
# runs; it only wraps `measure_and_plot`, which is plain Python (`measure_and_plot(["ring"], [4], 4,
# 4096)` does the same without a widget). Larger sweeps take a while on a laptop.

# %%
from disttutor.viz.allreduce import widget

widget()

# %% [markdown] id="md-02-33"
# ### Ring vs naive on a network: an emulated link
#
# On one machine the ranks share cores and memory, not network links, so the sweep above cannot
# show what the ring is for. Chapter 8 introduces the course's **emulated link**
# (`disttutor/links/`), a stand-in for a network: the messages still travel for real (the sums stay
# exact), but a message of `b` bytes occupies the sender's outgoing link and the receiver's incoming
# link for `α + b/β` (the link's latency α and bandwidth β), one message after another on each; the
# wait is a sleeping timer, not CPU work. The from-scratch functions of section 4 run **unchanged**:
# `over_link` re-binds the name `dist` inside the function to the emulated link's
# `send / recv / isend / irecv`:

# %%
from disttutor.course.source import show_code
from disttutor.viz import links as linkviz

show_code("disttutor.programs.emulated_link", "ring")

# %% [markdown] id="md-02-34"
# On such a link the table of section 4 becomes time. The naive root receives `n−1` whole tensors
# one after another, then sends `n−1`: `2(n−1)·(α + N/β)`. In a ring step every rank sends one chunk
# of `N/n` to its next neighbour while it receives one from the previous, every link busy at once:
# `2(n−1)·(α + N/(nβ))`. When the link is bandwidth-bound
# (`N/β` far above α) the ring is about `n` times faster. The two runs below use 4 and 8 ranks on a
# 1 GbE link, more ranks than this machine may have cores: that is fine here, because a rank spends
# the emulated time asleep, not computing. Where the real loopback message took longer than the
# emulated one (a busy machine), the run counts it as *late* and the time shows it.

# %%
ring_runs = [disttutor.launch("emulated_link", nproc=n, args={"link": "1GbE", "parts": ("ring",), "sizes": (4 << 20,)},
                              stream=False, timeout=280).results[0]["ring"][0] for n in (4, 8)]
link_caption = ring_runs[0]["caption"]
linkviz.plot_ring_vs_naive(ring_runs, link_caption)
plt.show()
for r in ring_runs:
    print(f"{link_caption}: {r['world']} ranks, {r['bytes'] >> 20} MiB: naive {1e3 * r['naive_s']:.0f} ms "
          f"(model {1e3 * r['naive_model_s']:.0f}), ring {1e3 * r['ring_s']:.0f} ms (model {1e3 * r['ring_model_s']:.0f}): "
          f"the ring was {r['naive_s'] / r['ring_s']:.1f}x faster (the link's model: {r['naive_model_s'] / r['ring_model_s']:.1f}x); "
          f"late messages: naive {r['naive_late']}, ring {r['ring_late']}")
print(check_emulated_link(ring_runs, quiet=disttutor.quiet()))  # timing: quiet machine only

# %% tags=["nbval-check-output"]
assert all(r["naive_ok"] and r["ring_ok"] for r in ring_runs)
print("naive and ring all-reduce on the emulated link, 4 and 8 ranks: sums equal dist.all_reduce's")

# %% [markdown] id="md-02-36" tags=["takeaways"]
# ## Key takeaways
#
# * A process group is a set of ranks; `new_group`/`new_subgroups` must be called by **every** rank, in the same order.
# * NCCL for GPUs, Gloo for CPUs (in every wheel): the runtime picks, the program does not change.
# * All-reduce = reduce-scatter + all-gather; a ring sends 2(n−1)/n · N bytes per rank, whatever n.
# * Blocking sends facing each other deadlock: post `isend`/`irecv`, then wait on both.
# * Time ≈ α + β·N: latency rules small messages, bandwidth large ones — the reason DDP packs gradients into buckets.

# %% [markdown] id="md-02-37" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 2.1 (predict, then run).** In `collectives`, rank r of n starts reduce-scatter with the n·2 elements `10r + 1, 10r + 2, …`. On **3 ranks**, what is the **first element rank 1 ends with**? Write a number into `my_prediction`, then run the next cell.

# %% tags=["predict"]
my_prediction = None  # a number: rank 1's first element after reduce_scatter on 3 ranks

# %%
import disttutor

q1 = disttutor.launch("collectives", nproc=3, args={"ops": ["reduce_scatter"]}, stream=False)
got = q1.results[1]["reduce_scatter"]
measured = got["after"][0]
assert got["after"] == got["equivalent"]  # the same as all-reduce then keeping slice 1
reveal("2.q1", my_prediction, measured, rel_tol=0,  # small integers summed in float32: exact
       explain=f"Reduce-scatter sums the inputs element by element and hands chunk i of the sum to rank i: rank 1 gets "
       f"elements 2 and 3 of the sum, " + ", ".join(f"{v:g}" for v in got["after"]) + ", that is " + " + ".join(f"{r['reduce_scatter']['before'][2]:g}" for r in q1.results)
       + f" = {measured:g} for the first one. Each rank ends with 1/n of the reduced tensor — the half of an all-reduce FSDP uses for gradients.")

# %% [markdown] id="md-02-38" tags=["question"]
# **Question 2.2.** A ring all-reduce of a 1 GiB gradient: how many bytes does each rank send on 8 ranks, and on 64? How long does it take at 25 GB/s per link, ignoring latency?

# %%
answer("2.q2")

# %% [markdown] id="md-02-39" tags=["question"]
# **Question 2.3.** Two ranks each call `dist.send(t, dst=peer)` and then `dist.recv(buf, src=peer)`. What happens, why may a test with small tensors not show it, and what are two fixes?

# %%
answer("2.q3")

# %%
disttutor.course.chapters.glossary(2)
