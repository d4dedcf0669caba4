# %% [markdown] id="md-06-01"
# # Chapter 6 — Model parallelism, and the RPC framework
#
# Data parallelism (chapters 4–5) copies the whole model onto every device. When the model does
# not fit on one device, the article's §6 splits it instead: **different layers live on different
# devices**, and the data flows from one to the next.
#
# ```
#  input ──▶ [device 0: embedding] ──▶ [device 1: transformer] ──▶ [device 2: output] ──▶ loss
#            ◀── grad ───────────────◀── grad ───────────────────◀── grad ──────────────────┘
# ```
#
# This chapter does it twice, on real processes, then says where RPC stands:
#
# 1. **Plain model parallelism** with point-to-point messages: each rank holds a slice of an MLP,
#    sends its activations forward and the gradients backward. We time every rank and *see* the
#    price of this simple scheme: most of the time, most ranks wait.
# 2. **The article's RPC example.** It does not run as written on current PyTorch. We run it
#    safely, read the real error, explain each bug, then write the corrected version and
#    **train** it with distributed autograd and the distributed optimizer, checked against a
#    single-process reference.
# 3. **Where RPC stands today**, from what this torch build itself prints, and what to use instead.
#
# Everything runs on CPU here (Gloo over loopback, TensorPipe for RPC). The same programs run on
# GPUs: `runtime.setup()` picks NCCL and `cuda:LOCAL_RANK` for the plain version.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(6)

# %% [markdown] id="md-06-02" tags=["opening"]
# **After this chapter you can**
# * split a model's layers over ranks and pass activations forward and gradients back with `send`/`recv`;
# * measure how much of each step a rank waits under plain model parallelism, and say why;
# * run the article's RPC example, read why it fails, and train its corrected version with distributed autograd — and know what to use instead today.

# %%
import inspect
import warnings

import matplotlib.pyplot as plt
import torch

import disttutor
from disttutor.checks.claims.ch06 import (check_article_rpc_fails, check_no_remote_grads, check_one_rank_at_a_time,
                                          check_rpc_training, check_split_model)
from disttutor.course.source import deeper, show_code
from disttutor.launcher.results import format_table
from disttutor.pipeline.timeline import compute_overlap_s
from disttutor.programs import model_parallel as mp_prog
from disttutor.programs import rpc_article, rpc_train
from disttutor.viz.model_parallel import plot_timeline

print("torch", torch.__version__)

# %% [markdown] id="md-06-03"
# ## 1. Plain model parallelism: layers on different ranks
#
# `disttutor/programs/model_parallel.py` builds an `MLP` of `4 × 2` Linear layers (width 256)
# and gives rank `r` layers `2r` and `2r+1`. One training step is:
#
# * **forward** — rank 0 runs its layers on the batch and `dist.send`s the activation to rank 1;
#   rank 1 `dist.recv`s it, runs its layers, sends on; … the last rank computes the loss.
# * **backward** — the last rank calls `loss.backward()`. Autograd cannot follow a tensor into
#   another process, so the received activation was made a leaf with `requires_grad=True`: after
#   `backward()` its `.grad` is ∂loss/∂(input of this stage) = ∂loss/∂(output of the previous
#   stage). That gradient is sent back, and the previous rank continues with `out.backward(grad)`.
# * **update** — each rank steps an ordinary optimizer over *its own* layers. Nothing is
#   replicated, so there is no all-reduce.
#
# The communication lives in `disttutor/pipeline/p2p.py` (`StageLink`), apart from the loop that uses it:

# %%
show_code("disttutor.programs.model_parallel", "step")

# %% [markdown] id="md-06-04"
# A receiver must allocate the buffer before the bytes arrive, so every `recv` needs the shape in
# advance (`act_shape` above) — only raw data travels. Each `recv`/`send` and each compute block is
# timed on every rank. Four ranks, five full-batch steps (the first one untimed: it also opens the
# connections):

# %%
MP = mp_prog.MPConfig(steps=5, warmup=1, batch=256, width=256, layers_per_stage=2, lr=0.05)
mp_args = {k.replace("_", "-"): v for k, v in MP.__dict__.items() if k != "report_params"}
mp_run = disttutor.launch("model_parallel", nproc=4, args=mp_args, timeout=120, collective_timeout=60)

