# %% [markdown] id="md-10-01"
# # Chapter 10 — Capstone: the article's language model, corrected, trained, and surviving a killed rank
#
# *Article §10 (case study: a Transformer language model under DDP) and §11.3's advice "实现检查点保存和恢复机制".*
#
# The article's case study puts everything together: a Transformer language model, DDP, mixed
# precision, gradient clipping, accumulation, activation checkpointing, AdamW. Its code does not run
# as written, and once it runs it is **not a language model**. In this chapter we
#
# 1. run the article's model on tiny inputs and watch each bug happen (every one has a unit test);
# 2. train the corrected model on 2 ranks on a real text (Genesis, King James Version, public domain);
# 3. kill a rank in the middle of training and let torchrun's elastic restart bring the job back
#    from a checkpoint — and check the resumed run ends **bitwise equal** to an uninterrupted one.
#
# Exercise **10.1**: write the resume logic yourself.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(10)

# %% [markdown] id="md-10-02" tags=["opening"]
# **After this chapter you can**
# * find and fix the bugs of the article's language model, each one shown happening;
# * train a Transformer language model under DDP on real text and read where its step time goes;
# * kill a rank mid-training, let torchrun restart the job from a checkpoint, and check the result is bitwise equal to an uninterrupted run (Exercise 10.1).

# %%
import json
import os
import tempfile
import time
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

import disttutor
from disttutor.lm import corpus
from disttutor.lm import model as lm
from disttutor.lm import article as lm_article
from disttutor.lm import timesplit as lm_profile
from disttutor.checks.claims import check_article_ladder, check_resumed_bitwise, check_time_split, check_training_run
from disttutor.checks.resume import check_resume
from disttutor.course.source import show_code
from disttutor.lm import article_ddp
from disttutor.lm.loop import LMConfig
from disttutor.programs.article_lm import ArticleLMConfig
from disttutor.programs.lm_train import FINAL_PARAMS
from disttutor.viz import lm as viz

LOAD = os.getloadavg()[0]  # timings below are noisy when the machine is busy: we keep this beside them
print(f"torch {torch.__version__}, {disttutor.cores()} usable CPU cores, GPUs: {torch.cuda.device_count()}, load {LOAD:.1f}")
LAUNCH = dict(stream=False, timeout=400)

# %% [markdown] id="md-10-03"
# ## 1. The article's model, run as written
#
# `disttutor.lm.article` holds the article's §10.1 code **verbatim** (with its own import block).
# Building it fails at once:

# %% tags=["nbval-check-output"]
ns = lm_article.load()
try:
    ns["TransformerModel"](60, 32, 4, 2)
except NameError as e:
    print("NameError:", e)  # the article never imports math
ns["math"] = __import__("math")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    m = ns["TransformerModel"](60, 32, 4, 2)
try:
    m(torch.zeros(2, 8, dtype=torch.long))
except AttributeError as e:
    print("AttributeError:", e)  # forward uses self.d_model, __init__ never stores it

# %% [markdown] id="md-10-04"
# With those two lines fixed (`lm_article.load(runnable=True)`), it runs — and is wrong in four
# silent ways. We feed it a batch of 3 sequences of 10 token ids, shaped `(batch, time)` as any
# `DataLoader` gives them.
#
# **Bug: layout.** `nn.TransformerEncoderLayer(d_model, nhead)` defaults to `batch_first=False`: it
# reads `(batch, time)` as `(time, batch)`, so attention mixes *different sequences*. Change sequence
# 1 only, and sequence 0's output moves:

# %% tags=["nbval-check-output"]
torch.manual_seed(0)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    art = lm_article.load(runnable=True)["TransformerModel"](60, 32, 4, 2).eval()
fixed = lm.TinyLM(60, 32, 4, 2, max_len=64, dropout=0.0).eval()
x = torch.randint(1, 60, (3, 10), generator=torch.Generator().manual_seed(0))
y = x.clone()
y[1] = torch.randint(1, 60, (10,), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    d_art = (art(x)[0] - art(y)[0]).abs().max().item()
    d_fix = (fixed(x)[0] - fixed(y)[0]).abs().max().item()
print(f"sequence 0's output moved by {d_art:.3f} (article) vs {d_fix:.1e} (corrected)")
assert d_art > 1e-3 and d_fix == 0.0

# %% [markdown] id="md-10-05"
# **Bug: positional encoding.** `self.pe[:x.size(0)]` assumes `(time, batch, d)`. On `(batch, time, d)`
# it adds `pe[b]` — the *position of the sample in the batch* — to every token of sample `b`, and
# nothing that depends on the token's position:

# %% tags=["nbval-check-output"]
out = art.pos_encoder(torch.zeros(3, 10, 32))
print("article: position 0 == position 5 for every sample:", torch.equal(out[:, 0], out[:, 5]))
print("corrected: position 0 == position 5:", torch.equal(fixed.pe[0, 0], fixed.pe[0, 5]))
assert torch.equal(out[:, 0], out[:, 5]) and not torch.equal(fixed.pe[0, 0], fixed.pe[0, 5])

# %% [markdown] id="md-10-06"
# **Bug: no causal mask.** A language model predicts token `t+1` from tokens `≤ t`. Without a mask
# every position attends to the whole sequence, *including the answer*. Change token 5, and the
# outputs at positions 0–4 change (we give the article's model its own `(time, batch)` layout here,
# so only the mask is tested):

# %% tags=["nbval-check-output"]
xt, yt = x.t().clone(), x.t().clone()
yt[5] = yt[5] % 59 + 1
x2 = x.clone()
x2[:, 5] = x2[:, 5] % 59 + 1
with torch.no_grad():
    leak_art = (art(xt)[:5] - art(yt)[:5]).abs().max().item()
    leak_fix = (fixed(x)[:, :5] - fixed(x2)[:, :5]).abs().max().item()
print(f"outputs at positions 0-4 moved by {leak_art:.3f} (article) vs {leak_fix:.1e} (corrected, causal mask)")
assert leak_art > 1e-3 and leak_fix == 0.0

# %% [markdown] id="md-10-07"
# **Bug: the loss.** The article scores `output` against `target` position by position and leaves the
# shift to a `TextDataset(...)` it never shows. If `target` is the input (no shift), a model that
# simply *copies* its input gets zero loss — and with no causal mask it can. And `ignore_index=0`
# throws away whatever character got id 0: here, the newline.

# %% tags=["nbval-check-output"]
copy_logits = 50.0 * F.one_hot(x, 60).float()  # "predict the token you were given"
no_shift = F.cross_entropy(copy_logits.view(-1, 60), x.view(-1)).item()
shifted = lm.lm_loss(copy_logits[:, :-1], x).item()
tok = corpus.tokenizer()
print(f"copying model: loss {no_shift:.1e} without the shift, {shifted:.1f} with it")
print(f"vocabulary: {tok.vocab_size} characters; id 0 is {tok.chars[0]!r} -- ignore_index=0 would never train it")
assert no_shift < 1e-6 < 1.0 < shifted and tok.chars[0] == "\n"

# %% [markdown] id="md-10-08"
# The rest of the list:
#
# | article | problem | fix |
# |---|---|---|
# | no `import math` | `NameError` | import it |
# | `self.d_model` never set | `AttributeError` | store it |
# | `TransformerEncoderLayer(d_model, nhead)` | attends across the batch | `batch_first=True` |
# | `self.pe[:x.size(0)]` | encodes batch index, not position | `pe[:, :T]` |
# | no mask | reads the token it predicts | causal mask |
# | no shift; `ignore_index=0` | learns to copy; drops a real character | `lm_loss` shifts, ignores nothing |
# | §10.3 `criterion(output, target)` | 3-D logits: classes read from the time axis, error | flatten / `lm_loss` |
# | §10.3 `checkpoint(layer, x)` | no `use_reentrant` (warning, announced error); cannot take the mask | `checkpoint(layer, h, src_mask=..., use_reentrant=False)` |
# | `torch.save(model.state_dict())` of the DDP model | keys start with `module.` | `get_state_dict` / `model.module` |
# | `GradScaler()`, `autocast()`; `.to(rank)`; `mp.spawn` | §10 calls the first two without importing them (`NameError`; §8's `torch.cuda.amp` spelling is deprecated); on node 2 the global rank is no GPU index; from a notebook `mp.spawn` pickles functions of `__main__`, which its children cannot import | `torch.amp.GradScaler(device)` / `torch.autocast(device)` (chapter 8); `LOCAL_RANK` (chapter 5); a module started by torchrun (chapters 0, 9) |

# %% [markdown] id="md-10-09"
# ## 2. The article's training function, run under DDP as written
#
# §10.2's `train(rank, world_size)` is the article's whole recipe: a process group, the model moved
# to its device, DDP, a `DistributedSampler`, Adam, mixed precision with a `GradScaler`, clipping.
# `disttutor/lm/article_ddp.py` holds it **verbatim**; `disttutor.programs.article_lm` runs it on
# every rank of a real 2-rank job, with the first K of the fixes below applied, and reports the
# failure each rank meets as one line. We start at K = 0 (the article as written) and add one fix per
# attempt until it finishes: each attempt is a fresh job, because a process that re-creates its
# process group right after a failure races its peer's half-made connections. Only the sizes are
# changed in every attempt (vocabulary 50000 → 60 characters, d_model 512 → 64, 6 → 2 layers,
# batch 32 → 8, 100 epochs → 1, and `num_workers=4` → 0: eight more processes forked from busy ranks
# on a small machine). GPUs are hidden, so every machine shows the same ladder; on a GPU node the
# backend and device fixes are not needed.

# %%
def run_attempts(ks, ladder):
    """Launch attempts ``ks`` (K fixes each) while the previous one failed; print one line per rank."""
    for k in ks:
        if ladder and all(res["error"] is None for res in ladder[-1]):
            return
        attempt = disttutor.launch("article_lm", 2, ArticleLMConfig(fixes=k), **LAUNCH)
        ladder.append(attempt.results)
        for rank, res in enumerate(attempt.results):
            done = "train() finished" + (f", printing {res['printed']!r}" if res["printed"] else "")
            print(f"attempt {k}, rank {rank}: {res['error'] or done}")
        if k < len(article_ddp.FIXES) and any(res["error"] for res in attempt.results):
            print(f"    fix {k + 1}: {article_ddp.FIXES[k].name}")


ladder = []
run_attempts(range(0, 3), ladder)  # a few attempts per cell: each is a real 2-rank job

# %%
run_attempts(range(3, 6), ladder)

# %%
run_attempts(range(6, len(article_ddp.FIXES) + 1), ladder)
warned = sorted({w for results in ladder for res in results for w in res["warnings"]})
print("torch warned along the way (never an error):", *[f"  - {w}" for w in warned], sep="\n")

# %% tags=["proof", "nbval-check-output"]
print(check_article_ladder(ladder, article_ddp.FIXES))

# %% [markdown] id="md-10-10"
# Read the ladder top to bottom: each line is a real failure on a real rank, in the order a learner
# would meet them. Four of them are not in the model-bug table above: the `TextDataset` the article
# never defines, and three that come with the distributed setup: the `nccl` backend and
# `DDP(model, device_ids=[rank])` on a machine without GPUs (the first callout below), and the
# **positional-encoding buffer**: DDP broadcasts rank 0's buffers
# before every forward (`broadcast_buffers=True`), and the article's `pe.unsqueeze(0).transpose(0, 1)`
# is a view whose size-1 dimension keeps a stride of `max_len * d_model`; the coalesced broadcast's
# copy-back refuses it as overlapping memory. `pe.unsqueeze(1)` has the same shape and ordinary strides.
# And the run that *finishes* is still the silently wrong model of section 1 (no mask, batch-first
# confusion), saved with `module.` keys.
#
# > **The article says** `dist.init_process_group(backend='nccl', rank=rank, world_size=world_size)`
# > and `.to(rank)`, `DDP(model, device_ids=[rank])` — **on PyTorch 2.13** a CPU-only machine has no
# > NCCL (gloo is the CPU backend), and the device of a process is `LOCAL_RANK` (per node), not the
# > global rank; `device_ids` must be left out for a CPU module.
#
# > **The article says** `scaler = GradScaler()` and `with autocast():` (never imported) — **on PyTorch
# > 2.13** both live in `torch.amp` and take the device type: `torch.amp.GradScaler("cuda")`,
# > `torch.autocast("cuda", dtype=torch.float16)`; the `torch.cuda.amp` spellings are deprecated,
# > and without a GPU the scaler disables itself with the warning above.
#
# §10.3's three snippets, run as written in the state the fixed `train()` builds before its loop
# (with §10.2's `autocast(device.type)` fix, so the accumulation loop's own line is what is tested):

# %%
snippet_run = disttutor.launch("article_lm", 2, ArticleLMConfig(snippets=True), **LAUNCH)
for rank, res in enumerate(snippet_run.results):
    sn = res["snippets"]
    print(f"rank {rank}: activation checkpointing: {sn['checkpointing']}")
    print(f"        ... with d_model and nhead defined: {sn['checkpointing_defined']}"
          + "".join(f"\n            warning: {w}" for w in sn["checkpointing_defined_warnings"]))
    print(f"        gradient accumulation: {sn['accumulation']}")
    print(f"        AdamW: {sn['adamw']} ({sn['adamw_type']})")

# %% tags=["nbval-check-output"]
sn0 = [res["snippets"] for res in snippet_run.results]
assert all("name 'd_model' is not defined" in sn["checkpointing"] and sn["checkpointing_defined"] == "ran"
           and any("use_reentrant" in w for w in sn["checkpointing_defined_warnings"]) for sn in sn0), sn0
assert all("Expected target size" in sn["accumulation"] and sn["adamw"] == "ran" for sn in sn0), sn0
print("§10.3 on every rank: checkpointing needs d_model/nhead and warns about use_reentrant; accumulation's "
      "criterion(output, target) on 3-D logits raises; AdamW runs")

# %% [markdown] id="md-10-11"
# > **The article says** `loss = criterion(output, target) / accumulation_steps` — **on PyTorch 2.13**
# > `CrossEntropyLoss` reads a 3-D `(batch, time, vocab)` output as `(batch, classes, ...)`: the classes
# > come from the time axis, and the shapes disagree (the error above). Flatten both, as §10.2 itself
# > does, or use `disttutor.lm.model.lm_loss`. Its loop also never calls `no_sync()`, so every
# > micro-batch's backward all-reduces: section 3's loop shows the accumulation that communicates once
# > per step.
#
# ## 3. Training the corrected model on 2 ranks
#
# `disttutor/programs/lm_train.py` (loop: `disttutor/lm/loop.py`) trains `disttutor.lm.model.TinyLM` — 2
# layers, d = 64, characters — on Genesis with DDP; 2 micro-batches per step, the first inside
# `no_sync()`; `scaler.unscale_` before `clip_grad_norm_`; AdamW (`foreach` on CPU, `fused` on
# CUDA); linear warm-up then cosine decay; non-reentrant activation checkpointing; a
# `DistributedSampler` with `set_epoch`.
#
# The code that matters, from the installed loop (`disttutor/lm/loop.py`): the set-up, then one
# optimizer step.

# %%
show_code("disttutor.lm.loop", "setup")

# %%
show_code("disttutor.lm.loop", "step")

# %% [markdown] id="md-10-12"
# Line by line, where it counts:
#
# - `DDP(model, device_ids=[ctx.local_rank] if ... "cuda" else None)`: the article's `device_ids=[rank]`
#   with both of its bugs fixed (local, not global rank; none on CPU).
# - `with (contextlib.nullcontext() if last else ddp.no_sync()):` — all but the last micro-batch's
#   backward only accumulate into `.grad`; the last one all-reduces the sum, so a step costs one
#   all-reduce whatever `accum` is. `loss / cfg.accum` makes that sum a mean.
# - `scaler.unscale_(opt_)` then `clip_grad_norm_`: the norm is taken of the true gradients (with the
#   scaler disabled, as on CPU, both are no-ops); `scaler.step` skips a step whose gradients overflowed.
# - `dist.all_reduce(step_loss)`: only for the number we print — each rank's loss is its own shard's.
#
# **Precision.** Should the CPU ranks use bf16 autocast? Measure it (one process, the same model and
# micro-batch, a few steps each):

# %%
def ms_per_step(autocast: bool, n: int = 4) -> float:
    torch.manual_seed(0)
    model = lm.TinyLM(tok.vocab_size)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    xb = corpus.windows(corpus.splits()[0], 64)[:8]
    times = []
    for _ in range(n + 1):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = lm.window_loss(model, xb)
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    return 1e3 * sorted(times[1:])[n // 2]  # median, first step (warm-up) left out


fp32_ms, bf16_ms = ms_per_step(False), ms_per_step(True)
print(f"CPU, one process: fp32 {fp32_ms:.0f} ms/step, bf16 autocast {bf16_ms:.0f} ms/step (load {os.getloadavg()[0]:.1f})")
gain = 1 - bf16_ms / fp32_ms  # the verdict follows the measured ratio, in both directions
if gain < 0:
    print(f"bf16 autocast was {bf16_ms / fp32_ms:.2f}x the fp32 step time here (slower): keep fp32 on this CPU")
elif gain < 0.2:
    print(f"bf16 gains {gain:.0%} here, less than 20%: not worth its lower precision")
else:
    print(f"bf16 gains {gain:.0%} on this CPU: try amp='on'")

# %% [markdown] id="md-10-13"
# Whether bf16 pays off on a CPU depends on the CPU (bf16 matrix units or not) and, for a model this
# small, on whether its matrix products are big enough to repay the casts; on a busy machine a few
# steps are also a noisy measurement (the line above gives the load). Our training runs keep fp32 on
# CPU (`amp="auto"`) and use autocast (fp16 + `GradScaler`, the article's case, or bf16) on GPUs;
# pass `amp="on"` if the line above shows a clear gain on your CPU.

# %% [markdown] id="md-10-14"
# Now the real run: 2 ranks, a few minutes at most. The progress bar and the plot below it follow
# rank 0's progress lines while the job runs (`launch(..., on_progress=live)` hands each record to
# `viz.LiveLoss`, which redraws at most every 2 s); the same launch also records steps 5–7 with
# chapter 9's `torch.profiler` on every rank (`profile_steps=3`), so throughput and the time split
# below come from this very run.

# %%
cfg = LMConfig(steps=60, eval_every=10, sample_chars=100, profile_steps=3, profile_from=5)
with viz.LiveLoss() as live:
    train_run = disttutor.launch("lm_train", 2, cfg, stream=True, timeout=400, on_progress=live)
r = train_run.results[0]
val = r["history"]["val"]
print(f"validation loss {val['0']:.3f} -> {val[str(cfg.steps)]:.3f} in {r['wall_s']:.0f} s of training "
      f"({cfg.steps} steps, load {os.getloadavg()[0]:.1f})")

# %% tags=["proof", "nbval-check-output"]
print(check_training_run(val, cfg.steps, r, live))

# %%
viz.plot_training(r["history"])
plt.show()
print("before training:", repr(r["text_before"][:100]))
print("after training: ", repr(r["text_after"][:100]))
n_cores = disttutor.cores()  # usable cores: affinity, cgroup limit
print(f"(a tiny model: {cfg.steps} steps, {r['wall_s']:.0f} s of training, {train_run.world_size} ranks on "
      f"{n_cores} usable CPU cores)")

# %% [markdown] id="md-10-15"
# Before training the characters are uniform noise; after it, spaces, common letter pairs, short
# words and punctuation appear where English puts them. (A model this small, trained this briefly —
# the line above — will not quote Genesis.)
#
# **Throughput and where the time goes.** Each rank wrote a Chrome trace of its profiled steps
# (`trace_rank{r}.json`; open one in https://ui.perfetto.dev). `disttutor.lm.timesplit` reads them
# with chapter 9's `disttutor.troubleshoot.traces` and splits each rank's profiled window: an instant in which a
# gloo collective is in flight counts as **communication** (DDP's gradient all-reduce inside
# `backward`, its buffer broadcast inside `forward`, the logged loss's all-reduce); otherwise the
# `data` region is **data**, `forward`/`backward`/`optimizer` are **compute**, and the rest is
# **other** (Python between regions).

# %%
prof = lm_profile.summarize(train_run.run_dir, r["tokens_per_step_rank"])
for rank, s in prof.items():
    print(f"rank {rank}: {s['tokens_per_s']:.0f} tokens/s over {s['steps']} profiled steps "
          f"({s['window_ms'] / s['steps']:.0f} ms/step): " + ", ".join(
              f"{p} {100 * s[p + '_share']:.1f}%" for p in lm_profile.PARTS))
total_tps = sum(s["tokens_per_s"] for s in prof.values())
print(f"total: {total_tps:.0f} tokens/s on {len(prof)} ranks (whole run, unprofiled: "
      f"{r['tokens_per_s_rank'] * train_run.world_size:.0f} tokens/s; load {os.getloadavg()[0]:.1f})")

# %% tags=["proof", "nbval-check-output"]
print(check_time_split(prof, lm_profile.PARTS, on_cpu=not torch.cuda.is_available()))

# %% [markdown] id="md-10-16"
# Why the split comes out as it does (on CPU the checked cell above asserts compute > communication >
# data): this model is small, but every one of its matrix products runs on its rank's CPU threads
# (`OMP_NUM_THREADS=1` per rank; how many cores the ranks share is printed below), and activation
# checkpointing runs the forward twice. The gradient all-reduce carries one fp32 copy of the
# parameters per step; building the next batch is a slice of a tensor. Compare the profiled tokens/s
# with the whole run's: recording every operator costs the profiler some time.

# %%
n_params = sum(p.numel() for p in lm.TinyLM(tok.vocab_size).parameters())
shares = {p: [100 * s[p + "_share"] for s in prof.values()] for p in ("compute", "communication", "data")}
print(f"{train_run.world_size} ranks (OMP_NUM_THREADS=1 each: disttutor.launch's default) on {n_cores} usable CPU cores"
      + (": the ranks time-share the cores" if n_cores < train_run.world_size else ": a core for every rank")
      + f" (load average {os.getloadavg()[0]:.1f}: other work shares them too when it exceeds {n_cores})")
print(f"gradient all-reduce: {n_params / 1e6:.2f} M parameters = {4 * n_params / 2**20:.2f} MiB of fp32 per step")
print("share of the profiled window, min-max over ranks: " + ", ".join(
    f"{p} {min(v):.1f}-{max(v):.1f}%" for p, v in shares.items()))

# %% [markdown] id="md-10-17"
# ## 4. Fault tolerance: kill a rank, restart, resume exactly
#
# `disttutor/lm/checkpoint.py` saves everything the next step depends on: weights and AdamW's moments
# with `torch.distributed.checkpoint` (`get_state_dict` — the same call serves chapter 11's sharded
# models), the LR schedule, the scaler, the step, and **each rank's RNG state** (dropout) — as JSON
# and weights-only tensor files, never arbitrary pickles. Saves are **atomic**: written to
# `step_N.tmp/`, renamed to `step_N/` only when every rank has finished.
#
# The save, from the installed `disttutor/lm/checkpoint.py` (every rank calls it):

# %%
show_code("disttutor.lm.checkpoint", "save")

# %% [markdown] id="md-10-18"
# - `get_state_dict(model, optimizer)` returns the model's weights under plain names (no DDP
#   `module.` prefix) and the optimizer's state keyed by parameter **name**, not by position: a
#   checkpoint that loads into a model wrapped differently (plain, DDP, FSDP2).
# - `dcp.save(tensors, storage_writer=dcp.FileSystemWriter(tmp))` is a **collective**: every rank
#   writes its own part (with DDP the replicas are equal and DCP de-duplicates them; with FSDP2 each
#   rank writes its shard) plus one metadata file.
# - the barrier, then rank 0's `os.replace(tmp, final)`: the checkpoint becomes visible only when
#   every rank's files are on disk, and a rename is atomic, so a crash mid-save leaves only `.tmp`.
#
# The same calls without the course's extras, as a script you can copy (`python3 course.py plain dcp`,
# run with `torchrun --nproc-per-node 2 dcp.py`); its load is what Exercise 10.1 builds on:

# %%
show_code("disttutor.plain.dcp", "save")

# %%
show_code("disttutor.plain.dcp", "load")

# %% [markdown] id="md-10-19"
# `dcp.load` fills the tensors of a state dict *in place*, so it needs one of the right structure
# first: `get_state_dict` of the fresh model and optimizer (for AdamW it creates the moment tensors).
# `set_state_dict` then hands them to model and optimizer.
#
# We run a short job twice: uninterrupted, and with `fail_at_step=9` — rank 1 SIGKILLs itself at
# step 9 of the first attempt. `launch(..., max_restarts=1)` is torchrun's `--max-restarts=1`: it
# stops the surviving rank, starts both again, and they resume from the newest checkpoint (step 8).

# %%
short = LMConfig(steps=16, warmup=4, eval_every=8, sample_chars=0)
ck_dir = tempfile.mkdtemp(prefix="ch10-ckpt-")
killed = LMConfig(**{**short.__dict__, "ckpt_dir": ck_dir, "ckpt_every": 4, "fail_at_step": 9})
ref_run = disttutor.launch("lm_train", 2, short, **LAUNCH)
fault_run = disttutor.launch("lm_train", 2, killed, max_restarts=1, **LAUNCH)
fr = fault_run.results[0]
print(f"attempt {fr['attempt'] + 1} finished, resumed from step {fr['resumed_from']}; "
      f"checkpoints kept: {sorted(n for n in os.listdir(ck_dir) if n.startswith('step_'))}")

# %% tags=["proof", "nbval-check-output"]
a = torch.load(os.path.join(ref_run.run_dir, FINAL_PARAMS), weights_only=True)
b = torch.load(os.path.join(fault_run.run_dir, FINAL_PARAMS), weights_only=True)
# Same ops, same order, same data, same RNG states; with 2 ranks the all-reduce a+b does not depend on
# DDP's bucket order (rebuilt after the restart): so the tolerance is ZERO, not "small".
max_diff = check_resumed_bitwise(a, b, fr, ref_run.results[0]["history"]["loss"], resumed_from=8)
print(f"killed at step 9, resumed from step 8: max parameter difference vs the uninterrupted run = {max_diff}")

# %%
rows = [json.loads(line) for line in open(os.path.join(ck_dir, "history.jsonl"))]
viz.plot_fault(ref_run.results[0]["history"]["loss"], rows, killed_at=9, resumed_from=fr["resumed_from"])
plt.show()

# %% [markdown] id="md-10-20"
# **A rank lost for good.** If the rank dies on every attempt, the restarts run out and the job ends
# with one line per rank instead of hanging:

# %% tags=["nbval-check-output"]
lost = LMConfig(**{**short.__dict__, "ckpt_dir": tempfile.mkdtemp(prefix="ch10-lost-"), "ckpt_every": 4,
                   "fail_at_step": 0, "fail_always": True})
try:
    disttutor.launch("lm_train", 2, lost, max_restarts=1, **LAUNCH)
    raise AssertionError("the job should have failed")
except disttutor.LaunchError as e:
    first = e.result.culprits_first()[0]  # the rank that failed on its own; its peer is stopped or fails after it
    print(f"rank {first.rank}: {first.error}")
    assert first.rank == 1

# %% [markdown] id="md-10-21"
# A crash *during* a save leaves `step_N.tmp/`, which is never loaded: every rank writes into the
# `.tmp` directory and rank 0 renames it to `step_N/` (the commit) only when all have finished, so a
# job killed between writing and committing a checkpoint resumes from the previous complete one.
#
# ### Exercise 10.1 — write the resume logic
#
# Write `resume(ckpt_dir, model, optimizer, scheduler) -> int`: restore the newest **complete**
# checkpoint written by `disttutor.lm.checkpoint.save` and return how many steps it had done (0 if
# there is none). Use `checkpoint.latest`, `checkpoint.read_meta`, `get_state_dict` / `set_state_dict`,
# `torch.distributed.checkpoint.load(..., storage_reader=checkpoint.SafeReader(path))` and the
# per-rank `rng_rank{r}.pt` files (`torch.load(..., weights_only=True)`); `checkpoint.load` is the
# answer key and is refused. The checker kills rank 1 at a random step, lets torchrun restart the
# job with your `resume`, and compares the result with an uninterrupted run.

# %%
card("10.1")

# %%
def resume(ckpt_dir, model, optimizer, scheduler):
    raise NotImplementedError("Exercise 10.1: restore model, optimiser, scheduler and RNG; return the step")


# %%
hint("10.1")


# %%
print(check_resume(resume))

# %% [markdown] id="md-10-22"
# ## What this chapter measured

# %%
print(f"validation loss {val['0']:.3f} -> {val[str(cfg.steps)]:.3f}, {r['wall_s']:.0f} s of training on "
      f"{train_run.world_size} ranks; profiled: " + ", ".join(f"rank {k} {v['tokens_per_s']:.0f}" for k, v in prof.items())
      + f" tokens/s, {total_tps:.0f} in total")
print("time split (profiled steps): " + "; ".join(f"rank {k}: " + ", ".join(
    f"{p} {100 * v[p + '_share']:.0f}%" for p in lm_profile.PARTS) for k, v in prof.items()))
print(f"fault injection: killed at step 9, restarted, resumed from step {fr['resumed_from']}, "
      f"max parameter difference {max_diff}")
print(f"load average: {LOAD:.1f} at the start, {os.getloadavg()[0]:.1f} now")

# %% [markdown] id="md-10-23" tags=["takeaways"]
# ## Key takeaways
#
# * The article's model is not a language model until it has a causal mask, shifted targets and a loss over the right axis — each bug has a test.
# * A checkpoint must hold everything the next step reads: weights, optimizer state, scheduler, every rank's RNG state, the step.
# * Written to a temporary name and committed by a rename, a checkpoint survives a crash during the save.
# * With `max_restarts`, torchrun restarts all ranks after a failure; resumed from a complete checkpoint the run ends bitwise equal to an uninterrupted one.

# %% [markdown] id="md-10-24" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 10.1 (predict, then run).** The corrected `TinyLM` over this text's characters, **untrained**: what cross-entropy loss (in nats) does it have on a batch of the text, before its first step? Write a number into `my_prediction`, then run the next cell.

# %% tags=["predict"]
my_prediction = None  # a number: the untrained model's loss, in nats

# %%
import math

import torch
import torch.nn.functional as F

from disttutor.lm import corpus
from disttutor.lm import model as lm

q1_tok = corpus.CharTokenizer.from_text(corpus.text())
ids = q1_tok.encode(corpus.text()[:4096])
x = ids[: 64 * 32].reshape(32, 64)
torch.manual_seed(0)
with torch.no_grad():
    logits = lm.TinyLM(q1_tok.vocab_size).eval()(x)
measured = F.cross_entropy(logits[:, :-1].reshape(-1, q1_tok.vocab_size), x[:, 1:].reshape(-1)).item()
reveal("10.q1", my_prediction, measured, rel_tol=0.1,  # 10 %: an untrained model's logits are small, not zero
       explain=f"Measured {measured:.2f} nats; ln(vocabulary) = ln {q1_tok.vocab_size} = {math.log(q1_tok.vocab_size):.2f}. "
       "An untrained model spreads its probability about evenly over the vocabulary, so its loss starts near ln V: "
       "a first loss far from it means a bug (wrong targets, wrong axis) before any training.")

# %% [markdown] id="md-10-25" tags=["question"]
# **Question 10.2.** What must a checkpoint hold so that a resumed run ends bitwise equal to an uninterrupted one? What happens if one piece is missing?

# %%
answer("10.q2")

# %% [markdown] id="md-10-26" tags=["question"]
# **Question 10.3.** A job checkpoints every 50 steps of 2 s and a rank dies at step 437. How many steps are recomputed? If a checkpoint costs 20 s and failures come every 8 hours, what interval does the Young/Daly rule suggest?

# %%
answer("10.q3")

# %%
disttutor.course.chapters.glossary(10)
