# %% [markdown] id="md-09-01"
# # Chapter 9 — Troubleshooting every rank (and where profiling stands)
#
# *Article §9 (性能分析与调试): §9.1 shows a `torch.profiler` snippet; §9.2 「常见问题与解决方案」 is an empty heading.*
#
# This chapter fills §9.2 with twenty failure modes, each reproduced live on CPU ranks: its real error text,
# cause, tool, fix and fixed run. Then §9.1: the profiler on every rank, and a **straggler** (the slow rank
# every other rank waits for) to find from the traces.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(9)

# %% [markdown] id="md-09-02" tags=["opening"]
# **After this chapter you can**
# * find your error text in an index of 21 failure modes (20 reproduced here) and apply its fix;
# * say which rank, line and collective a stuck job is stuck in, from every rank's Python stack;
# * profile every rank, find a straggler (Exercise 9.1) and fix two silently wrong programs (9.2, 9.3).

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
# The middle column is a regular expression over the text each reproduction below really printed; the run
# below checks every row against that text. Find your error, then jump to its entry.

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
# ## Reproducing them: one job, one group per mode
#
# The failure modes that need ranks run one after another in one torchrun job, so torchrun starts once. Each
# gets a fresh process group (`dist.new_group`) whose **collective timeout** (how long a collective waits for
# the other ranks before it raises) is **3 s**, so a mode that hangs on purpose breaks only its own group; a
# barrier on the default group lines the ranks up between modes. The rest (environment, ports, samplers,
# `mp.spawn`) run in one plain Python subprocess, never in this kernel.

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
# Each entry: **you see** (the real text, from the first rank that raised an error, else rank 0), the cause,
# the tool, the fix, and what **the fixed run** printed. The time is both runs together, in this run.

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
# Two things the entries show that are easy to get wrong:
#
# * A **mismatched** collective (all-reduce on one rank, broadcast on the other) and a **rank-dependent shape**
#   need not fail alike on every rank: one rank can time out while another returns without an error (printed
#   below, per rank).
# * With `TORCH_DISTRIBUTED_DEBUG=DETAIL`, each collective first compares a fingerprint (operation, shapes,
#   dtypes) across ranks, and both become an error naming each rank's operation and shape.

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

# %% [markdown] id="md-09-25"
# A **skipped** collective and **uneven inputs** raise a timeout only on the rank that waited; the rank that
# went on (it skipped the call, or ran out of data) reports no error. Seven entries raise **no error at all**
# (`different_seeds`, `no_sampler`, `rank_local_loss`, `sampler_padding`, `set_epoch`,
# `accumulation_without_no_sync`, `dataloader_oversubscription`): the training runs and is wrong or slow; a
# wrong one shows against one process that replays every rank's batches, as the checkers of Exercises 9.2 and
# 9.3 do.

# %% [markdown] id="md-09-08"
# ## Where is my job stuck?
#
# A hung job prints nothing: every rank waits. `disttutor.troubleshoot.diagnose` reads every rank's Python
# stack from outside with `py-spy dump` (no change to your program; py-spy pauses a process only while it
# reads) and names the collective each rank waits in. From a terminal, on the run directory of a job the
# course launched: `python -m disttutor.troubleshoot.diagnose RUN_DIR`.

# %% [markdown] id="md-09-26"
# Below, chapter 0's `hello` runs with `skip_rank=1` (rank 1 never calls the all-reduce), under a 15 s
# collective timeout. A watcher thread dumps the stacks 2 s after the ranks start, while the launch still waits.

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
# Rank 0 waits in `all_reduce`; rank 1 is in **no** collective, at the line of `hello.py` where it went its own
# way. The rank to look at is not the one that timed out but the one that is somewhere else.

# %% [markdown] id="md-09-10"
# ## Profiling every rank (article §9.1)
#
# `disttutor/programs/profile_ddp.py` runs the article's profiler on every rank of a small DDP run: the same
# schedule, our own `record_function` regions (`forward`, `backward`, `optimizer`), and one **Chrome trace**
# (a JSON file of timed events) per rank, `trace_rank{r}.json`, which https://ui.perfetto.dev opens. It records
# CPU activity only (no `ProfilerActivity.CUDA`). Rank 1 is the straggler: it sleeps 40 ms in each forward,
# like a slow data loader.

# %%
show_code("disttutor.programs.profile_ddp", "profile")

# %% [markdown] id="md-09-11"
# `schedule(wait=1, warmup=1, active=3)` skips a step, warms up for one, then records three. `prof.step()` at
# the end of each iteration advances the schedule: without it the profiler never leaves the first (wait) step
# and records nothing. `on_trace_ready` runs once the recorded steps are done, and each rank writes its own file.

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
# Blue: forward; orange: backward; green: optimizer (main thread); red, thinner: gloo's all-reduce in its own
# thread. The straggler's **forward** is long, and the other rank's **backward** is long: it waits there for
# the straggler's gradients. Below: each rank's totals, top operators and peak memory as the profiler saw it
# (`profile_memory=True`).

