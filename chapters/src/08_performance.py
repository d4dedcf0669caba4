# %% [markdown] id="md-08-01"
# # Chapter 8 — Performance techniques, each one measured
#
# *Article §8: mixed precision, gradient accumulation, communication, data loading.*
#
# Each of the article's four techniques runs here on real ranks and is measured on your machine.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(8)

# %% [markdown] id="md-08-02" tags=["opening"]
# **After this chapter you can**
# * use mixed precision with today's `torch.autocast`/`GradScaler` API and say what it gains on CPU and on GPUs;
# * accumulate gradients under DDP with `no_sync()` and one all-reduce per step (Exercises 8.1 and 8.2), and compress them with a communication hook (Exercise 8.3);
# * tune DDP's buckets, `gradient_as_bucket_view`, `static_graph` and the data loader — each measured on your machine.

# %%
import math
import os

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist

import disttutor
from disttutor.data_parallel import amp_reported, bf16_cost, perf
from disttutor.checks.claims import ch08
from disttutor.checks.accumulation import check_accumulate_train
from disttutor.checks.perf import check_compress_hook, check_no_sync
from disttutor.course.problems import problem  # worked problems, one a cell
from disttutor.course.puzzles import puzzle  # puzzles, one a cell
from disttutor.viz import performance as viz

print(f"torch {torch.__version__}, {disttutor.cores()} usable CPU cores, GPUs: {torch.cuda.device_count()}")
LOAD = os.getloadavg()[0]  # timings below are noisy when the machine is busy: we keep this beside them
print(f"load average now: {LOAD:.1f}")
LAUNCH = dict(stream=False, timeout=280)


def more_or_less(new: float, old: float) -> str:  # "53% less" / "12% more": new against old
    return f"{abs(1 - new / old):.0%} {'less' if new < old else 'more'}"

# %% [markdown] id="md-08-03"
# ## 1. Mixed precision (article §8.1)
#
# **Mixed precision** runs the matmuls in a 16-bit format (fp16 or bf16) and keeps the weights, the
# optimizer and the sums that need range in fp32. The article imports `torch.cuda.amp`; today's API names the device:
#
# | article (deprecated) | today |
# |---|---|
# | `torch.cuda.amp.autocast()` | `torch.autocast(device_type, dtype=...)` |
# | `torch.cuda.amp.GradScaler()` | `torch.amp.GradScaler(device_type)` |
# | always fp16 | **bf16** where the device has it (no scaler needed); **fp16 + GradScaler** otherwise |
#
# The course's `perf.precision(device)` picks bf16 on CPU, fp16 + GradScaler on CUDA (bf16 on request); here:

