# %% [markdown] id="md-13-01"
# # Chapter 13 — At scale: from your own measurements to a 16,000-GPU job
#
# How long does a step take on 8 H100s, or on 16,384? Which layout does a 70B model need, and how often
# is a checkpoint worth it? This chapter answers with a **cost model**: fitted on *your* machine,
# checked against runs of earlier chapters, then against published runs. Its entry point is
# `disttutor.scale.predict(shape, layout, hardware, seq, global_batch)`: step time (compute / exposed
# communication / bubble), tokens/s/GPU, MFU and memory per GPU.
#
# Every number is tagged: **measured** (here, now), **reported** (printed by a named source),
# **derived** (computed from the others), **assumed** (an order of magnitude no source confirmed).

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(13)

# %% [markdown] id="md-13-02" tags=["opening"]
# **After this chapter you can**
# * fit latency, bandwidth and compute rate from a few timed collectives and matmuls, and predict a DDP, FSDP or pipeline step from them before running it;
# * swap in published hardware constants and predict tokens/s/GPU and MFU of a real cluster run — and say which terms the model misses when the prediction is off;
# * plan a layout (DP/FSDP/TP/PP/CP) for a model on N GPUs, and choose a checkpoint interval from the failure rate and the checkpoint's cost.

# %%
import math
import os
import statistics

import matplotlib.pyplot as plt

import disttutor
from disttutor.launcher.results import format_table
from disttutor.scale import costmodel, failures, fit, hardware, local, planner, problems, shapes
from disttutor.checks.bench import check_bench
from disttutor.checks.claims.ch13 import check_local_model
from disttutor.checks.cost_model import check_ddp_step
from disttutor.viz import roofline, scale as viz

CORES = disttutor.cores()
N = 2  # ranks for every local run: one per core of the course's reference machine
LAUNCH = dict(stream=False, timeout=240)
LOAD_START = os.getloadavg()[0]
print(f"{CORES} CPU cores; load average now {LOAD_START:.1f}")

# %% [markdown] id="md-13-03" tags=["derivation"]
# ## 1. Three constants, fitted here
#
# A collective's time has two parts. **Latency** α: the fixed cost of one call (waking the other ranks,
# a round trip, library overhead), whatever the size. **Bandwidth** $B$: bytes per second a rank moves.
# Compute has one constant, γ: the sustained matmul rate in FLOP/s.
#
# How many bytes does each rank move? A ring all-reduce of $S$ bytes over $n$ ranks is a reduce-scatter
# then an all-gather; in each, every rank sends $n-1$ chunks of $S/n$. Chapter 2 charged α at each of
# the $2(n-1)$ steps, $2(n-1)\alpha + \frac{2(n-1)}{n}\frac{S}{B}$; a fit of whole calls sees only the
# sum of those fixed costs, so from here on α is one *call's* fixed cost:
#
# $$t_\text{all-reduce} = \alpha + \frac{2(n-1)}{n}\cdot\frac{S}{B}, \qquad
#   t_\text{all-gather} = t_\text{reduce-scatter} = \alpha + \frac{n-1}{n}\cdot\frac{S}{B}$$
#
# (S the gathered tensor, or the scattered input), and $\alpha + S/B$ for a send/recv. No algorithm built from
# point-to-point sends moves fewer bytes per rank, so nccl-tests (`doc/PERFORMANCE.md`) prints the **bus bandwidth**
# `busbw = (S/t) × factor(n)`: one number to compare with the link's rating, whatever `n`.
#
# To measure $t$, time a collective. Two live ranks, each timing five calls with its own clock, nothing more:

# %%
%load_ext disttutor
%ranks start -n 2

# %%
%%ranks
import time

x = torch.zeros(1 << 18)                   # 1 MiB of float32
times = []
for _ in range(5):                         # no warm-up, no barrier, this rank's clock only
    start = time.perf_counter()
    dist.all_reduce(x)
    times.append(time.perf_counter() - start)
"ms per call: " + ", ".join(f"{t * 1e3:.2f}" for t in times)

# %%
%ranks stop

# %% [markdown] id="md-13-07"
# Which is the call's time? Early calls can pay for set-up, a rank that starts early times its wait, and a
# call ends when its *last* rank does.
#
# **Exercise 13.2.** Write `bench_all_reduce(x, warmup, iters)`: on every rank, `warmup` untimed calls,
# then `iters` calls each timed right after a barrier; return, on every rank, the median over calls of the
# slowest rank's seconds. Checked against `scale_bench`'s timing, on 2 gloo ranks.

# %%
card("13.2")


# %%
def bench_all_reduce(x, warmup, iters):
    raise NotImplementedError("Exercise 13.2: warm up, time each call after a barrier, median of the slowest rank")


# %%
hint("13.2")

# %%
print(check_bench(bench_all_reduce))

# %% [markdown] id="md-13-25"
# `scale_bench` times all four collectives that way at five sizes, plus matmuls and one checkpoint save
# (section 6). A line per collective gives α and B:

# %%
bench = disttutor.launch("scale_bench", nproc=N, **LAUNCH,
                         args={"sizes": (4096, 65536, 262144, 1 << 20, 4 << 20), "iters": 5,
                               "matmul": (256, 512, 1024), "checkpoint_mb": 8.0,
                               "handoff_bytes": 64 * 1024 * 4}).results[0]  # one activation of section 2's pipeline