# %%
tot = {r: traces.totals(ev) for r, ev in tr.items()}
for r in sorted(tot):
    res = prof.results[r]
    print(f"rank {r}: " + ", ".join(f"{k} {v:.0f} ms" for k, v in sorted(tot[r].items()))
          + f"; peak memory {res['peak_bytes'] / 1024:.0f} KiB")
    print("   top ops (self CPU ms): " + ", ".join(f"{o['name']} {o['self_ms']:.1f}" for o in res["top_ops"][:4]))
print(check_straggler_profile(tot, slow_rank=1, sleep_ms=40, steps=3))  # 3 profiled steps x 40 ms of sleep

# %% [markdown] id="md-09-13"
# <details><summary><b>The article says</b> export with <code>tensorboard_trace_handler('./log')</code> and
# read the profile in TensorBoard</summary>
#
# Today (*reported*, from the projects' own threads): the TensorBoard profiler plugin, `torch-tb-profiler`, is
# deprecated since August 2023 (pytorch/kineto#1009), its tutorial was removed in April 2026
# (pytorch/tutorials#3813), and its last PyPI release is 0.4.3. The handler still exists in this PyTorch
# (printed below) and writes the same Chrome-trace JSON as `prof.export_chrome_trace(path)`, the call used
# here. Open that file in https://ui.perfetto.dev or `chrome://tracing`.
#
# </details>

# %%
import torch

print(torch.__version__, "tensorboard_trace_handler:", callable(torch.profiler.tensorboard_trace_handler))
assert callable(torch.profiler.tensorboard_trace_handler)

# %% [markdown] id="md-09-14"
# **Holistic Trace Analysis** (HTA, `pip install HolisticTraceAnalysis`; *reported* by the kineto project as
# the plugin's successor) reads these traces, but its analyses are made for GPU kernels and NCCL collectives.
# The course reads the JSON itself; the cell below runs HTA's analyses only where HTA is installed.

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
# The checker profiles **3 ranks** and picks the slow one at random during the run; your function sees only the
# traces. Write `find_straggler(traces)`: `traces` is `{rank: [Chrome-trace events]}`, dicts with `name`, `cat`,
# `ph`, `ts` and `dur` (microseconds), as `traces.load` returns; return the slow rank. Careful: the rank with
# the longest *backward* is not it.

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

# %% [markdown] id="md-09-17"
# ## Fix the bug (Exercises 9.2 and 9.3)
#
# Two programs from the table above **run without an error but are wrong**: fix each in place, run its cell,
# then its check. The checker runs your function on 2 gloo ranks with a 10 s collective timeout (a version that
# hangs ends with a message). It compares the weights, and for 9.3 the log, with **one process that replays
# every rank's batches**.

# %% [markdown] id="md-09-27"
# ### Exercise 9.2 — gradient accumulation under DDP
#
# `accumulate_step(ddp_model, optimizer, micro_batches)` must move the weights as one SGD step on the **mean**
# loss over all ranks' samples does, with **one** all-reduce per step (the checker counts DDP's all-reduces with
# a communication hook). See the entry [accumulation without `no_sync`](#accumulation_without_no_sync).

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
# loss over **all** ranks' samples of that step. See [`set_epoch`](#set_epoch) and
# [a rank-local loss](#rank_local_loss). A collective that only rank 0 calls waits until the group's timeout
# ends it: [a skipped collective](#skipped_collective).

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

# %% [markdown] id="md-09-20"
# ## What this chapter measured
#
# Each failure mode's time in this run (wrong run plus fixed run) and the first words of what it printed.

# %%
for m in troubleshoot.MODES:
    r = repros.get(m.key)
    print(f"{m.key:30} {'%5.1f s' % r.wall_s if r else '(ch. 5)':>8}  {(r.symptom if r else '')[:70]}")
print(f"load average: {LOAD:.1f} at the start, {os.getloadavg()[0]:.1f} now")

# %% [markdown] id="md-09-21" tags=["takeaways"]
# ## Key takeaways
#
# * A hang is a rank missing from a collective: the others wait, and every rank's stack shows which rank is elsewhere.
# * The worst bugs raise nothing: accumulation without `no_sync`, a missing `set_epoch`, a rank-local loss log; compare with one process.
# * In a DDP profile the fast ranks show the longest backward: they wait for the slow one inside the all-reduce.
# * Bound every collective with a timeout (`timeout=` in `init_process_group` or `new_group`): no wait in this chapter outlasted its 3 to 30 s.

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