# %%
prec = perf.precision(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
print(f"autocast dtype: {prec.name}, GradScaler needed: {prec.scaler}")

# %% [markdown] id="md-08-04"
# **Why fp16 needs loss scaling.** fp16 has 5 exponent bits and 10 fraction bits. Its smallest
# positive number is a subnormal, and round-to-nearest sends anything up to half of it to **zero**:
# small gradients vanish. The scaler multiplies the loss (hence every gradient) by a scale (`2**16`
# at first, halved after an overflow) before backward and divides again, in fp32, before the step.
# bf16 has fp32's 8 exponent bits: the same range, fewer fraction bits (7 against 23), no underflow here.

# %%
fi16 = torch.finfo(torch.float16)
sub = fi16.smallest_normal * fi16.eps  # 2**-14 * 2**-10 = 2**-24: fp16's smallest subnormal
print(f"fp16's smallest positive value: 2**{math.log2(sub):.0f} = {sub:.3g}")
g = torch.tensor(1e-8)  # a realistic tiny gradient entry
print("fp16 of 1e-8:             ", g.half().item())
print("fp16 of 1e-8 * 2**16:     ", (g * 2**16).half().item())
print("... back in fp32 / 2**16: ", ((g * 2**16).half().float() / 2**16).item())
print("bf16 of 1e-8:             ", g.bfloat16().item())

# %% tags=["proof", "nbval-check-output"]
print(ch08.check_fp16_underflow(sub, g))

# %%
viz.plot_ranges()
plt.show()

# %% [markdown] id="md-08-40" tags=["caption"]
# *Figure: each format's range on a log2 axis (pale: subnormals): the dotted 1e-8 gradient lies below fp16's range and inside bf16's.*

# %% [markdown] id="md-08-05"
# **fp32 against autocast under DDP.** The course's `amp` program trains two DDP replicas of one
# seeded model on 2 ranks, one in fp32 and one under `torch.autocast`, their steps alternating so that
# load slows both alike. Its loop:
#
# ```python
# with torch.autocast(device.type, dtype=prec.dtype):
#     loss = F.mse_loss(ddp(x).float(), y)
# scaler.scale(loss).backward()        # DDP all-reduces the scaled gradients
# scaler.unscale_(opt)                 # FIRST unscale ...
# clip_grad_norm_(ddp.parameters(), 1.0)   # ... THEN clip (true gradient norms)
# scaler.step(opt); scaler.update()    # step skipped if inf/NaN appeared
# ```

# %%
amp = disttutor.launch("amp", nproc=2, args={"steps": 40}, **LAUNCH)
print(amp.command)
a = amp.results[0]
ratio = a["step_ms_amp"] / a["step_ms_fp32"]
print(f"loss after {len(a['loss_fp32'])} steps: fp32 {a['loss_fp32'][-1]:.4f}, {a['autocast_dtype']} {a['loss_amp'][-1]:.4f}")
print(f"median step: fp32 {a['step_ms_fp32']:.1f} ms, autocast {a['step_ms_amp']:.1f} ms: "
      f"autocast {ratio:.2f}x ({'slower' if ratio > 1 else 'faster'})")
viz.plot_losses({"fp32": a["loss_fp32"], f"{a['autocast_dtype']} autocast": a["loss_amp"]})
plt.show()

# %% tags=["proof"]
print(ch08.check_amp_rounding(a))

# %% [markdown] id="md-08-41" tags=["caption"]
# *Figure: the loss per step in fp32 and under autocast, one curve drawn over the other.*

# %% [markdown] id="md-08-06"
# The curves lie on top of each other: bf16 keeps 8 significant bits (up to 2**-8 ≈ 0.4 % relative
# rounding of every matmul input), which moves the loss slightly (printed above), not its course.
# The parameters are *not* bit-identical (the proof above checks both).

# %% [markdown] id="md-08-07"
# **Is autocast faster?** At every matmul it *casts* fp32 weights and activations to bf16, then
# multiplies in bf16. That pays only on hardware with fast bf16 math (GPU tensor cores; on CPUs the
# flags `avx512_bf16` or `amx_bf16`), and only when the matmuls are large against the casts. The next
# cell times both sides on one thread, at the chapter's model and at a large one. If bf16 is slower
# even on the large stack, this CPU has no bf16 unit torch uses.

# %%
cpu = bf16_cost.cpu_bf16_support()
print(f"torch CPU capability {cpu['capability']}; "
      + ", ".join(f"{f} {'?' if v is None else 'yes' if v else 'no'}" for f, v in cpu["flags"].items()))
small = bf16_cost.cast_vs_matmul([perf.D_IN, *perf.HIDDEN, perf.D_OUT], batch=64 // 2)  # amp's per-rank batch
large = bf16_cost.cast_vs_matmul([1024] * 4, batch=256)
for name, r in (("chapter's model", small), ("3 x Linear(1024)", large)):
    print(f"{name:16}: bf16 matmuls {r['bf16'] / r['fp32']:.2f}x the fp32 time, under autocast "
          f"{r['autocast'] / r['fp32']:.2f}x (fp32 {r['fp32']:.3f} ms)")
# A backward runs two matmuls per forward one (gradient of the input, of the weight): ~3x the forward's trade.
extra_ms = 3 * (small["autocast"] - small["fp32"])
print(f"predicted DDP step ratio {1 + extra_ms / a['step_ms_fp32']:.2f}, measured above {ratio:.2f}")

# %% [markdown] id="md-08-08"
# The predicted ratio adds autocast's measured extra cost (three matmuls per layer: forward, and the
# backward's two) to the fp32 step. Opposite sides of 1: the trade is below the step's noise.
#
# **On GPUs**, a published measurement of the same model in full and mixed
# precision: throughputs *reported* by the source, speed-ups *derived*. At batch 1 mixed precision is
# slower: too little work per call, the same trade, decided by size.

# %%
for r in amp_reported.ROWS:
    print(f"{r.gpu:12} {r.what:36} {r.full} {r.full_value:g} -> mixed {r.mixed_value:g} {r.unit} (reported): "
          f"{r.speedup:.2f}x (derived)")
sources = [src.split(", ") for src in dict.fromkeys(r.source for r in amp_reported.ROWS)]
print("source:", next(part for part in sources[0] if part.startswith("https://")))
print("sections:", "; ".join(next(part for part in src if part.startswith("'")) for src in sources))

# %% [markdown] id="md-08-09"
# **Clipping with a scaler: the order matters.** With the scaler on (fp16's case), gradients are
# *scale* times too large until `unscale_` (`2**16` at first). Clip before that and the total norm
# is cut to the threshold *in scaled units*: to 1/65536 of what you meant. With a real `GradScaler` (it works on CPU too):

# %% tags=["nbval-check-output"]
def clipped_norm(unscale_first: bool) -> float:
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    scaler.scale((10 * lin(torch.randn(4, 8))).pow(2).mean()).backward()  # true gradient norm >> 1
    if unscale_first:
        scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(lin.parameters(), max_norm=1.0)
    if not unscale_first:
        scaler.unscale_(opt)
    return torch.cat([p.grad.reshape(-1) for p in lin.parameters()]).norm().item()


right, wrong = clipped_norm(True), clipped_norm(False)
# 3 and 2 decimals: finer digits are float rounding and differ between CPUs
print(f"unscale then clip: gradient norm {right:.3f}")
print(f"clip then unscale: gradient norm {wrong * 2**16:.2f} / 65536")

# %% tags=["proof", "nbval-check-output"]
print(ch08.check_clip_order(right, wrong * 2**16))

# %% [markdown] id="md-08-10"
# ## 2. Gradient accumulation (article §8.2)
#
# **Gradient accumulation** sums the gradients of k micro-batches in `.grad`, then takes one optimizer
# step, as on one k-times-larger batch. The article divides each loss by `accumulation_steps` and steps
# every k-th micro-batch. It leaves out two things:
#
# 1. **Under DDP every `backward()` all-reduces**: k all-reduces per step where one would do. Run the
#    first k−1 backwards inside `ddp.no_sync()`.
# 2. **The leftover.** If an epoch's micro-batches are not a multiple of k, `(i + 1) % k == 0` never
#    steps the last few: their gradients leak into the next epoch. Step them too, the loss divided by
#    their own count.
#
# The plain code on two live ranks (`%ranks`, chapter 0); a communication hook counts the all-reduces
# (DDP calls it once per bucket it sends):

# %%
%load_ext disttutor
%ranks start -n 2

# %% tags=["nbval-check-output"]
%%ranks
import contextlib

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from disttutor.workloads.models import MLP, seeded

model = DDP(seeded(MLP, 0))                       # the same weights on every rank
opt = torch.optim.SGD(model.parameters(), lr=0.1)
calls = []

def counting_hook(state, bucket):                 # DDP calls it once per bucket it all-reduces
    calls.append(bucket.index())
    return default_hooks.allreduce_hook(state, bucket)

model.register_comm_hook(None, counting_hook)
k = 4
batches = torch.randn(k, 8, 16, generator=torch.Generator().manual_seed(rank))  # each rank its own data

def accumulate(use_no_sync):
    calls.clear()
    for i, x in enumerate(batches):
        skip = use_no_sync and i < k - 1           # all but the last backward: no all-reduce
        with model.no_sync() if skip else contextlib.nullcontext():
            (model(x).pow(2).mean() / k).backward()   # / k: the mean over all k micro-batches
    opt.step()
    opt.zero_grad()
    return len(calls)

{"all-reduces without no_sync": accumulate(False), "with no_sync": accumulate(True)}

# %%
%ranks stop

# %% [markdown] id="md-08-34"
# The course's `accumulation` program runs this loop for an epoch of 18 micro-batches, k = 1, 2, 4,
# with and without `no_sync()`, and compares every step with one process on the group's whole batch:

# %%
acc = disttutor.launch("accumulation", nproc=2, **LAUNCH)
print(acc.command)
rows = acc.results[0]["rows"]
for r in rows:
    print(f"k={r['k']} no_sync={str(r['no_sync']):5}  groups {len(r['group_sizes'])} (last {r['group_sizes'][-1]})  "
          f"all-reduces per step {max(r['allreduces'])}  {r['ms_per_step']:.1f} ms/step")
k4 = {r["no_sync"]: r for r in rows if r["k"] == 4}

# %% tags=["proof", "nbval-check-output"]
print(ch08.check_no_sync_counts(acc.results, rows, samples=18))

# %%
viz.plot_collectives(rows)
plt.show()
grad_kib = sum(p.numel() * p.element_size() for p in perf.model().parameters()) / 1024
print(f"k=4, {grad_kib:.1f} KiB of gradients: {k4[False]['ms_per_step']:.1f} ms per step without no_sync, "
      f"{k4[True]['ms_per_step']:.1f} ms with it ({more_or_less(k4[True]['ms_per_step'], k4[False]['ms_per_step'])})")

# %% [markdown] id="md-08-42" tags=["caption"]
# *Figure: all-reduces per optimizer step against k, counted: k of them without `no_sync()`, one with it.*

# %% [markdown] id="md-08-35"
# At k = 4: groups of 4, 4, 4, 4 and 2, the leftover stepped.

# %% [markdown] id="md-08-11"
# ### Exercise 8.1 — `no_sync()` for your own DDP
#
# Give chapter 4's `BucketedDDP` a `no_sync()` context manager. Inside it a backward only accumulates
# into `.grad` (no bucket counted, no all-reduce); the next backward outside it all-reduces each bucket
# once. `BucketedDDP` calls `self._grad_ready(p)` each time `p.grad` is complete. The checker trains
# your wrapper beside torch's DDP (k = 4, 2 ranks), counts the all-reduces and compares the parameters.

# %%
card("8.1")

# %%
import contextlib

from disttutor.scratch.ddp import BucketedDDP


class NoSyncDDP(BucketedDDP):
    @contextlib.contextmanager
    def no_sync(self):
        raise NotImplementedError("Exercise 8.1: set a flag, yield, restore the flag")
        yield

    def _grad_ready(self, p):
        raise NotImplementedError("Exercise 8.1: skip bucketing while no_sync() is active, else super()._grad_ready(p)")


# %%
hint("8.1")


# %%
print(check_no_sync(NoSyncDDP))

# %% [markdown] id="md-08-50"
# ### Exercise 8.2 — the accumulation loop with torch's DDP
#
# Write `accumulate_train` below: this rank's `(x, y)` micro-batches, loss
# `torch.nn.functional.mse_loss(ddp(x), y)`, one optimizer step and one all-reduce per group of k: every
# micro-batch but a group's last runs, forward and backward, inside `ddp.no_sync()`. A shorter last group
# steps too; every group divides its losses by its own size.

# %%
card("8.2")

# %%
def accumulate_train(ddp, optimizer, micro_batches, k):
    """Train a DDP model on this rank's list of (x, y) micro-batches, k per optimizer step. Returns nothing."""
    raise NotImplementedError("Exercise 8.2: accumulate k micro-batches per step")


# %%
hint("8.2")


# %%
print(check_accumulate_train(accumulate_train))

# %% [markdown] id="md-08-12"
# ## 3. Communication (article §8.3)
#
# The article's three levers: accumulate (above), **compress**, and **overlap**.
#
# <details><summary><b>The article says</b> overlap comes from <code>DDP(find_unused_parameters=True)</code></summary>
#
# Today overlap is DDP's default: buckets are all-reduced while the backward runs (chapter 4).
# `find_unused_parameters=True` adds no overlap; it walks the autograd graph after every forward to
# find parameters without a gradient, a cost chapter 4 measured.
# </details>
#
# **Compression.** A **communication hook** replaces DDP's all-reduce of each bucket: DDP hands it the
# bucket and waits for the future it returns. torch ships hooks in
# `torch.distributed.algorithms.ddp_comm_hooks`:
#
# ```python
# from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
# ddp.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
# ```
#
# The course's `comm_hooks` program trains one model 30 steps with each hook on 2 ranks and counts the
# bytes each hands to `dist.all_reduce`: fp32 (the default), fp16, bf16, and PowerSGD (a rank-1
# approximation of each gradient matrix, its error kept for the next step). `register_comm_hook` refuses
# the bf16 hook unless the *torch build* has NCCL 2.10+ (CUDA or ROCm) or XCCL with an XPU
# (`_check_comm_hook` in `torch/nn/parallel/distributed.py`), whatever the process group's backend.

# %% [markdown] id="md-08-37" tags=["derivation"]
# **Derivation: what compression saves.** A step all-reduces $S$ bytes of gradients in $k$ buckets on $n$ ranks.
#
# * The link's time: $M = k\cdot 2(n-1)\,\alpha + \frac{2(n-1)}{n}\cdot\frac{S}{B}$.
# * fp16 or bf16 halves $S$ and keeps $k$: it saves $\frac{2(n-1)}{n}\cdot\frac{S}{2B}$ ($\frac{S}{2B}$ on 2 ranks), never the latency.
# * A step pays compute $C$ plus the part of $M$ the backward did not hide, and the saving reaches the step only through that part: all of it when the link is the bottleneck, at least the last bucket's share otherwise.

# %%
hooks = disttutor.launch("comm_hooks", nproc=2, **LAUNCH)
print(hooks.command)
# torch's own test, evaluated here (the kernel runs the same torch build as the ranks)
bf16_hook_ok = ((torch.version.cuda is not None or torch.version.hip is not None)
                and dist.is_nccl_available() and torch.cuda.nccl.version() >= (2, 10)) or \
               (dist.is_xccl_available() and torch.xpu.is_available())
allrows = {r["hook"]: r for r in hooks.results[0]["rows"]}
hrows = {h: r for h, r in allrows.items() if "refused" not in r}  # the hooks that ran
base = hrows["allreduce"]
for h, r in allrows.items():
    print(f"{h:9}  refused by this torch build" if "refused" in r else
          f"{h:9}  {r['bytes_per_step']:6.0f} bytes/step ({r['bytes_per_step'] / base['bytes_per_step']:.3f}x)  "
          f"loss after {len(r['loss'])} steps {r['loss'][-1]:.4f}")

# %% tags=["proof", "nbval-check-output"]
print(ch08.check_hook_bytes(base, allrows, hrows, bf16_hook_ok))

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3))
viz.plot_bytes(list(hrows.values()), ax=ax1)
viz.plot_losses({h: r["loss"] for h, r in hrows.items()}, ax=ax2, title="loss per step, by hook")
plt.show()