# %% [markdown] id="md-06-05"
# Is the split model really the same model? The kernel trains the **unsplit** MLP in one process
# on the same batch (`reference` in `disttutor/programs/model_parallel.py`, which the tests use too),
# and each rank's slice is compared with the same slice of it:

# %% tags=["nbval-check-output"]
ref_model, ref_losses = mp_prog.reference(MP, 4)
rows = []
for r, res in enumerate(mp_run.results):
    flat = torch.cat([p.detach().reshape(-1).double()
                      for p in mp_prog.stage_of(ref_model, r, 4, MP.layers_per_stage).parameters()])
    # same float32 ops, same order: differences are rounding in the sums, far below 1e-6 relative
    same = (abs(res["param_sum"] - flat.sum().item()) <= 1e-6 * flat.abs().sum().item()
            and abs(res["param_abs_sum"] - flat.abs().sum().item()) <= 1e-6 * flat.abs().sum().item())
    rows.append({"rank": r, "layers": " ".join(res["stage_layers"]), "params": res["n_params"],
                 "matches reference": same})
print(format_table(rows))
print(check_split_model(rows, mp_run.results[-1]["losses"], ref_losses))  # only the last rank sees the loss
print("loss goes down:", ref_losses[-1] < ref_losses[0])

# %% [markdown] id="md-06-06"
# ### Who is busy when?
#
# Each rank reported its spans (forward, backward, optimizer, send, recv) against the system's
# monotonic clock, so they can share one time axis. A plain function draws them
# (`plot_timeline` in `disttutor/viz/model_parallel.py`):

# %%
plot_timeline(mp_run.results)
plt.show()

# %% [markdown] id="md-06-07"
# The blue forward blocks form a staircase going down, the orange backward blocks a staircase going
# up — **one rank computes at a time**. Everyone else sits in `recv` (light grey), waiting for a
# neighbour. The measured fractions (timings: they vary from run to run, especially on a shared
# machine):

# %%
overlap = compute_overlap_s(mp_run.results)
window = max(r["t0"] + r["wall_s"] for r in mp_run.results) - min(r["t0"] for r in mp_run.results)
print(format_table([{"rank": r, "compute ms": round(1e3 * x["compute_s"], 1),
                     "waiting in send/recv ms": round(1e3 * x["wait_s"], 1),
                     "timed window ms": round(1e3 * x["wall_s"], 1), "idle fraction": round(x["idle_frac"], 2)}
                    for r, x in enumerate(mp_run.results)]))
print(f"time two ranks computed at once: {1e3 * overlap:.3f} ms")
print(f"sum of all ranks' compute / window: {sum(x['compute_s'] for x in mp_run.results) / window:.2f}"
      f"  -> mean idle fraction >= {1 - 1 / 4:.2f}")

# %% tags=["nbval-check-output"]
# The claims above, checked (no timings printed: this holds on every run); the average rank idles >= 3/4.
print(check_one_rank_at_a_time(compute_overlap_s(mp_run.results), mp_run.results, window))
print("every rank waits for its neighbours:", all(x["wait_s"] > 0 for x in mp_run.results))

# %% [markdown] id="md-06-08"
# That is the weakness of plain model parallelism: with N stages, each device works at most
# about 1/N of the time (the rest is idle, plus the messages). It saves memory — each rank holds a
# quarter of the weights — but not time. **Pipeline parallelism** (chapter 7) cuts the batch into
# micro-batches so that stage 1 works on micro-batch 1 while stage 0 already computes micro-batch
# 2, filling those blank spaces.

# %% [markdown] id="md-06-09"
# ### Exercise 6.1 — one stage's forward and backward over send/recv
#
# Write `stage_forward_backward(stage, x, y, act_shape, out_shape)`, run on every rank: rank 0 feeds
# `x` to its `stage`, every other rank first receives its input from the previous rank
# (`act_shape`); every rank but the last sends its output on, then receives the gradient of that
# output from the next rank (`out_shape`) and backpropagates it; the last rank computes
# `F.mse_loss(out, y)` and returns the loss as a float (the others return `None`); every rank but
# the first sends its *input's* gradient back. Only `dist.send` / `dist.recv` — the optimizer step is
# done for you. The checker trains a 3-stage model on 3 real ranks (first, middle and last stage) and
# compares every rank's layers after every step with the same model trained in one process.