links = {}
for op in costmodel.COLLECTIVES:
    pts = [r for r in bench["rows"] if r["op"] == op]
    links[op] = fit.fit_link(op, [r["bytes"] for r in pts], [r["time_s"] for r in pts], N)
gamma = fit.fit_gamma([r["flops"] for r in bench["matmul"]], [r["time_s"] for r in bench["matmul"]])
machine = costmodel.Machine(links, gamma, N)
print(format_table([{"collective": op, "alpha µs (measured)": round(l.alpha * 1e6, 1),
                     "busbw GB/s (measured)": round(l.bandwidth / 1e9, 3),
                     "worst point, fit/measured": round(max(fit.residuals(op, l, [r["bytes"] for r in bench["rows"]
                                                                                 if r["op"] == op],
                                                               [r["time_s"] for r in bench["rows"] if r["op"] == op],
                                                               N), key=lambda x: abs(x - 1)), 2)}
                    for op, l in links.items()]))
print(format_table([{"n x n matmul": r["n"], "GFLOP/s per rank (measured)": round(r["flops"] / r["time_s"] / 1e9, 1)}
                    for r in bench["matmul"]]))
print(f"gamma (measured; median of the two largest): {gamma / 1e9:.1f} GFLOP/s per rank")
fig = viz.plot_fit(bench["rows"], links, N)
plt.show()

# %% tags=["proof", "nbval-check-output"]
# What was fitted, without the (machine-dependent) values:
assert gamma > 0 and set(links) == set(costmodel.COLLECTIVES)
print(sorted(links), "each with alpha >= 0 and bandwidth > 0:",
      all(l.alpha >= 0 and l.bandwidth > 0 for l in links.values()))

# %% [markdown] id="md-13-21" tags=["caption"]
# *Figure: each collective's measured time per call (dots) and its fitted line t = α + S·factor/B on log axes: the line's flat left end is α, its slope-one right end the bandwidth.*

# %% [markdown] id="md-13-04"
# Without GPUs the "network" is gloo over the loopback interface (with a GPU per rank, NCCL). Each collective gets its own α and bandwidth,
# and on gloo they differ (the table above); the model needs no reason, only the two numbers.
#
# ## 2. Predict, then measure: three runs of earlier chapters
#
# With $n$ ranks, $b$ rows per rank and layer widths $d_0, d_1, \dots$, forward and backward of an MLP
# cost about $6\,b\sum_\ell d_\ell d_{\ell+1}$ FLOPs (2 per multiply-add forward, twice that backward). The model adds
# the parts, assuming no overlap:
#
# * chapter 4's DDP (`ddp_scratch --time`, MLP 16 → 512 → 512 → 512 → 4, 512 rows on 2 ranks, one bucket):
#   $t = 6\,b\sum_\ell d_\ell d_{\ell+1}/\gamma + \sum_\text{buckets} t_\text{all-reduce}(S_\text{bucket})$;
# * chapter 11's FSDP2 (`sharding --time`, TinyLM 512 wide, 2,048 MLP, two units): compute, plus two
#   all-gathers of the MLP unit (resharded after forward), one of the root, and a reduce-scatter of
#   each; and DDP on the same model;
# * chapter 7's GPipe (`pipeline`, $p = 2$ stages of two 1,024-wide layers, $m = 4$ micro-batches of 64
#   rows): $(m + p - 1)$ slots of the slowest stage, plus $2(p-1)$ hand-offs (fill and drain).

# %% [markdown] id="md-13-26" tags=["derivation"]
# **Each layout's step, from the ring.** $\Phi$: a rank's matmul FLOPs per step; $t_\text{AR}$ as above,
# $t_\text{AG}(S) = t_\text{RS}(S) = \alpha + \frac{n-1}{n}\frac{S}{B}$.
#
# * DDP: $\Phi/\gamma + t_\text{AR}(S_g) - t_\text{hidden}$; one bucket starts after backward: $t_\text{hidden} = 0$.
# * FSDP, per unit: $3\,t_\text{AG}(S_u)$ (gather, gather again, reduce-scatter); this section's model adds it to the
#   compute without overlap, and gathers the root unit once (section 5's planner lets it hide).
# * TP over $y$ ranks: $4\,t_\text{AR}(S_a)$ per layer with $n = y$, exposed: the next matmul needs the sum.
# * PP: $(m + p - 1)\,t_s + 2(p-1)(\alpha + S_a/B)$.

# %%
DDP = {"time": True, "wrappers": ("torch",), "hidden": (512, 512, 512), "batch": 512, "samples": 1024,
       "steps": 5, "rounds": 3, "bucket_cap": 1 << 22}
FSDP = {"time": True, "batch": 256, "steps": 3, "time_dim": 512, "time_ff": 2048, "rounds": 3}
PIPE = {"schedule": "gpipe", "microbatches": 4, "batch": 256, "width": 1024, "layers_per_stage": 2,
        "steps": 8, "reference": False}
pred = local.predict_runs(machine, DDP, FSDP, PIPE, N)
print(format_table([{"run": k, **{f"{part} ms": round(v * 1e3, 2) for part, v in p.items() if part != "buckets"}}
                    for k, p in pred.items()]))

# %% [markdown] id="md-13-05"
# Now the runs, right after the fit; the load average shows whether the machine changed. The TinyLM runs
# flush subnormal floats to zero (`torch.set_flush_denormal(True)`): its huge first logits make probabilities
# and gradients underflow into them, and many CPUs compute on them several times slower.


