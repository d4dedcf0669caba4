# %% [markdown] id="md-09-01"
# # Chapter 9 — Troubleshooting every rank (and where profiling stands)
#
# *Article §9: 性能分析与调试. Its §9.1 shows a `torch.profiler` snippet; its §9.2 「常见问题与解决方案」
# is an empty heading.*
#
# The chapter's main part is the course's answer to §9.2: **twenty failure modes, each reproduced live** on CPU
# ranks in this notebook — the real error text (or misbehaviour), its cause, the tool that diagnoses
# it, the fix, and the fixed run — plus a diagnosis you can use on your own jobs: **where is my job
# stuck?** Every reproduction is bounded by a few seconds of collective timeout; no cell can hang.
#
# At the end, §9.1: the profiler on every rank, a compute-vs-communication timeline per rank, and a
# straggler to find from the traces (Exercise 9.1); then two broken training programs from the table to
# fix (Exercises 9.2 and 9.3).
#
# Start at the index: find your error text there, jump to its entry.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(9)

# %% [markdown] id="md-09-02" tags=["opening"]
# **After this chapter you can**
# * find your error text in an index of twenty failure modes, each reproduced live, and apply its fix;
# * say where a stuck job is stuck — which rank, which line, which collective — from its stacks;
# * profile every rank, read compute against communication, find a straggler (Exercise 9.1) and fix two silently wrong programs (9.2, 9.3).

# %%
import os
import tempfile

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

import disttutor
from disttutor.checks.claims.ch09 import (check_detail_names_mismatch, check_reproduced, check_straggler_profile,
                                          crash_outcome)
from disttutor.course.source import show_code
from disttutor.programs.profile_ddp import ProfileConfig
from disttutor.troubleshoot import diagnose
from disttutor.troubleshoot import traces
from disttutor.troubleshoot import modes as troubleshoot

LOAD = os.getloadavg()[0]  # wall times below depend on how busy the machine is: we keep this beside them
print(f"load average now: {LOAD:.1f} (on {disttutor.cores()} usable CPU cores)")

# %% [markdown] id="md-09-03"
# ## The index: error text → entry
#
# Generated from the one table in `disttutor/troubleshoot/modes.py`. The middle column is a regular
# expression over the text each reproduction below *really printed* (a test re-runs them all and
# checks this, so the index stays true when PyTorch rewords an error).

# %%
display(Markdown(troubleshoot.index_markdown()))

# %% [markdown] id="md-09-04"
# **Paste your error**: `troubleshoot.lookup(text)` searches the same table.

# %% tags=["nbval-check-output"]
pasted = """[rank0]: RuntimeError: Expected to have finished reduction in the prior iteration before starting
a new one. This error indicates that your module has parameters that were not used in producing loss."""
for m in troubleshoot.lookup(pasted):
    print(f"{m.title} -> fix: {m.fix}")
assert [m.key for m in troubleshoot.lookup(pasted)] == ["unused_parameters"]

# %% [markdown] id="md-09-05"
# ## Reproducing them: one subprocess, one launch
#
# Starting torchrun costs seconds, so the failure modes that need ranks run **one after another in
# one job** (`disttutor/programs/troubleshoot.py`): each mode gets a fresh process group
# (`dist.new_group`, milliseconds) with a **3 s** timeout, so a mode that hangs on purpose waits 3 s
# and breaks only its own group. A barrier on the default group lines the ranks up between modes.
# The modes that need no torchrun (environment, ports, samplers, `mp.spawn`) run in one plain Python
# subprocess (`disttutor/troubleshoot/repro_local.py`), never in this kernel.

# %%
local = troubleshoot.reproduce_local([m.key for m in troubleshoot.MODES if m.where == "local"])
group, res = troubleshoot.reproduce_group([m.key for m in troubleshoot.MODES if m.where == "group"])
print(res.summary())
repros = {**local, **group}
print(check_reproduced(res, troubleshoot.mismatches(repros), len(repros)))
print(f"{len(repros)} failure modes reproduced; the job took {res.wall_s:.0f} s (load {os.getloadavg()[0]:.1f})")

# %% [markdown] id="md-09-06"
# ## The entries
#
# For each: **you see** (the reproduction's real text, from the rank that said the most), the cause,
# the tool, the fix, and what **the fixed run** printed. Times: the wrong run plus the fixed run,
# on this machine, now.