# %%
card("6.1")

# %%
def stage_forward_backward(stage, x, y, act_shape, out_shape):
    """Exercise 6.1: forward and backward of this rank's stage; the loss on the last rank, else None."""
    raise NotImplementedError("Exercise 6.1: recv input, forward, send output; recv grad, backward, send grad")


# %%
hint("6.1")


# %%
from disttutor.checks.model_parallel import check_stage

print(check_stage(stage_forward_backward))

# %% [markdown] id="md-06-10"
# ## 2. The article's RPC example
#
# The article builds the same idea on `torch.distributed.rpc`, a different layer of PyTorch: instead
# of symmetric ranks exchanging messages, a **master** calls functions on named **workers**.
#
# <details><summary><b>Deeper:</b> the five RPC calls the article uses</summary>
#
# | API | what it does |
# |---|---|
# | `rpc.rpc_sync(to, fn, args)` | run `fn(*args)` on worker `to`, wait, return the result |
# | `rpc.remote(to, fn, args)` | run it there, *keep the result there*, return an `RRef` (remote reference) to it |
# | `rref.rpc_sync().method(...)` | call a method of the remote object, get the *value* back |
# | `rref.remote().method(...)` | call it, get another `RRef` back |
# | `rref.to_here()` | copy the referenced value to the caller |
#
# </details>
#
# Here is the article's model, unchanged in `disttutor/programs/rpc_article.py` (only the sizes
# became parameters):

# %%
print(inspect.getsource(rpc_article.ModelParallelNet))

# %% [markdown] id="md-06-11"
# At the article's sizes (`nn.Embedding(10000, 1000)`, `nn.Transformer(d_model=1000, nhead=10)`
# with its defaults of 6 + 6 layers) the model is large — counted on the `meta` device, which
# allocates no memory (folded):

# %% tags=["nbval-check-output", "deeper"]
with torch.device("meta"), warnings.catch_warnings():
    warnings.simplefilter("ignore")  # nn.Transformer's nested-tensor notice (about batch_first: see bug 2)
    article_counts = {name: sum(p.numel() for p in cls().parameters())
                      for name, cls in [("EmbeddingNet", rpc_article.EmbeddingNet),
                                        ("TransformerNet", rpc_article.TransformerNet),
                                        ("OutputNet", rpc_article.OutputNet)]}
total = sum(article_counts.values())
assert total > 100e6
deeper(f"the article's sizes: {total / 1e6:.1f} M parameters = {4 * total / 2**20:.0f} MiB in float32",
       format_table([{"stage": k, "parameters": v} for k, v in article_counts.items()]).splitlines())

# %% [markdown] id="md-06-12"
# We run it with small sizes instead (`d_model=16`; the bugs do not depend on size). The harness
# around it, `disttutor.rank.runtime.rpc_setup()`, replaces the article's launch code:
#
# > **The article says** `os.environ['MASTER_PORT'] = '29500'` then `mp.spawn(...)`, without `import os`
# > — **on PyTorch 2.13** as on any Python, every process dies with a `NameError` before RPC starts;
# > and a hard-coded port collides with any other job on the machine. Here torchrun provides the
# > address and a free port (`init_method="env://"`), `rpc_timeout` is 20 s, and `rpc.shutdown()`
# > always runs.
#
# Launch it (4 ranks: the master and worker1..3), expecting a failure (`check=False`):

# %% tags=["nbval-check-output"]
art = disttutor.launch("rpc_article", nproc=4, args={"stage": "as-written"}, stream=False, timeout=120, check=False)
print("ok:", art.ok)
for r in art.ranks:
    print(f"rank {r.rank}: {r.status}")
print("\nthe master's error (first two lines):")
print("\n".join(art.ranks[0].error.splitlines()[:2]))
print(check_article_rpc_fails(art))