# %%
def measure(ddp, fsdp, pipe):
    """Seconds per step of each program (the slowest rank's), and the FSDP2 units' sizes the program reports."""
    d = disttutor.launch("ddp_scratch", nproc=N, args=ddp, **LAUNCH).results[0]
    f = disttutor.launch("sharding", nproc=N, args=fsdp, **LAUNCH).results[0]["timing"]
    if not f["flush_denormal"]:
        print("this CPU cannot flush subnormals: the TinyLM runs may be slower than their arithmetic")
    p = disttutor.launch("pipeline", nproc=N, args=pipe, **LAUNCH).results
    gpipe = [max(r["steps_s"][i] for r in p) for i in range(1, pipe["steps"])]  # step 0 infers the shapes
    return {"DDP (ch 4)": d["step_ms"]["torch"] / 1e3, "DDP (ch 11)": f["step_ms"]["ddp"] / 1e3,
            "FSDP2 (ch 11)": f["step_ms"]["fsdp2"] / 1e3, "GPipe (ch 7)": statistics.median(gpipe)}, f["unit_params"]


def compare(pred, measured, missing, column="missing term (if not)", always=False):
    rows = []
    for k, t in measured.items():
        ratio = pred[k]["total"] / t
        ok = 0.75 <= ratio <= 1.25
        rows.append({"run": k, "predicted ms": round(pred[k]["total"] * 1e3, 1), "measured ms": round(t * 1e3, 1),
                     "predicted/measured": round(ratio, 2), "within 25 %": ok,
                     column: missing[k] if always or not ok else ""})
    return rows


LEFT_OUT = {  # what the first model leaves out, by run
    "DDP (ch 4)": "SGD step, zero_grad, Python per step",
    "DDP (ch 11)": "AdamW's element-wise update, GELU/LayerNorm",
    "FSDP2 (ch 11)": "AdamW's update, FSDP2's hooks and copies",
    "GPipe (ch 7)": "Python per schedule action, the loss",
}
load_before = os.getloadavg()[0]
measured, fsdp_units = measure(DDP, FSDP, PIPE)
load_after = os.getloadavg()[0]
assert fsdp_units == local.tinylm_units(FSDP["time_dim"], FSDP["time_ff"], local.VOCAB, local.SEQ)  # the model predicted
rows = compare(pred, measured, LEFT_OUT, column="what the model leaves out", always=True)
print(format_table(rows))
print(f"load average {load_before:.1f} before, {load_after:.1f} after, on {CORES} cores")

# %% tags=["proof"]
lo, hi = min(r["predicted/measured"] for r in rows), max(r["predicted/measured"] for r in rows)
assert all(r["what the model leaves out"] for r in rows)  # every run names its missing work
print(f"checked: predicted/measured {lo:.2f}-{hi:.2f}; every run names what the model leaves out")

# %% [markdown] id="md-13-06"
# **Reading it.** A ratio below 1: the run took longer than α, B and γ account for. Left out: element-wise
# layers and the optimizer's update (memory-bound), matmuls too thin to reach γ (a 64-row micro-batch),
# hooks, copies, Python between kernels. On GPU clusters these shrink: section 4 adds one calibration
# factor per GPU type.

# %% [markdown] id="md-13-52" tags=["derivation"]
# **Four measured terms**, each timed on its own, none taken from the runs they predict:
#
# * $t_c$, the compute: the run's forward and backward alone, one rank's layers and rows (a pipeline stage:
#   its $m$ micro-batches), every rank at once, no communication, no optimizer step. It replaces
#   $\Phi/\gamma$ (PipeDream's planner likewise starts from measured per-layer compute times).
# * $h$, a hand-off sent while its sender computes: when every core runs a rank, the send waits for a core,
#   now and then for milliseconds. Roughly, a pipeline's forward, and its backward, waits for the slowest of
#   $m$ hand-offs per boundary: the expected largest of $m$ draws from the measured times replaces $\alpha + S/B$.
# * $u$, seconds per parameter of one optimizer update (SGD or AdamW), timed on every rank at once: memory
#   traffic sets it, not γ (SGD moves 12 bytes per parameter, AdamW at least 28). A rank updating
#   $P_r$ parameters pays $u\,P_r$: all under DDP, a $1/n$ shard under FSDP, its stage's under a pipeline.
# * $t_0$, a step's fixed cost: the same program with every hidden width 8 (all else unchanged) minus its
#   own prediction: the work that does not grow with the widths.
#
# $$t = t_c\,\frac{m+p-1}{m} + t_\text{comm} + u\,P_r + t_0$$
#
# ($t_\text{comm}$: the exposed communication above; $m = p = 1$ without a pipeline). Left to test: does
# communication add what α and B say, the bubble what $(p-1)/m$ says? On a quiet machine each run must land
# within 25 %; one that misses names an unmeasured candidate.


# %%
def compute_alone(ddp, fsdp, pipe):
    """Seconds of each run's forward and backward, timed alone (the slowest rank's median), by model."""
    return disttutor.launch("compute_bench", nproc=N, args=local.compute_args(ddp, fsdp, pipe, N),
                            **LAUNCH).results[0]["seconds"]