# %%
def entry(m, r):
    lines = [f"### <a id='{m.key}'></a>{m.title}", ""]
    if r is None:
        lines += [f"Shown in {m.where}."]
    else:
        lines += [f"- **you see**: `{r.symptom}`"]
        if r.detail:
            lines += [f"- **with `TORCH_DISTRIBUTED_DEBUG=DETAIL`**: `{r.detail}`"]
    lines += [f"- **cause**: {m.cause}", f"- **tool**: {m.tool}", f"- **fix**: {m.fix}"]
    if r is not None:
        lines += [f"- **fixed run**: `{r.fixed}` ({r.wall_s:.1f} s for both runs)"]
    return "\n".join(lines)


display(Markdown("\n\n".join(entry(m, repros.get(m.key)) for m in troubleshoot.MODES)))

# %% [markdown] id="md-09-07"
# Three things the reproductions show that are easy to get wrong:
#
# * A **mismatched** collective (all-reduce on one rank, broadcast on the other) and a **rank-dependent
#   shape** need not fail on every rank alike: depending on who waits for whom, a rank can time out,
#   or return with a wrong answer and no error. What each rank did in this run is printed below.
#   `TORCH_DISTRIBUTED_DEBUG=DETAIL` turns both into an immediate error that names the operation and
#   shapes of each rank.
# * A **skipped** collective and **uneven inputs** show only a timeout on the rank that waited; the
#   rank that caused it looks fine. The next section finds it.
# * `different_seeds`, `no_sampler`, `rank_local_loss`, `sampler_padding`, `set_epoch` and
#   `accumulation_without_no_sync` raise **no error at all**: the training runs and is wrong or slow.

# %%
for key in ("mismatched_collective", "rank_dependent_shape"):  # every rank's own outcome, not just one
    seen = {r.rank: r.results.get("modes", {}).get(key, {}).get("symptom", "(no report)") for r in res.ranks}
    timed_out = [k for k, v in seen.items() if "Timed out" in v]
    for k, v in seen.items():
        print(f"{key}, rank {k}: {v[:110]}")
    print(f"  -> {len(timed_out)} of {len(seen)} ranks timed out"
          + (f"; rank(s) {[k for k in seen if k not in timed_out]} returned without an error" if len(timed_out) < len(seen) else ""))
print(repros["mismatched_collective"].detail)
print(check_detail_names_mismatch(repros))

# %% [markdown] id="md-09-08"
# ## Where is my job stuck?
#
# A hung job shows nothing: every rank waits. `disttutor.troubleshoot.diagnose` reads **the Python stack of every
# rank** from outside with `py-spy dump` (no change to your program, no stopping it) and says which
# collective each rank waits in. From a terminal, on any job the course launched:
# `python -m disttutor.troubleshoot.diagnose RUN_DIR`; from a notebook, a watcher thread dumps the stacks once the
# ranks have run a few seconds, while the launch is still waiting.
#
# Here: chapter 0's `hello` with `skip_rank=1` — rank 1 never calls the all-reduce.

# %%
run_dir = tempfile.mkdtemp(prefix="disttutor-run-")
watch = diagnose.watch(run_dir, world=2, after_s=2)
hung = disttutor.launch("hello", 2, {"skip_rank": 1}, run_dir=run_dir, check=False, stream=False,
                        timeout=120, collective_timeout=15)
report = watch.report()
print(report)
print(hung.summary())
lines = report.splitlines()
assert lines[0].startswith("rank 0: waiting in all_reduce()") and lines[1].startswith("rank 1: in no collective")

# %% [markdown] id="md-09-09"
# Rank 0 waits in `all_reduce`; rank 1 is in **no** collective, at the line of `hello.py` where it
# went its own way. That is the answer to "who is stuck": not the rank that timed out, but the one
# that is somewhere else.

# %% [markdown] id="md-09-10"
# ## Profiling every rank (article §9.1)
#
# The article's profiler snippet, on every rank of a small DDP run: `disttutor/programs/profile_ddp.py`
# wraps the loop in `torch.profiler.profile` with the article's schedule (skip 1 step, warm up 1, record
# 3), marks our own `record_function` regions (`forward`, `backward`, `optimizer`) and exports **one
# Chrome trace per rank** into the run directory (`trace_rank{r}.json`; open it in
# https://ui.perfetto.dev or `chrome://tracing`). CPU only here, so no `ProfilerActivity.CUDA`.
#
# Rank 1 is made a **straggler**: it sleeps 40 ms in each forward (think: a slow data loader).
# The profiled loop, from the installed program:

# %%
show_code("disttutor.programs.profile_ddp", "profile")