# %% [markdown] id="md-06-13"
# ### Why it fails, bug by bug
#
# > **The article says** `x = self.embed_rref.remote().forward(x)` and passes `x` on to the next stage —
# > **on PyTorch 2.13** `.remote()` returns an `RRef`, not a tensor: the next stage receives a reference
# > it cannot compute with (the `TypeError` above). `rref.rpc_sync().forward(x)` returns the tensor.
#
# > **The article says** nothing about training the RPC model — **on PyTorch 2.13** `loss.backward()`
# > stops at the first RPC boundary without an error (bug 3 below): training needs `dist_autograd` and
# > `DistributedOptimizer`.
#
# **Bug 1 — references passed where tensors are needed.** `self.embed_rref.remote().forward(x)`
# returns an `RRef` to the embedding *on worker1*, not a tensor. That RRef is handed to the
# transformer on worker2, whose `nn.Transformer` cannot use it, and its (failed) result — another
# RRef — goes to worker3, where `nn.Linear` raises the `TypeError` above. Only the last error
# reaches the master, through `x_out.to_here()`; the transformer's failure on worker2 sits unread
# inside an RRef nobody fetches. Fix: `rref.rpc_sync().forward(x)`, which returns the tensor (or, to
# keep data off the master, make each stage's `forward` accept an RRef and call `to_here()`).
#
# **Bug 2 — tensor layout.** The input is `(32, 50)`: 32 sequences of 50 tokens, so the embedding is
# `(32, 50, d)`. But `nn.Transformer` reads `(seq, batch, d)` unless `batch_first=True`: it treats
# the 32 *sequences* as 32 positions of one sequence, and attention mixes different samples.
# Shown in one process — change sample 1 only, and see whether sample 0's output changes:

# %% tags=["nbval-check-output"]
def sample0_changes(batch_first: bool) -> bool:
    torch.manual_seed(0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nn.Transformer's nested-tensor notice
        t = torch.nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                                 dim_feedforward=32, dropout=0.0, batch_first=batch_first).eval()
        x = torch.randn(32, 50, 16)          # (batch, seq, d) as the article builds it
        x2 = x.clone()
        x2[1] += 1.0                         # change sample 1 only
        return not torch.allclose(t(x, x)[0], t(x2, x2)[0])


leaks = {"default (batch_first=False)": sample0_changes(False), "batch_first=True": sample0_changes(True)}
for k, v in leaks.items():
    print(f"{k:28s} sample 0's output depends on sample 1: {v}")
assert leaks == {"default (batch_first=False)": True, "batch_first=True": False}

# %% [markdown] id="md-06-14"
# The output *shape* is the same either way — `(32, 50, 10)` — which is why this bug is silent.
# The corrected stage, `disttutor.workloads.models.TransformerStage`, uses `batch_first=True` (and
# `dropout=0`, so that a remote run can be compared exactly with a local one).
#
# **Bug 3 — it cannot train.** The article stops after one forward pass. The obvious next step,
# `loss.backward()`, does not work across RPC. With bug 1 fixed (`--stage fixed-calls`, which
# returns tensors), the program runs a forward pass, calls `output.sum().backward()` on the master,
# then asks each worker how many of its parameter tensors received a gradient (a smaller input, 8 sequences
# of 10 tokens, keeps the article's 12-layer transformer quick):

# %% tags=["nbval-check-output"]
fixed = disttutor.launch("rpc_article", nproc=4, args={"stage": "fixed-calls", "batch": 8, "seq": 10},
                         stream=False, timeout=120)
out = fixed.results[0]
print("output shape:", out["output_shape"], " requires_grad:", out["output_requires_grad"])
print("parameter elements on the master:", out["local_params"])
# stage_grads counts parameter *tensors* (weight, bias, ...), not their elements
print(format_table([{"worker": w, "parameter tensors with a .grad": g, "parameter tensors": n}
                    for w, (g, n) in out["remote_grads"].items()]))
print(check_no_remote_grads(out, shape=[8, 10, 10]))  # 8 sequences of 10 tokens, 10 classes

# %% [markdown] id="md-06-15"
# No error, and no gradient anywhere: the output `requires_grad`, but local autograd stops at the
# RPC boundary. (The master's `ModelParallelNet` also has **zero** parameters of its own, so a local
# `optim.SGD(model.parameters())` would have nothing to update.) Training needs the two pieces the
# article leaves out:
#
# * **distributed autograd** — inside `with dist_autograd.context() as ctx_id:` every RPC that
#   carries a tensor requiring grad records a send/recv pair in a graph spanning the workers;
#   `dist_autograd.backward(ctx_id, [loss])` runs backward through all of it. The gradients are
#   kept *in the context*, on the worker that owns each parameter — not in `.grad`.
# * **the distributed optimizer** — `DistributedOptimizer(optim.SGD, param_rrefs, lr=...)` gets an
#   `RRef` for every parameter, creates one local optimizer on each owner, and
#   `opt.step(ctx_id)` updates every parameter where it lives, with that context's gradients.
#
# <details><summary><b>Deeper:</b> smaller issues</summary>
#
# Each worker seeds its stage independently, so the model cannot be reproduced; the article uses the
# same `x` as source and target of an encoder–decoder with no mask.
#
# </details>