# %% [markdown] id="md-08-43" tags=["caption"]
# *Figure: left, the bytes each hook handed to its collectives per step; right, the loss per step under each hook.*

# %% [markdown] id="md-08-13"
# ### Exercise 8.3 — a compression hook from scratch
#
# Write `fp16_compress_hook(state, bucket)`: `bucket.buffer()` is the bucket's gradients in one fp32
# tensor; return a `torch.futures.Future` of the **averaged** gradients, sending fewer bytes than fp32
# (top-k with error feedback is the ambitious variant). The checker registers your hook on real DDP
# ranks, counts its bytes and compares the loss after 30 steps with fp32's.

# %%
card("8.3")

# %%
def fp16_compress_hook(state, bucket):
    raise NotImplementedError("Exercise 8.3: compress bucket.buffer(), all-reduce it asynchronously, "
                              "return a future of the averaged fp32 gradients")


# %%
hint("8.3")


# %%
print(check_compress_hook(fp16_compress_hook))

# %% [markdown] id="md-08-14"
# ### Buckets and overlap, `gradient_as_bucket_view`, `static_graph`
#
# DDP groups gradients into **buckets** of about `bucket_cap_mb` MiB (default 25; a bucket closes once
# it reaches the cap, so it can exceed it) and all-reduces a bucket once its gradients are ready,
# while the backward goes on: the **overlap**. Left unset,
# `bucket_cap_mb` also gives one bucket a 1 MiB cap (`dist._DEFAULT_FIRST_BUCKET_BYTES`) so the
# gradients that finish last do not wait in a large one; set it, and every bucket gets the same cap.
# Small buckets start earlier and pay the per-call latency more often.
#
# The course's `ddp_tuning` program sweeps `bucket_cap_mb` on a 6-layer 512-wide MLP on 2 ranks,
# timing the backward under DDP, the same backward inside `no_sync()`, and the buckets' all-reduces
# alone. **Hidden communication** = backward alone + all-reduces alone − backward under DDP: positive
# when DDP overlapped, negative when running both at once cost more.