t_c = compute_alone(DDP, FSDP, PIPE)
SMALL = {"hidden": (8, 8, 8)}, {"time_dim": 8, "time_ff": 8}, {"width": 8}  # every hidden width 8
small = [{**cfg, **w} for cfg, w in zip((DDP, FSDP, PIPE), SMALL)]
small_measured, _ = measure(*small)
# the width-8 pipeline hands off 2 KiB after almost no compute: its hand-offs keep the fitted α + S/B
small_pred = local.profiled(local.predict_runs(machine, *small, N), compute_alone(*small), PIPE["microbatches"], N)
load_small = os.getloadavg()[0]  # the width-8 runs that give t0 are part of the quiet check too
over = local.Overheads(update_s=bench["update_s_per_elem"],
                       fixed_s={k: local.fixed_overhead(t, small_pred[k]) for k, t in small_measured.items()})
elems = local.updated_params(DDP, FSDP, PIPE, N)
h = bench["handoff"]
assert h["bytes"] == PIPE["batch"] // PIPE["microbatches"] * PIPE["width"] * 4  # the pipeline's activation
prof = local.profiled(pred, t_c, PIPE["microbatches"], N, handoffs=h["times_s"])
pred2 = {k: local.with_overheads(prof[k], *elems[k], over.fixed_s[k], over.update_s) for k in pred}
print("t_c over FLOPs/γ: " + ", ".join(f"{k} {prof[k]['compute'] / pred[k]['compute']:.1f}x" for k in pred))
print(f"h (measured): mean {statistics.fmean(h['times_s']) * 1e3:.2f} ms, slowest of {PIPE['microbatches']} expected "
      f"{local.expected_max(h['times_s'], PIPE['microbatches']) * 1e3:.2f} ms; α + S/B "
      f"{machine.t('send_recv', h['bytes']) * 1e3:.2f} ms")
print("u, seconds per parameter (measured): " + ", ".join(f"{k} {v * 1e9:.2f} ns" for k, v in over.update_s.items()))
STILL_MISSING = {  # unmeasured candidates, named where a prediction still misses
    "DDP (ch 4)": "DDP's copies into its buckets grow with the width; t0 does not",
    "DDP (ch 11)": "DDP's copies into its buckets grow with the width; t0 does not",
    "FSDP2 (ch 11)": "FSDP2's copies into and out of its buffers grow with the width; t0 does not",
    "GPipe (ch 7)": "more than one slow hand-off per phase on the critical path",
}
rows2 = [{"run": r["run"], **{f"{c} ms": round(pred2[r["run"]][part] * 1e3, 1)
                              for c, part in (("t_c", "compute"), ("u P_r", "update"), ("t0", "fixed"))},
          **{k: v for k, v in r.items() if k != "run"}}
         for r in compare(pred2, measured, STILL_MISSING)]
print(format_table(rows2))

# %% tags=["proof"]
quiet = LOAD_START < CORES / 4 and max(load_before, load_after, load_small) <= CORES + 1
print(check_local_model(rows, rows2, quiet, f"load {LOAD_START:.1f} at the start, {load_after:.1f} after the runs, "
                                            f"{CORES} cores"))

# %% [markdown] id="md-13-27"
# **Exercise 13.1.** Write `ddp_step(machine, model, batch)`: seconds per step of `model` (`nn.Linear`
# layers, float32, one bucket) on `batch` rows per rank, from `machine.gamma`, `machine.n` and
# `machine.links["all_reduce"]`. Checked against the course's model, then against your DDP run above.

# %%
card("13.1")


# %%
def ddp_step(machine, model, batch):
    raise NotImplementedError("Exercise 13.1: compute (forward + backward) plus the exposed all-reduce, in seconds")


# %%
hint("13.1")