# %% [markdown] id="md-06-16"
# ## 3. The corrected RPC model, trained
#
# `disttutor/programs/rpc_train.py` keeps the article's shape — a master and worker1..3 each holding
# one stage created with `rpc.remote` — with the three fixes. The master's side:

# %%
show_code("disttutor.programs.rpc_train", "master")

# %% [markdown] id="md-06-17"
# `with dist_autograd.context() as ctx_id:` records every RPC that carries a tensor requiring grad;
# `dist_autograd.backward(ctx_id, [loss])` replaces `loss.backward()`; `opt.step(ctx_id)` runs SGD on
# each worker with that context's gradients. The stages' forward (each `rpc_sync` returns the
# activation to the master), folded:

# %% tags=["deeper"]
deeper("RemoteStages.forward: one rpc_sync per stage", inspect.getsource(rpc_train.RemoteStages.forward).splitlines())

# %% [markdown] id="md-06-18"
# The data: 8 sequences of 12 tokens; the target of each token is `token % 10` (learnable per
# token). Five SGD steps:

# %%
RT = rpc_train.RpcTrainConfig()
# Not streamed: every rank prints each deprecation warning it meets (15 lines before the first loss
# line). They are the lesson of section 4, which shows each distinct one once; here, the master's
# loss lines and a count.
trained = disttutor.launch("rpc_train", nproc=4, timeout=120, stream=False)
print("\n".join(ln for ln in trained.ranks[0].log if "loss" in ln))
all_warnings = [w for res in trained.results for w in res.get("warnings", [])]
print(f"({len(all_warnings)} warnings from {trained.world_size} ranks, {len(set(all_warnings))} distinct: "
      "see section 4)")

# %% [markdown] id="md-06-19"
# Each worker reports *its own* stage after training (the master asks it to, by RPC). The kernel
# trains the same three stages, same seeds, same data, same SGD, in one process, and compares:

# %% tags=["nbval-check-output"]
ref_losses_rpc, ref_params = rpc_train.reference(RT)
rows = []
for i in range(3):
    w = trained.results[i + 1]
    got, want = torch.tensor(w["params"]), torch.tensor(ref_params[i])
    # dist-autograd sums gradients in its own order and the distributed optimizer runs the
    # TorchScript functional SGD: float32 rounding differs by ~1e-7, so 1e-5 relative
    match = torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    rows.append({"worker": f"worker{i + 1}", "stage": w["stage_type"], "parameters": w["n_params"],
                 "changed": w["changed"], ".grad stayed None": w["grad_attr_none"], "matches reference": match})
print(format_table(rows))
losses_match = torch.allclose(torch.tensor(trained.results[0]["losses"]), torch.tensor(ref_losses_rpc), rtol=1e-5)
print("master's losses match the single-process losses:", losses_match)
print(check_rpc_training(rows, losses_match, ref_losses_rpc))

# %%
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(range(1, RT.steps + 1), trained.results[0]["losses"], "o-", label="RPC, 3 workers")
ax.plot(range(1, RT.steps + 1), ref_losses_rpc, "x--", label="single process")
ax.set_xlabel("step"); ax.set_ylabel("cross-entropy"); ax.legend(); ax.set_title("same training, two ways")
fig.tight_layout()

# %% [markdown] id="md-06-20"
# Every worker's parameters changed, and each equals the single-process result. Notice the
# topology: each `rpc_sync` returns the activation to the master, which sends it to the next worker
# (a star, not a chain), and still only one worker computes at a time — the same idling as in
# section 1, plus RPC overhead.
#
# ## 4. Where the RPC framework stands, and what to use instead
#
# `torch.distributed.rpc`, `dist_autograd` and `DistributedOptimizer` still ship with this torch and
# work, as shown above. But look at what the runs printed. Every warning a worker raised was
# recorded:

# %%
seen = sorted({w for res in trained.results for w in res.get("warnings", [])})
for w in seen:
    print("-", w)
print(f"(torch {torch.__version__})")

# %% tags=["nbval-check-output"]
checks = {
    "RPC init uses an API deprecated since PyTorch 2.0": any("deprecated since PyTorch 2.0" in w for w in seen),
    "DistributedOptimizer relies on deprecated TorchScript": any("TorchScript" in w and "deprecated" in w for w in seen),
}
for k, v in checks.items():
    print(f"{k}: {v}")
assert all(checks.values())

# %% [markdown] id="md-06-21"
# The framework's own initialisation calls an API PyTorch deprecated in 2.0, and the distributed
# optimizer is built on TorchScript (`torch.jit.script`), which this release marks as deprecated in
# favour of `torch.compile`/`torch.export`. These are the signs of a framework in maintenance: it is
# kept working, but new model-parallel training features in PyTorch are built elsewhere. What to use today:
#
# | you need | use | chapter |
# |---|---|---|
# | a model deeper than one device holds, with devices kept busy | `torch.distributed.pipelining` (micro-batch schedules: GPipe, 1F1B) | 7 |
# | a model whose *parameters/optimizer state* do not fit, with data parallel speed | FSDP2 (`fully_shard`) | [11](11_beyond_ddp.ipynb) |
# | single layers too large for one device (huge matmuls) | tensor parallelism on `DTensor` (`torch.distributed.tensor.parallel`) | [11](11_beyond_ddp.ipynb) |
# | a few layers on a few local GPUs, quick experiment | plain model parallelism: `.to("cuda:1")` between layers in one process, or section 1's p2p | 6 |
#
# RPC remains a reasonable tool for what the others do not cover: irregular, asymmetric programs
# where one process *calls functions on objects that live elsewhere* — a parameter server,
# reinforcement-learning actors feeding a learner. Even there, expect little new development;
# pin your torch version and test the warnings above when you upgrade.

# %% [markdown] id="md-06-22" tags=["takeaways"]
# ## Key takeaways
#
# * Splitting the layers over devices saves memory, not time: with plain model parallelism one stage works at a time.
# * Across processes autograd needs help: send the activation, make the received copy a leaf that requires grad, send its `.grad` back.
# * RPC with distributed autograd records that for you; the article's version passes RRefs where tensors are needed and never trains.
# * Fixed, both versions match a single-process run exactly; today pipelining (chapter 7) and FSDP/TP (chapter 11) replace RPC model parallelism.

# %% [markdown] id="md-06-23" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 6.1 (predict, then run).** The model is cut into **4 stages** on 4 ranks, no micro-batches. What **fraction** of each step does rank 0 spend idle (neither computing nor stepping)? Write a number between 0 and 1 into `my_prediction`, then run the next cell.

# %% tags=["predict"]
my_prediction = None  # a number in [0, 1]: rank 0's idle fraction with 4 stages

# %%
import os

import disttutor

q1 = disttutor.launch("model_parallel", nproc=4, stream=False, timeout=120,
                      args={"steps": 4, "warmup": 1, "batch": 256, "width": 256, "layers-per-stage": 2})
idle = [r["idle_frac"] for r in q1.results]
measured = idle[0]
reveal("6.q1", my_prediction, measured, rel_tol=0.25,  # 25 %: a timed run on shared cores is noisy
       explain=f"Measured idle fractions per rank: {[round(x, 2) for x in idle]} (load {os.getloadavg()[0]:.1f} on "
       f"{disttutor.cores()} cores). With one stage working at a time a rank can be busy at most about 1/4 of the step, "
       "so about 3/4 idle; sends and receives count as idle here, and on fewer cores than ranks the ranks also wait for a core.")

# %% [markdown] id="md-06-24" tags=["question"]
# **Question 6.2.** In the send/recv version, why must a stage call `requires_grad_(True)` on the activation it receives? What breaks without it?

# %%
answer("6.q2")

# %% [markdown] id="md-06-25" tags=["question"]
# **Question 6.3.** A model cut into 4 equal stages: at best, what fraction of the time is each device busy with plain model parallelism, and with a GPipe pipeline of 12 micro-batches?

# %%
answer("6.q3")

# %%
disttutor.course.chapters.glossary(6)