# %% [markdown] id="md-08-38" tags=["derivation"]
# **Derivation: the bucket size.** Cut $S$ bytes of gradients into $k = \lceil S/S_b \rceil$ buckets of $S_b$ bytes each.
#
# * Each costs $t_b = 2(n-1)\,\alpha + \frac{2(n-1)}{n}\cdot\frac{S_b}{B}$: latency once per bucket, bandwidth once per byte.
# * Too small: the latency paid, $k\cdot 2(n-1)\,\alpha$, grows as $1/S_b$.
# * Too large: buckets start later, and the last one, ready only when the backward ends, is exposed for its whole $t_b$.
# * The two terms of $t_b$ are equal at $S_b = n\alpha B$: well above it a bucket's time is its bytes.

# %%
tune = disttutor.launch("ddp_tuning", nproc=2, **LAUNCH)
print(tune.command)
t = tune.results[0]
print(f"gradients: {t['grad_mb']:.1f} MiB, backend {t['backend']}, load {os.getloadavg()[0]:.1f}")
for r in t["rows"]:
    print(f"bucket_cap_mb={r['cap_mb']:4g}: {r['buckets']} {'bucket' if r['buckets'] == 1 else 'buckets'} | under DDP {r['ddp_ms']:5.1f} ms | "
          f"alone {r['bwd_ms']:5.1f} + {r['comm_ms']:5.1f} ms | hidden {r['hidden_ms']:+5.1f} ms")