# %%
print(check_ddp_step(ddp_step, machine=machine, measured=measured["DDP (ch 4)"],
                     dims=(16, *DDP["hidden"], 4), batch=DDP["batch"] // N))

# %% [markdown] id="md-13-08"
# ## 3. Swap the hardware
#
# The same formulas with published constants. Sources: the peak is NVIDIA's H100 SXM5 figure for dense
# bf16 (the data sheet's 1,979 TFLOPS assumes 2:4 sparsity); NVLink 4 carries 900 GB/s per GPU in both
# directions together, so 450 GB/s one way (*derived*); a 400 Gb/s NIC per GPU (Llama 3 paper §3.3.1,
# torchtitan's `llama3_h100_202412_torchtitan.md`) is 50 GB/s line rate (*derived*); the two latencies are *assumed*.

# %%
print(format_table([{"constant": k, "value": v, "tag": t} for k, v, t, _ in hardware.H100.table()]))

# %% [markdown] id="md-13-09"
# A real NIC delivers less than its line rate, so the preset's network times are a lower bound.
#
# Derived from the preset, next to your machine: one 1 GiB all-reduce

# %%
gib = 2**30
nv = costmodel.collective_time("all_reduce", gib, 8, costmodel.Link(hardware.H100.intra_alpha.value,
                                                                    hardware.H100.intra_bw.value))
net = costmodel.collective_time("all_reduce", gib, 128, costmodel.Link(hardware.H100.inter_alpha.value,
                                                                       hardware.H100.inter_bw.value))
here = machine.t("all_reduce", gib)
print(f"8 H100 over NVLink (derived): {nv * 1e3:.1f} ms;  128 H100 over 400 Gb/s NICs (derived): {net * 1e3:.0f} ms")
print(f"{N} ranks of this machine (measured constants): {here * 1e3:.0f} ms -- {here / nv:.0f} x the NVLink node")
print(f"peak compute: H100 {hardware.H100.peak_flops.value / 1e12:.1f} TFLOP/s (reported) vs gamma here "
      f"{gamma / 1e9:.1f} GFLOP/s (measured): {hardware.H100.peak_flops.value / gamma:,.0f} x")

# %% [markdown] id="md-13-28" tags=["derivation"]
# **The roofline.** A kernel doing $\Phi$ FLOPs on $Q$ bytes of memory traffic has intensity $I = \Phi/Q$
# and runs at most at $\min(C,\; I\,B_\text{mem})$ ($C$ peak FLOP/s, $B_\text{mem}$ memory bandwidth):
# memory-bound below $I^* = C/B_\text{mem}$. An $n^3$ matmul in $e$-byte numbers: $I = 2n^3/(3e\,n^2) = 2n/(3e)$,
# so $n/3$ in bf16; a float32 vector add: $1/12$.

# %% tags=["schematic"]
import time

import torch

torch.set_num_threads(1)                   # one core, as each rank computes
a, b, c = (torch.ones(1 << 23) for _ in range(3))  # 32 MiB each
times = []
for _ in range(6):
    start = time.perf_counter()
    torch.add(a, b, out=c)                 # reads a and b, writes c
    times.append(time.perf_counter() - start)
mem_bw = 3 * a.numel() * 4 / statistics.median(times[1:])  # the first call is a warm-up
print(f"memory bandwidth, one core here (measured): {mem_bw / 1e9:.1f} GB/s; "
      f"H100 (reported): {hardware.H100_HBM_BW.value / 1e9:,.0f} GB/s")
fig = roofline.plot_roofline([("this machine: gamma, one core (measured)", gamma, mem_bw),
                              ("H100 SXM, bf16 peak, HBM3 (reported)", hardware.H100.peak_flops.value,
                               hardware.H100_HBM_BW.value)],
                             kernels=[("vector add", 1 / 12), ("bf16 matmul n = 512", 512 / 3)])
plt.show()

# %% tags=["proof"]
ridge_here, ridge_h100 = roofline.ridge(gamma, mem_bw), roofline.ridge(hardware.H100.peak_flops.value,
                                                                       hardware.H100_HBM_BW.value)
assert ridge_here < 512 / 3 < ridge_h100, (ridge_here, ridge_h100)
print(f"checked: ridges {ridge_here:.1f} (here) and {ridge_h100:.0f} (H100) FLOP/B, the matmul's 171 between them")

# %% [markdown] id="md-13-29" tags=["caption"]
# *Figure: attainable FLOP/s against intensity (dots: ridges); the matmul's 171 FLOP/B is compute-bound on this machine's line, memory-bound on the H100's bf16 line.*

# %% [markdown] id="md-13-10"
# ## 4. Checked against published runs
#
# `disttutor.scale.published` holds published runs with complete layouts (TP, CP, PP, DP and its ZeRO stage,
# micro-batch, recomputation), every figure *reported* by its source; a row's notes name what it assumes or derives:
#
# * **Llama 3 405B** (arXiv 2407.21783, Table 4): TFLOPs/GPU on 8,192 and 16,384 H100s; the 131K row prints
#   DP 4, which gives 8,192 GPUs, so DP 8 here (*derived*); `v = 4` **assumed**.
# * **torchtitan** (`llama3_h100_202412_torchtitan.md`): Llama 3.1 8B, FSDP, 8 and 128 H100s; sequence 8,192 **assumed**.
# * **llm-foundry** (MosaicML): MPT 1B–70B, FSDP on 8–128 A100s or H100s.
# * **MT-NLG 530B** (arXiv 2201.11990): TP 8 × PP 35 on 2,240–3,360 A100s, seconds per step.
#
# **MFU** counts the model's FLOPs per second over the peak; **HFU** adds the recomputed forward. A preset's
# **efficiency** (*derived*) is the geometric mean of published / predicted speed at peak over its
# **calibration** rows (H100: Llama 3 on 8,192 and 16,384 GPUs, torchtitan on 8, MPT 7B, 13B, 30B; A100:
# MPT 7B, 13B, 70B, MT-NLG on 2,240); the rest are **held out**. A **residual** is published / predicted
# speed at that efficiency; rows print in `published.RUNS` order.

# %%
from disttutor.checks.claims.ch13 import check_llama_layouts
from disttutor.scale import calibration, published

rows = calibration.residuals()
for k in ("H100", "A100"):
    cal = [r for r in rows if r["hardware"] == k and r["role"] == "calibration"]
    peak = [r["published"] / r["predicted at peak"] if r["metric"] != "step_s" else r["predicted at peak"] / r["published"]
            for r in cal]
    res = " ".join(f"{r['residual']:.2f}" for r in cal)
    print(f"{k}, calibration rows at peak: {' '.join(f'{x:.2f}' for x in peak)}; "
          f"their geometric mean, efficiency = {hardware.PRESETS[k].efficiency.value:.3f} of peak (derived)")
    print(f"{k}, calibration residuals: {res}")
held = [r for r in rows if r["role"] == "held-out"]
for family in ("Llama 3", "torchtitan", "MPT H100", "MPT A100", "MT-NLG"):
    res = [f"{r['residual']:.2f}" for r in held if r["run"].startswith(family)]
    print(f"held out, {family} ({len(res)}): {' '.join(res)}")
for role, sub in (("calibration", [r for r in rows if r["role"] == "calibration"]), ("held-out", held)):
    print(f"{role}: {calibration.within(sub):.0%} of {len(sub)} rows within 25 %, "
          f"{calibration.within(sub, 0.5):.0%} within x1.5 (derived)")
mpt = next(r for r in rows if r["run"] == "MPT H100 30b seq 2048, 32 GPUs, AC")
print(f"full recomputation, MPT 30B on 32 H100: MFU {mpt['MFU']:.0%}, HFU {mpt['HFU']:.0%} (derived)")
CAL = hardware.H100.efficiency.value  # section 5 plans on H100s at this calibrated efficiency
L405, L8 = shapes.LLAMA3_405B, shapes.LLAMA3_8B  # the shapes later sections use

# %% tags=["proof", "nbval-check-output"]
# Every Llama row's layout multiplies to the GPU count Table 4 reports; the 131K row only with its derived DP 8.
llama = [r for r in published.RUNS if r.source == published.LLAMA3]
GPUS = [8192, 16384, 16384]  # reported: the runs' GPU counts
as_printed = 8 * 16 * 16 * 4  # Table 4's 131K row: TP 8 x CP 16 x PP 16 x DP 4
print(check_llama_layouts(llama, GPUS, tokens_per_batch=16 * 2**20, as_printed=as_printed))  # "16M" tokens a batch

# %% [markdown] id="md-13-11"
# **Where the model is off.** One efficiency per hardware absorbs most of the gap to peak, not all:
# **torchtitan**'s GPUs had a lower peak than the preset, and its selective policy recomputes half the
# matmuls; **MT-NLG** ran older software than the MPT runs on the same A100s; at **long sequences** attention
# (12·L·h·s a token, no causal discount) is most of the FLOPs; the Llama rows move with the assumed `v`.

# %% [markdown] id="md-13-50"
# **Memory at the peak.** `planner.memory` adds transient parts to the static bytes (weights, gradients, optimizer state): FSDP's **units in flight**
# (the current and next unit gathered in bf16, and their gradients; under a pipeline torchtitan keeps the
# stage gathered, with fp32 gradients); the fp32 **logits** and their gradient (tokens × vocabulary × 8
# bytes); a 10 % **allocator reserve** (**assumed**). Against torchtitan's peak memory (*reported*; its
# micro-batch counts **assumed**):

# %%
print("GiB per GPU; published: reported (torchtitan); predicted and its parts: derived")
print(format_table([{"run": r["run"].replace("torchtitan ", "").replace("FSDP 8 x TP 8 x PP 8, ", ""),
                     "published": r["published GiB"], "predicted": round(r["predicted GiB"], 1),
                     "ratio": round(r["predicted/published"], 2),
                     **{k: round(r[k], 1) for k in ("activations", "logits", "units")}}
                    for r in calibration.memory_rows()]))

# %% [markdown] id="md-13-12" tags=["derivation"]
# ## 5. The planner
#
# A step is **compute-bound** when the arithmetic sets its time, **communication-bound** when waiting
# for data does. Two rules say where the line runs. Let $C$ be a GPU's peak FLOP/s, $W$ a link's bytes/s
# per GPU, $P$ the parameters, $h$ the model width, $F$ the MLP width, $T$ the tokens a data-parallel
# replica processes per step, $y$ the TP degree.
#
# *FSDP.* Compute is $6PT$ FLOPs, so $6PT/C$ seconds. The traffic is two all-gathers of the bf16 weights
# and one reduce-scatter of the bf16 gradients, $3 \cdot \frac{n-1}{n} \cdot 2P \approx 6P$ bytes, so $6P/W$ seconds. It hides when
# $$\frac{6PT}{C} > \frac{6P}{W} \iff T > \frac{C}{W}.$$
# *TP.* Per token and layer, the MLP's matmuls give each GPU about $2hF/y$ FLOPs (times a constant), and
# the all-reduce of its output moves about $2h$ bytes (times the same order of constant):
# $$\frac{2hF}{y\,C} > \frac{2h}{W} \iff y < \frac{F\,W}{C}.$$
# $P$ and $h$ cancel: the rules depend on the hardware ($C/W$) and, for TP, the MLP width.
#
# `planner.rank_layouts(shape, n_gpus, hardware, seq, global_batch, efficiency)` tries every power-of-two layout (TP
# within a node, PP, CP, DP; ZeRO-1 or FSDP; activation checkpointing or not), keeps those that fit in
# memory (`planner.memory`, chapter 1's calculator extended), and sorts them by tokens/s/GPU. A 70B model
# on 512 H100s, 8K sequences, 4M tokens per step, at the calibrated efficiency:

# %%
best = planner.rank_layouts(shapes.LLAMA3_70B, 512, hardware.H100, 8192, 512, efficiency=CAL, top=6)
print(format_table([{**{k: (round(v, 3) if isinstance(v, float) else v) for k, v in p.row().items()},
                     "where the step goes": planner.explain(p)} for p in best]))
r70 = planner.rules(shapes.LLAMA3_70B, hardware.H100)
print(f"C/W (derived): {r70['fsdp_min_tokens_per_replica']:,.0f} tokens per replica; "
      f"F·W/C over NVLink (derived): {r70['tp_max_degree']:.0f}-way")
every = planner.rank_layouts(shapes.LLAMA3_70B, 512, hardware.H100, 8192, 512, efficiency=CAL, top=10_000)
k, dp = next((i, p) for i, p in enumerate(every) if p.layout.tp == p.layout.pp == p.layout.cp == 1)
print(f"pure data parallelism, best: {dp.row()['layout']}, rank {k + 1} at {dp.step_s:.2f} s a step")
fig = viz.plot_step_split(best, "Llama 3 70B on 512 x H100 (derived)")
plt.show()

# %% [markdown] id="md-13-22" tags=["caption"]
# *Figure: the six fastest layouts' step, split into compute, exposed communication and bubble (derived from the H100 preset); shorter bars are faster steps.*

# %% [markdown] id="md-13-13"
# Why this order: pure FSDP (DP 512) fits only with activation checkpointing, whose 4/3 of the compute puts it
# below these six (the last line above), although its traffic hides. 4-way TP shrinks the activations enough
# for FSDP to fit without recomputation, multiplies the tokens per replica past $C/W$ and stays under $FW/C$;
# 8-way TP exposes more than twice 4-way's all-reduce time (the model never overlaps TP traffic); pipelines add
# a bubble. The model has no term for smaller, less efficient matmuls at high TP; real planners measure that.
#
# The widget redraws the same for the three Llama 3 models, other GPU counts, H100, H200 or A100, sequence and batch (run the notebook
# in JupyterLab to use it; the figure above is its default):

# %%
viz.planner_widget(efficiency=CAL)

# %% [markdown] id="md-13-23" tags=["caption"]
# *Figure: the same split as a widget: pick a model, a GPU count or the hardware and watch which layout ranks first.*

# %% [markdown] id="md-13-30" tags=["derivation"]
# **MFU and HFU.** Training costs $6P$ FLOPs per token (attention aside); activation checkpointing redoes
# the forward, $2rP$ more ($r$ the recomputed share):
# $$\text{MFU} = \frac{6P \cdot \text{tokens/s per GPU}}{C}, \qquad
#   \text{HFU} = \frac{(6 + 2r)\,P \cdot \text{tokens/s per GPU}}{C}.$$
# $r = 1$: HFU $= \tfrac43$ MFU. Recomputation raises HFU and lowers MFU; only MFU compares layouts.

# %% [markdown] id="md-13-14"
# ## 6. Failures at scale
#
# A synchronous job stops when any one of its GPUs does. Llama 3's paper (§3.3.4, Table 5) reports
# **466 job interruptions in a 54-day snapshot, 419 of them unexpected**, on up to 16,384 GPUs. The
# **mean time between failures** (MTBF) of the job, and of one GPU if the GPUs fail independently and every
# interruption is charged to one (GPU issues were 58.7 % of them, *reported*):

# %%
job_mtbf = failures.mtbf_job(54 * 24 * failures.HOUR, 419)          # derived from reported figures
gpu_mtbf = failures.mtbf_per_gpu(job_mtbf, 16384)
print(f"job MTBF: {job_mtbf / failures.HOUR:.2f} h; per GPU: {gpu_mtbf / failures.HOUR:,.0f} h "
      f"= {gpu_mtbf / failures.HOUR / 24 / 365:.1f} years (derived)")
print(format_table([{"GPUs": n, "job MTBF (h, derived)": round(failures.mtbf_for(n, gpu_mtbf) / failures.HOUR, 2)}
                    for n in (8, 1024, 16384, 131072)]))

# %% [markdown] id="md-13-15" tags=["derivation"]
# Save a checkpoint every τ seconds at a cost of δ seconds, with a job MTBF of $M$. Saving loses the
# fraction $\delta/\tau$; a failure loses on average half an interval of work, plus the restart $R$:
# $$\text{lost} \approx \frac{\delta}{\tau} + \frac{\tau/2 + R}{M}, \qquad
#   \frac{d}{d\tau}: -\frac{\delta}{\tau^2} + \frac{1}{2M} = 0 \iff \tau = \sqrt{2\,\delta M}$$
# Young's **checkpoint interval** (1974; Daly 2006 refines it when δ is not small next to $M$); the rest
# is the **effective training time**.
#
# What is δ? The bench above saved a model with AdamW state through chapter 10's `disttutor.lm.checkpoint`
# (DCP, every rank its part, atomic rename):

# %%
ck = bench["checkpoint"]
per_rank_bps = ck["bytes_on_disk"] / ck["ranks"] / ck["seconds"]
print(f"measured: {ck['bytes_on_disk'] / 1e6:.1f} MB on {ck['ranks']} ranks in {ck['seconds'] * 1e3:.0f} ms "
      f"-> {per_rank_bps / 1e6:.0f} MB/s per rank")
# Llama 3 405B on 16,384 GPUs: each GPU saves its shard of fp32 master weights + AdamW moments (12 B/param).
shard = 12 * L405.params() / 16384
delta = shard / per_rank_bps                                       # derived: if every GPU wrote at this speed
plan = failures.plan(16384, gpu_mtbf, delta, restart_s=0.0)
print(f"405B: {shard / 1e6:.0f} MB per GPU -> delta = {delta:.1f} s at this speed (derived); "
      f"Young interval {plan['interval_s'] / 60:.1f} min, useful fraction {plan['efficiency']:.1%}")
TECTONIC = hardware.Constant(2e12, "B/s", "reported", "Llama 3 paper, sec. 3.3.1: Tectonic's sustained throughput")
total_bps = 16384 * per_rank_bps
print(f"16,384 GPUs at this speed: {total_bps / 1e12:.2f} TB/s together (derived); "
      f"Meta's storage sustains {TECTONIC.value / 1e12:.0f} TB/s (reported)")
fig = viz.plot_checkpoint_interval(delta, job_mtbf, label=f"16,384 GPUs: δ = {delta:.1f} s, "
                                                          f"M = {job_mtbf / failures.HOUR:.1f} h")
plt.show()

# %% [markdown] id="md-13-24" tags=["caption"]
# *Figure: the useful fraction of wall time against the checkpoint interval (derived); it peaks at Young's interval τ, falling to the left (checkpoint stalls) and to the right (work lost per failure).*

# %% [markdown] id="md-13-16"
# The assumption "every GPU writes at this machine's speed, in parallel" is checked by its sum, printed
# above next to what Meta's storage sustains (§3.3.1): above it, storage caps the sum and δ is longer.
# The restart $R$ (rescheduling, reloading) adds its cost per failure. Meta reports more than 90 % effective training time
# (*reported*, §3.3.4).
#
# ## 7. Problems
#
# Pen and paper first. `problems.check(name, your_number)` says whether you are within tolerance;
# `problems.answer(name)` prints the worked answer.
#
# | name | question (checked: unit) |
# |---|---|
# | `busbw` | nccl-tests: a 1 GiB all-reduce on 8 GPUs takes 4.0 ms. Which bus bandwidth does it print? (GB/s) |
# | `fsdp_tokens` | A100 preset: how many tokens per replica per step hide FSDP's traffic? (tokens) |
# | `tp_degree` | Llama 3 70B, F = 28,672, NVLink 3 on A100s: up to which TP degree is the MLP compute-bound? (way) |
# | `mtbf` | 419 unexpected interruptions in 54 days on 16,384 GPUs: a job's MTBF on 8,192 GPUs? (h) |
# | `young_daly` | The 16,384-GPU job's MTBF and δ = 60 s: how many minutes between checkpoints? (min) |
#
# Three more have worked answers only: `bubble`, `state_405b`, `dp_allreduce` (read one with
# `problems.PROBLEMS[name].question`).

# %% tags=["proof", "nbval-check-output"]
assert list(problems.PROBLEMS) == ["busbw", "fsdp_tokens", "tp_degree", "mtbf", "young_daly", "bubble",
                                   "state_405b", "dp_allreduce"]  # the table above, in order
print("checked:", ", ".join(f"{k} ({p.unit})" for k, p in problems.PROBLEMS.items() if p.rel_tol is not None))

# %%
MY = {"busbw": None, "fsdp_tokens": None, "tp_degree": None, "mtbf": None, "young_daly": None}  # <- your numbers
for name, value in MY.items():
    if value is None:
        print(f"{name}: not answered yet")
    else:
        problems.check(name, value)

# %%
# problems.answer("bubble")      # <- uncomment to read a worked answer

# %% [markdown] id="md-13-17" tags=["takeaways"]
# ## Key takeaways
#
# * Three constants per machine (α and bandwidth per collective, γ per FLOP) give a step's matmuls and
#   transfers; memory-bound work (optimizers, element-wise ops) and per-op overhead come on top.
# * The factors 2(n−1)/n and (n−1)/n turn any collective into bytes per rank: bus bandwidth is what to
#   compare with a link's rating.
# * At scale the model needs one calibration factor per GPU type (kernel efficiency, fitted on named
#   published runs), and says where a row departs from it: hardware variants, attention counting, overlap.
# * FSDP hides its traffic above $C/W$ tokens per replica per step; TP stays compute-bound up to about
#   $FW/C$-way, which is why it lives inside an NVLink node.
# * At 16,384 GPUs a failure every few hours makes checkpoint cost a throughput term; Young–Daly's
#   interval balances time spent saving against work redone.

# %% [markdown] id="md-13-18" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 13.1 (predict, then run).** On this machine, an all-reduce of **4 MiB** against one of **1 MiB**: how many times longer does it take? Write a number into `my_prediction`, then run the next cell.

# %% tags=["predict"]
my_prediction = None  # a number: time(4 MiB all-reduce) / time(1 MiB all-reduce)

# %%
import disttutor

q1_n = 2  # the smallest ring; its time is what the model t = α + S/B describes
q1 = disttutor.launch("scale_bench", nproc=q1_n, stream=False, timeout=200,
                      args={"ops": ["all_reduce"], "sizes": (1 << 20, 4 << 20), "iters": 5, "matmul": (128,), "checkpoint_mb": 0.0})
t = {r["bytes"]: r["time_s"] for r in q1.results[0]["rows"] if r["op"] == "all_reduce"}
measured = t[4 << 20] / t[1 << 20]
reveal("13.q1", my_prediction, measured, rel_tol=0.3,  # 30 %: a timed run on shared cores is noisy
       explain=f"{t[1 << 20] * 1e3:.2f} ms, then {t[4 << 20] * 1e3:.2f} ms on {q1_n} ranks: "
       + ("near 4 the bytes dominate, near 1 the latency α does." if measured <= 4 else
          "above 4, so more than α and B grew with the size (caches, other load)."))

# %% [markdown] id="md-13-19" tags=["question"]
# **Question 13.2.** α = 20 µs and a bus bandwidth of 100 GB/s, 8 ranks: at what message size does an all-reduce spend as long on latency as on moving bytes? What does that say about DDP's 25 MiB buckets?

# %%
answer("13.q2")

# %% [markdown] id="md-13-20" tags=["question"]
# **Question 13.3.** A checkpoint costs δ = 60 s and the job fails every M = 3 hours on average. Which checkpoint interval does Young/Daly give, and what fraction of the time is lost to saving and rework?

# %%
answer("13.q3")

# %%
disttutor.course.chapters.glossary(13)