# %% [markdown] id="md-09-11"
# `schedule(wait=1, warmup=1, active=3)` skips a step, warms the profiler up for one, then records
# three; `prof.step()` at the end of each iteration is what advances it (forget it and nothing is
# recorded). `on_trace_ready` runs once the active steps are done: each rank writes its own file.

# %%
from disttutor.viz import profiling as viz

prof_dir = tempfile.mkdtemp(prefix="disttutor-run-")
prof = disttutor.launch("profile_ddp", 2, ProfileConfig(slow_rank=1), run_dir=prof_dir, stream=False, timeout=240)
print(prof.summary())
print(sorted(f for f in os.listdir(prof_dir) if f.startswith("trace_")))
tr = traces.load(prof_dir)
viz.plot_timeline(tr)
plt.show()

# %% [markdown] id="md-09-12"
# Blue: forward, orange: backward, green: optimizer (the main thread); red, thinner: gloo's all-reduce
# in its own thread. The straggler's **forward** is long; the other rank's **backward** is long —
# it waits there for the straggler's gradients. The totals, and each rank's top operators and
# peak memory as the profiler saw it (`profile_memory=True`, CPU allocator):

# %%
tot = {r: traces.totals(ev) for r, ev in tr.items()}
for r in sorted(tot):
    res = prof.results[r]
    print(f"rank {r}: " + ", ".join(f"{k} {v:.0f} ms" for k, v in sorted(tot[r].items()))
          + f"; peak memory {res['peak_bytes'] / 1024:.0f} KiB")
    print("   top ops (self CPU ms): " + ", ".join(f"{o['name']} {o['self_ms']:.1f}" for o in res["top_ops"][:4]))
print(check_straggler_profile(tot, slow_rank=1, sleep_ms=40, steps=3))  # 3 profiled steps x 40 ms of sleep

# %% [markdown] id="md-09-13"
# **TensorBoard.** The article exports with `torch.profiler.tensorboard_trace_handler('./log')` for
# TensorBoard's profiler plugin, `torch-tb-profiler`. That plugin is gone (*reported*, from the
# projects' own threads):
#
# * a kineto maintainer dates its deprecation to 23 August 2023 (pytorch/kineto#1009); PyTorch's
#   tutorial *PyTorch Profiler With TensorBoard* then carried a deprecation notice pointing to Perfetto
#   or the Chrome trace (pytorch/tutorials#3128, October 2024), and in April 2026 the tutorial itself was
#   **removed** (pytorch/tutorials#3813, "Remove deprecated TensorBoard profiler tutorial"), as a step of
#   pytorch/kineto#1340, which tracks removing the plugin from the kineto repository (RFC:
#   pytorch/kineto#1248).
# * Its last release on PyPI is **0.4.3** (`pip index versions torch-tb-profiler`: 0.4.3, 0.4.1, 0.4.0,
#   0.3.1, ...); the files in that wheel are dated 2023-10-06; it needs `pandas` and `tensorboard`. The
#   course does not install it.
#
# The handler itself still exists in this PyTorch (checked below) and writes the same Chrome-trace JSON
# as `prof.export_chrome_trace(path)` (what we used): open it in https://ui.perfetto.dev or
# `chrome://tracing`.

# %%
import torch

print(torch.__version__, "tensorboard_trace_handler:", callable(torch.profiler.tensorboard_trace_handler))
assert callable(torch.profiler.tensorboard_trace_handler)

# %% [markdown] id="md-09-14"
# **Holistic Trace Analysis** (HTA, `pip install HolisticTraceAnalysis`; the kineto project names it the
# plugin's successor) reads these traces, but its analyses are made for GPU kernels and NCCL
# collectives. The course does not depend on it (`disttutor/troubleshoot/traces.py` reads the JSON in a
# few lines). Where HTA is installed, this cell runs its analyses on the traces above and prints what
# each returned or raised; where it is not, it says so:

# %%
probe = traces.hta_probe(prof_dir)
if probe is None:
    print("HTA is not installed here: its analyses were not run (pip install HolisticTraceAnalysis, then rerun).")
else:
    print("\n".join(probe))
    raised = [line.split(":")[0] for line in probe[1:] if ": raised " in line]
    print(f"-> {len(raised)} of {len(probe) - 1} HTA analyses raised on these CPU traces"
          + (f" ({', '.join(raised)})" if raised else ""))