viz.plot_buckets(t["rows"])
plt.show()

# %% tags=["proof", "nbval-check-output"]
print(ch08.check_bucket_sweep(tune.results))

# %% [markdown] id="md-08-44" tags=["caption"]
# *Figure: left, each cap's backward under DDP against backward alone plus all-reduces alone; right, their difference, the time DDP hid (negative: overlap cost time).*

# %%
best = max(t["rows"], key=lambda r: r["hidden_ms"])
one = t["rows"][-1]  # the largest cap: the whole gradient in one bucket
print(f"largest hidden time: {best['hidden_ms']:+.1f} ms (bucket_cap_mb={best['cap_mb']:g}), of {best['comm_ms']:.1f} ms of all-reduces")
print(f"one all-reduce of all {t['grad_mb']:.1f} MiB: {one['comm_ms']:.1f} ms; no_sync at k=4 would skip 3 of them per step")

# %% [markdown] id="md-08-15"
# On loopback an all-reduce is CPU work: gloo's threads copy and sum on the backward's cores, so
# there is little to hide it behind (compare the hidden times above with the all-reduce times).
# Between machines the transfer is the network card's work.
#
# ### On a slow network: the emulated link
#
# An **emulated link** (`disttutor/links/`) stands in for a network: every collective still runs on
# gloo, so results are unchanged, but an all-reduce of $S$ bytes completes no earlier than
# $2(n-1)\,\alpha + \frac{2(n-1)}{n}\cdot\frac{S}{B}$ after it started, for a **latency α** per ring step and a
# **bandwidth B**; transfers queue behind each other. A transfer
# whose real loopback all-reduce takes longer shows that time and is counted *late*. Each preset
# (1GbE, 10GbE, 25GbE, IB100, NVLink) tags its figures *reported*, *derived* or *assumed* with a
# source. This section uses 1GbE:

# %% tags=["nbval-check-output"]
import textwrap

from disttutor.links.presets import preset
from disttutor.viz import links as linkviz

for figure, value, tag, source in preset("1GbE").sources():
    print(f"1GbE {figure} = {value}, {tag}:")
    for line in textwrap.wrap(source, 110):
        print("   ", line)

# %% [markdown] id="md-08-16"
# The link waits without using the CPU (a `threading.Timer` completes the future at the due time).
# Two hooks put DDP's buckets on it (`disttutor/links/ddp_hooks.py`, abridged):
#
# ```python
# def link_hook(state, bucket):        # overlap: each bucket as soon as DDP hands it over
#     buf = bucket.buffer().div_(state.world)
#     return state.link.all_reduce(buf).then(lambda f: f.value()[0])
#
# def deferred_hook(state, bucket):    # no overlap: hold every bucket until the last one
#     out = torch.futures.Future()
#     state.pending.append((bucket.buffer(), out))
#     if bucket.is_last():             # the first layers' gradients: the backward is done
#         ...                          # all-reduce every pending bucket, then complete each `out`
#     return out
# ```
#
# The course's `emulated_link` program first measures the link back (a slow *probe* link). Then, on an
# MLP with one bucket per layer, it times a step four ways, in rounds so that load hits all alike:
# compute alone (`no_sync`), communication alone, with overlap and without.

# %%
emu = disttutor.launch("emulated_link", nproc=2, args={"link": "1GbE", "parts": ("probe", "overlap", "compression", "nosync")},
                       **LAUNCH)
print(emu.command)
from disttutor.links.fit import fit_probe, summary

e = emu.results[0]
LINK = preset(e["link"])
probe_alpha, probe_beta = fit_probe(e["probe"], e["world"])
figures = summary(e)
print(f"probe link fitted back: alpha {probe_alpha * 1e3:.2f} ms (set {e['probe_link']['alpha'] * 1e3:g}), "
      f"beta {probe_beta / 1e6:.1f} MB/s (set {e['probe_link']['beta'] / 1e6:g})")
print(f"{LINK.caption()}; overlap model: {e['overlap']['depth']} layers, batch {e['overlap_batch']} per rank")

# %% tags=["proof"]
IDLE = disttutor.quiet(ranks=2)   # timing claims are asserted only on a quiet machine
print(ch08.check_probe(e["probe"], figures["emulated_alpha_err"], figures["emulated_beta_err"], IDLE))

# %% tags=["schematic"]
from disttutor.viz.bucket_size import plot_bucket_size

o = e["overlap"]
compute = o["compute_s"]  # the overlap model's step with nothing sent; a backward does about twice a forward's FLOPs
plot_bucket_size(sum(o["bucket_bytes"]), e["world"], LINK, forward_s=compute / 3, backward_s=2 * compute / 3,
                 run_bucket_bytes=max(o["bucket_bytes"]))
plt.show()

# %% [markdown] id="md-08-48" tags=["caption"]
# *Figure: the bucket-size derivation drawn with this run's gradients, link and compute time; the dashed line marks the run's buckets, measured next.*

# %%
o = e["overlap"]
C, M, OV, DE = (1e3 * o[k] for k in ("compute_s", "comm_s", "overlap_s", "deferred_s"))
fig, (ax_bars, ax_time) = plt.subplots(2, 1, figsize=(7.5, 5.8), layout="constrained")
linkviz.plot_overlap(o, LINK.caption(), ax=ax_bars)
linkviz.plot_overlap_timeline(o, LINK.caption(), ax=ax_time)
plt.show()
print(f"{len(o['bucket_bytes'])} buckets of up to {max(o['bucket_bytes']) / 2**20:.1f} MiB: compute alone {C:.0f} ms, "
      f"communication alone {M:.0f} ms")
print(f"with overlap {OV:.0f} ms = {OV / max(C, M):.2f}x max(compute, communication); "
      f"without {DE:.0f} ms = {DE / (C + M):.2f}x their sum")
print(f"hidden: {figures['overlap_hidden']:.0%} of the communication; late transfers: {o['late']} of {o['transfers']}")

# %% tags=["proof"]
print(ch08.check_faster("step", "with overlap", o["overlap_s"], "without", o["deferred_s"], IDLE))

# %% [markdown] id="md-08-45" tags=["caption"]
# *Figure: top, the step times against max and sum; below, one step on rank 0's clock, buckets on the link during the backward with overlap, after it without.*

# %% [markdown] id="md-08-17"
# With perfect overlap a step takes max(compute, communication), a ratio of 1.00; with none,
# compute + communication. *Hidden* is (compute + communication − step with overlap) / communication.
# Many *late* transfers (a busy machine) make the step times say more about the load than the link.
#
# The lower panel (the median of three steps, rank 0's clock) shows the buckets going onto the link
# during the backward with overlap, and queuing after it without. The last bucket (the first layers'
# gradients) is only ready when the backward ends, so its transfer is always exposed. The overlapped
# step, taken apart:

# %%
t_c, t_o = o["timeline"]["compute"], o["timeline"]["overlap"]
ready = linkviz.backward_ready(t_o)
bwd_alone = 1e3 * (t_c["backward_end"] - t_c["forward_end"])
bwd_beside = 1e3 * (ready - t_o["forward_end"])
link_tail = 1e3 * max(max(b["due"] for b in t_o["buckets"]) - ready, 0.0)
queued = sum(b["due"] > ready for b in t_o["buckets"])
print(f"backward done at {1e3 * ready:.0f} ms, step done at {1e3 * t_o['step_end']:.0f} ms: "
      f"{1e3 * (t_o['step_end'] - ready):.0f} ms exposed")
print(f"of which the link carried {queued} bucket(s) for {link_tail:.0f} ms; "
      f"optimizer step {1e3 * (t_o['step_end'] - t_o['backward_end']):.0f} ms")
print(f"backward beside the real all-reduces {bwd_beside:.0f} ms, alone {bwd_alone:.0f} ms: "
      f"{more_or_less(bwd_beside, bwd_alone)} time beside them")

# %% tags=["proof"]
assert all(b["start"] >= b["launched"] - 1e-6 and b["due"] > b["start"] for b in t_o["buckets"])
print("checked: no bucket started on the link before DDP handed it over, and each finished after it started")

# %% [markdown] id="md-08-18"
# Exposed time is the link's tail, the optimizer step and any real all-reduce that ended after the
# link's due time. A backward slower beside the all-reduces than alone shows their CPU work competing.
# Smaller buckets shrink the exposed tail and pay α more often: the trade-off `bucket_cap_mb` tunes.
#
# **Compression on the link.** torch's own hooks, inside `emulated_all_reduce(link)`: every
# `dist.all_reduce` they call crosses the link with the bytes it really sends. A shallower model, at
# a batch sized for the link to dominate (the step column shows if it did):

# %%
comp = e["compression"]
linkviz.plot_compression(comp, LINK.caption())
plt.show()
f32, f16, psgd = comp["fp32"], comp["fp16"], comp["powersgd"]
for name, r in comp.items():
    print(f"{name:8}  {r['bytes_per_step'] / 2**20:6.3f} MiB/step  link {r['link_s_per_step'] * 1e3:5.1f} ms  "
          f"step {r['step_s'] * 1e3:5.1f} ms  ({r['transfers_late']} of {r['transfers']} late)")
for name, r in (("fp16", f16), ("powersgd", psgd)):
    print(f"{name}: {r['bytes_per_step'] / f32['bytes_per_step']:.3f}x fp32's bytes, "
          f"step {r['step_s'] / f32['step_s']:.2f}x fp32's ({'faster' if r['step_s'] < f32['step_s'] else 'slower'})")

# %% tags=["proof"]
print(ch08.check_faster("step on the link", "fp16", f16["step_s"], "fp32", f32["step_s"], IDLE))

# %% tags=["proof", "nbval-check-output"]
print(ch08.check_link_bytes(comp))

# %% [markdown] id="md-08-46" tags=["caption"]
# *Figure: step time per hook on the emulated link, each bar labelled with the bytes that hook put on the link per step.*

# %% [markdown] id="md-08-21"
# Fewer bytes shorten the link time about in proportion (link column; each transfer also pays α).
# The step time also holds
# the compute and the late transfers, so on a busy machine it need not follow. PowerSGD's many small
# all-reduces run one after another, and on a busy machine many are late.
#
# **Fewer syncs.** Section 2's `no_sync` on the same link, k = 4 micro-batches per step:

# %%
ns = e["nosync"]
every, once = 1e3 * ns["every_s"], 1e3 * ns["once_s"]
per_sync = 1e3 * f32["link_s_per_step"]   # the link's time for one all-reduce of all gradients (same buckets)
print(f"k={ns['k']}: syncing every micro-batch {every:.0f} ms per step, no_sync for the first {ns['k'] - 1} "
      f"{once:.0f} ms ({more_or_less(once, every)})")