# %% [markdown] id="md-09-15"
# ### Exercise 9.1 — find the straggler
#
# The checker profiles **3 ranks**, one of them slow, chosen **at random** during the run (the
# program writes its choice into the run directory; your function only gets the traces). Write
# `find_straggler(traces)`: `traces` is `{rank: list of Chrome-trace events}` (dicts with `name`,
# `cat`, `ph`, `ts`, `dur` in microseconds), as `disttutor.troubleshoot.traces.load` returns. Return the slow rank.
# Careful: the rank with the longest *backward* is not it. The `hint("9.1")` cell under the stub helps.

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

# %% [markdown] id="md-09-16"
# (Solution: `solutions/ex9_1_find_straggler.py`; the course's tests run it through this checker.)

# %% [markdown] id="md-09-17"
# ## Fix the bug (Exercises 9.2 and 9.3)
#
# Two programs that meet entries of the table above and **run without an error, but are wrong**. Each
# cell below holds the broken program: fix it in place, run the cell, then the check. The checker runs
# your function on 2 gloo ranks, each collective bounded by a 10 s timeout (a version that hangs ends
# with a message), and compares the weights (and, for 9.3, the log) with **one process that replays
# every rank's batches** on the same model. Each exercise's `hint(...)` cell gives a nudge, then more.
#
# ### Exercise 9.2 — gradient accumulation under DDP
#
# `accumulate_step(ddp_model, optimizer, micro_batches)` gets this rank's micro-batches and must make
# the step that one SGD step on the **mean** loss over all ranks' samples makes, with **one**
# all-reduce per step (the checker counts DDP's all-reduces with a communication hook). See the entry
# [accumulation without `no_sync`](#accumulation_without_no_sync).

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
# `train_epochs(ddp_model, optimizer, dataset, epochs, batch_size)` trains on this rank's share of the
# dataset and returns a log with one entry per step: the mean loss over **all** ranks' samples of that
# step. See the entries [`set_epoch`](#set_epoch) and [a rank-local loss](#rank_local_loss). Careful with
# the log: a collective that only rank 0 calls (`if rank == 0: dist.all_reduce(...)`) waits for the
# other ranks until the group's timeout ends it (the entry [a skipped collective](#skipped_collective)).

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

# %% [markdown] id="md-09-19"
# (Solutions: `solutions/ex9_2_accumulate_step.py` and `solutions/ex9_3_train_epochs.py`; the course's
# tests run them, and the broken programs and half-fixes, through these checkers on real ranks.)

# %% [markdown] id="md-09-20"
# ## What this chapter measured

# %%
for m in troubleshoot.MODES:
    r = repros.get(m.key)
    print(f"{m.key:30} {'%5.1f s' % r.wall_s if r else '(ch. 5)':>8}  {(r.symptom if r else '')[:70]}")
print(f"load average: {LOAD:.1f} at the start, {os.getloadavg()[0]:.1f} now")

# %% [markdown] id="md-09-21" tags=["takeaways"]
# ## Key takeaways
#
# * A hang is a rank missing from a collective: the others wait; the collective timeout and the stacks say where.
# * The worst bugs raise nothing: accumulation without `no_sync`, a missing `set_epoch`, a rank-local loss log — check against one process.
# * In a DDP profile the fast ranks show the longest backward: they wait for the slow one inside the all-reduce.
# * Every reproduction here is bounded by a few seconds of collective timeout: bound yours the same way (`timeout=` in `init_process_group`).

# %% [markdown] id="md-09-22" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 9.1 (predict, then run).** On 3 ranks, rank 1 dies hard (`os._exit`) just before the all-reduce; the collective timeout is 30 s. What happens to ranks 0 and 2? Put a letter into `my_prediction`: **a** they wait the full 30 s, then time out; **b** the job ends within seconds, because the dead rank is noticed; **c** they finish with a wrong sum.

# %% tags=["predict"]
my_prediction = None  # a letter: "a", "b" or "c"

# %%
import disttutor

q1 = disttutor.launch("hello", nproc=3, args={"crash_rank": 1}, collective_timeout=30, check=False, stream=False, timeout=120)
measured, what_happened = crash_outcome(q1, crashed=1, timeout_s=30)  # from the ranks' own reports, not the clock
reveal("9.q1", my_prediction, measured, choices={"a": "they wait the full timeout", "b": "the job ends within seconds",
                                               "c": "a wrong sum"},
       explain=what_happened + ". " + {"b": "When a process dies, torchrun's agent sees it exit and stops the whole job (and gloo's peers see "
                     "their connection close): a *living* rank that skips a collective is the case that waits for the timeout.",
                "a": "Here the living ranks waited for the whole collective timeout: nothing noticed the dead peer sooner.",
                "c": "A rank finished with a sum that lacks the dead rank's part: check every result, not only the exit."}[measured])

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