print(f"link time of the {ns['k'] - 1} skipped all-reduces: {ns['k'] - 1} x {per_sync:.0f} = {(ns['k'] - 1) * per_sync:.0f} ms")

# %% tags=["proof"]
print(ch08.check_faster("k=4 step on the link", "no_sync", ns["once_s"], "syncing every micro-batch", ns["every_s"], IDLE))

# %% [markdown] id="md-08-23"
# **`gradient_as_bucket_view=True`.** By default (`False`) every gradient exists twice: in `p.grad`
# and, copied, in its bucket. With it, `p.grad` *is* a view into the bucket: no copy, and one
# gradient-sized block of memory less (the cost: such a `.grad` cannot be `detach_()`ed). Measured by
# asking each tensor which storage it lives in:

# %% tags=["nbval-check-output"]
bv = {v["flag"]: v for v in t["bucket_view"]}
for f, v in bv.items():
    print(f"gradient_as_bucket_view={f!s:5}: {v['grads_in_buckets']}/{v['params']} .grad tensors in a bucket; "
          f"gradients + buckets {v['held_bytes'] / 2**20:.1f} MiB")

# %% tags=["proof", "nbval-check-output"]
print(ch08.check_bucket_view(bv))

# %% [markdown] id="md-08-24"
# **`static_graph=True`** tells DDP the graph is the same every step: it records in the first step
# which parameters are used, in which order, and stops searching. Among what torch's documentation
# says it newly allows: reentrant backwards and activation checkpointing **several times**. The
# test: one layer applied twice under reentrant checkpointing, against one process after 3 steps:

# %% tags=["nbval-check-output"]
sg = {v["flag"]: v for v in t["static_graph"]}
for f, v in sg.items():
    # The verdict, not the difference itself: at 1e-8 its digits are float rounding, another CPU's differ.
    verdict = ("equal to one process (largest difference < 1e-5)" if v.get("max_err", 1) < 1e-5
               else "NOT equal to one process (largest difference > 1e-3)" if v.get("max_err", 0) > 1e-3
               else "between 1e-5 and 1e-3 from one process")
    print(f"static_graph={f!s:5}: " + (f"DDP raised: {v['error']}" if "error" in v else f"gradients {verdict}"))

# %%
# Every warning rank 0's steps raised was recorded (warnings.catch_warnings in the program):
for f, v in sg.items():
    print(f"static_graph={f!s:5}: warnings raised during its steps:", "; ".join(v["warnings"]) or "none")

# %% tags=["proof", "nbval-check-output"]
print(ch08.check_static_graph(sg))

# %% [markdown] id="md-08-25"
# ## 4. Data loading (article §8.4)
#
# The article's `DataLoader(num_workers=4, pin_memory=True, persistent_workers=True,
# prefetch_factor=2)` is a GPU recipe. **Workers** decode items in other processes while the main
# process trains; **pin_memory** puts batches in page-locked memory so the copy to a GPU can be
# asynchronous; **persistent_workers** keeps the workers alive between epochs (no restart cost);
# **prefetch_factor** is how many batches each worker prepares ahead. Two of them are errors without
# workers:

# %% tags=["nbval-check-output"]
from torch.utils.data import DataLoader

for bad in ({"persistent_workers": True}, {"prefetch_factor": 2}):
    try:
        DataLoader(range(8), num_workers=0, **bad)
    except ValueError as e:
        print(f"num_workers=0 with {bad}: ValueError: {str(e).split('.')[0]}")
    else:
        raise AssertionError(f"{bad} was accepted with num_workers=0")

# %% [markdown] id="md-08-26"
# The course's `dataloading` program gives each item real CPU work: zlib-decode a 192×192 "image",
# flip, normalise, resize to 64×64. It times two epochs per setting: `num_workers` = 0, 1, 2, then, at
# 1 worker, one option changed at a time. Ranks × (1 main + w workers) processes share your cores, and
# a worker helps only on a core no main process uses: one rank per two cores.

# %%
LOADER_RANKS = max(1, min(2, disttutor.cores() // 2))
dl = disttutor.launch("dataloading", nproc=LOADER_RANKS, **LAUNCH)
print(dl.command)
d = dl.results[0]
for r in d["rows"]:
    rate = [round(dl.world_size * v) for v in r["items_per_s"]]
    print(f"{r['label']:22} {dl.world_size * (1 + r['workers'])} processes: items/s per epoch {rate}")
viz.plot_loading(d["rows"], dl.world_size, d["cores"])
plt.show()
rows0 = [r for r in d["rows"] if r["label"].startswith("workers=")]
fast = max(rows0, key=lambda r: r["items_per_s"][-1])
w0 = next(r for r in rows0 if r["workers"] == 0)
spare = d["cores"] - dl.world_size  # cores no main process is using: the only ones a worker can add
print(f"fastest (last epoch): num_workers={fast['workers']}, {fast['items_per_s'][-1] / w0['items_per_s'][-1]:.2f}x "
      f"the items/s of num_workers=0; {spare} of {d['cores']} cores left for workers (load {os.getloadavg()[0]:.1f})")

# %% tags=["proof"]
QUIET_LOADER = spare >= 1 and disttutor.quiet(LOAD, os.getloadavg()[0])  # a timing claim needs a spare core
best_w = max((r for r in rows0 if r["workers"] > 0), key=lambda r: r["items_per_s"][-1])
print(ch08.check_faster("last epoch, time per item", f"num_workers={best_w['workers']}", 1 / best_w["items_per_s"][-1],
                        "num_workers=0", 1 / w0["items_per_s"][-1], QUIET_LOADER))

# %% [markdown] id="md-08-47" tags=["caption"]
# *Figure: items per second for each loader setting, both epochs: compare each bar with workers=0's, and persistent=False's second epoch with workers=1's.*

# %% [markdown] id="md-08-36"
# A worker pays off on a core no main process uses; without one it takes time from a main process
# and adds a hand-over per batch. Non-persistent workers restart every epoch (compare the
# `persistent=False` row's second epoch with `workers=1`'s).
#
# **pin_memory without a GPU.** What did torch do on your machine?

# %% tags=["nbval-check-output"]
pin = next(r for r in d["rows"] if r["pin"])
print("accelerator present:", d["accelerator"], "| batches pinned:", pin["pinned"])
for w in pin["pin_warnings"]:
    print("torch warned:", w)

# %% tags=["proof", "nbval-check-output"]
assert pin["pinned"] == bool(d["accelerator"])   # pinned exactly when there is an accelerator to copy to
assert d["accelerator"] or pin["pin_warnings"]   # without one, torch warns instead
print("checked: batches pinned only with an accelerator; without one torch warns and leaves them in ordinary memory")

# %% [markdown] id="md-08-28"
# What does **not** depend on the machine: `DistributedSampler` with workers still hands out every
# sample once per epoch, across ranks *and* workers (when the ranks divide the dataset; else it
# repeats a few):

# %% tags=["proof", "nbval-check-output"]
n = 256
for r0 in range(len(d["rows"])):
    for epoch in range(2):
        seen = sorted(i for res in dl.results for i in res["rows"][r0]["seen"][epoch])
        assert seen == list(range(n)), (r0, epoch)
print(f"checked: every one of the {n} samples seen exactly once per epoch, for every loader setting, both epochs")

# %% [markdown] id="md-08-49"
# ## Puzzles
#
# One exact answer each: write yours into `mine`, then run the cell.

# %% tags=["puzzle"]
puzzle("8.z1", mine=None)

# %% tags=["puzzle"]
puzzle("8.z2", mine=None)

# %% tags=["puzzle"]
puzzle("8.z3", mine=None)

# %% [markdown] id="md-08-39"
# ## Problems
#
# Work each one on paper, write your number into `mine`, then run the cell. The last one uses section 3's compression run.

# %% tags=["problem"]
problem("8.p1", mine=None)

# %% tags=["problem"]
problem("8.p2", mine=None)

# %% tags=["problem"]
problem("8.p3", mine=None)

# %% tags=["problem"]
problem("8.p4", mine=None)

# %% tags=["problem"]
problem("8.p5", mine=None, bytes_fp32=f32["bytes_per_step"], world=emu.world_size, bandwidth=LINK.beta.value,
        link_fp32_s=f32["link_s_per_step"], link_fp16_s=f16["link_s_per_step"], step_fp32_s=f32["step_s"],
        step_fp16_s=f16["step_s"])

# %% [markdown] id="md-08-30" tags=["takeaways"]
# ## Key takeaways
#
# * Mixed precision: `torch.autocast(device_type=...)`, and a `GradScaler` only for fp16; its speed-up needs hardware with fast low-precision math.
# * Accumulating k micro-batches equals one k-times-larger batch when each loss is divided by k; `no_sync()` cuts the all-reduces from k to 1 per step.
# * A communication hook changes what DDP sends (fp16: half the bytes) — and what is lost in rounding.
# * Bucket size, `gradient_as_bucket_view` and `static_graph` are trade-offs, not free wins (per-message latency against overlap; one copy of the gradients saved; flexibility given up): measure before and after.
# * `DistributedSampler` with loader workers still hands every sample out once per epoch (ranks dividing the dataset).

# %% [markdown] id="md-08-31" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 8.1 (predict, then run).** An epoch of **10** micro-batches under DDP, accumulated **k = 4** per optimizer step (the last step takes the 2 left over), every backward but a step's last inside `no_sync()`. How many all-reduces does DDP launch **in the whole epoch**? Write a number into `my_prediction`, then run the next cell.

# %% tags=["predict"]
my_prediction = None  # a number: DDP all-reduces in the epoch, 10 micro-batches, k = 4, with no_sync

# %%
import disttutor

q1 = disttutor.launch("accumulation", nproc=2, args={"ks": [4], "micro": 10}, stream=False, timeout=280)
rows = {r["no_sync"]: r for r in q1.results[0]["rows"]}
measured = sum(rows[True]["allreduces"])
reveal("8.q1", my_prediction, measured, rel_tol=0,  # counted, exact
       explain=f"{len(rows[True]['group_sizes'])} optimizer steps of {rows[True]['group_sizes']} micro-batches, "
       f"one all-reduce each; without `no_sync()`, {sum(rows[False]['allreduces'])}, one per backward.")

# %% tags=["proof"]
assert all(res["all_match_reference"] for res in q1.results), "with and without no_sync the step should be the same"
print("checked: with and without no_sync() both ranks end at the one-large-batch step")

# %% [markdown] id="md-08-32" tags=["question"]
# **Question 8.2.** Why divide each micro-batch's loss by k when accumulating? What happens if you forget, with SGD and with AdamW?

# %%
answer("8.q2")

# %% [markdown] id="md-08-33" tags=["question"]
# **Question 8.3.** The fp16 compression hook on a 25-million-parameter model: how many bytes per step instead of fp32's, and, on W ranks, below about what magnitude does a gradient become zero?

# %%
answer("8.q3")

# %%
disttutor.course.chapters.glossary(8)
