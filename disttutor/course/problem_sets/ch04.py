"""Chapter 4's worked problems: when DDP's bucketed all-reduces hide under the backward, and what is left.

The chapter's α–B model (α: latency of one ring step, s; B: bandwidth, bytes/s; n ranks; S bytes per
rank): one bucket of ``S_b`` bytes takes ``t_b = 2(n-1) α + 2(n-1)/n · S_b / B``; it hides when the
backward still to come covers it; the last bucket (the first layers) is always exposed. Hardware
figures come from :mod:`disttutor.links.presets` and :mod:`disttutor.scale.hardware`, with their tags
and sources. The last problem takes the learner's own emulated-link run.
"""
from __future__ import annotations

from disttutor.course.problems import Problem, register
from disttutor.links.presets import PRESETS
from disttutor.scale.hardware import HOPPER_PEAK, NIC_400G

NVLINK, IB = PRESETS["NVLink"], PRESETS["IB100"]
MIB = 1 << 20


def _ring(n: int, alpha: float, nbytes: float, bandwidth: float) -> float:
    """Ring all-reduce: 2(n-1) steps of S/n, every rank sending while it receives."""
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bandwidth


def _p1() -> dict:
    n, nodes, cap = 16, 2, 25 * MIB
    a, b = IB.alpha.value, NIC_400G.value
    lat, bw = 2 * (n - 1) * a, 2 * (n - 1) / n * cap / b
    return {"n": n, "nodes": nodes, "alpha_us": a * 1e6, "gb_s": b / 1e9, "s_mb": cap / 1e6, "steps": 2 * (n - 1),
            "factor": 2 * (n - 1) / n, "lat_ms": lat * 1e3, "bw_ms": bw * 1e3, "t_ms": (lat + bw) * 1e3}


def _p2() -> dict:
    n, params, flops_per = 8, 1e9, 4          # backward: 4 FLOPs per parameter per token (twice the forward's 2)
    b, peak = NIC_400G.value, HOPPER_PEAK.value
    s = 2 * params                             # bf16 gradients
    comm = 2 * (n - 1) / n * s / b
    tokens = comm * peak / (flops_per * params)
    return {"n": n, "params_b": params / 1e9, "s_gb": s / 1e9, "gb_s": b / 1e9, "factor": 2 * (n - 1) / n,
            "comm_ms": comm * 1e3, "peak_t": peak / 1e12, "per_token_gflop": flops_per * params / 1e9,
            "tokens": tokens}


def _p3() -> dict:
    n, params, cap = 8, 7e9, 25 * MIB
    a, b = NVLINK.alpha.value, NVLINK.beta.value
    s = 2 * params
    last = _ring(n, a, cap, b)
    k = -(-int(s) // cap)                      # ceil: buckets of 25 MiB
    every = k * 2 * (n - 1) * a + 2 * (n - 1) / n * s / b
    return {"n": n, "params_b": params / 1e9, "s_gb": s / 1e9, "mib": cap // MIB, "s_mb": cap / 1e6,
            "alpha_us": a * 1e6, "gb_s": b / 1e9, "steps": 2 * (n - 1), "factor": 2 * (n - 1) / n,
            "lat_us": 2 * (n - 1) * a * 1e6, "bw_us": 2 * (n - 1) / n * cap / b * 1e6, "t_us": last * 1e6,
            "k": k, "every_ms": every * 1e3, "ratio": every / last}


def _p4(last_bytes: float, world: int, alpha: float, bandwidth: float, compute_s: float, overlap_s: float) -> dict:
    lat, bw = 2 * (world - 1) * alpha, 2 * (world - 1) / world * last_bytes / bandwidth
    t = lat + bw
    measured = overlap_s - compute_s
    return {"mib": last_bytes / MIB, "s_mb": last_bytes / 1e6, "n": world, "alpha_us": alpha * 1e6,
            "gb_s": bandwidth / 1e9, "steps": 2 * (world - 1), "factor": 2 * (world - 1) / world,
            "lat_ms": lat * 1e3, "bw_ms": bw * 1e3, "t_ms": t * 1e3, "ov_ms": overlap_s * 1e3,
            "c_ms": compute_s * 1e3, "measured_ms": measured * 1e3, "ratio": measured / t}


register(
    Problem(
        "4.p1",
        "DDP on {n} H100s in {nodes} nodes: a ring all-reduce across nodes is bounded by each GPU's 400 Gb/s NIC "
        "($B$ = {gb_s:g} GB/s), and each ring step costs $\\alpha$ = {alpha_us:g} µs. A full 25 MiB bucket of "
        "gradients is ready. How much backward must still be to come, in ms, for its all-reduce to hide "
        "(the link idle until then)?",
        "* It hides if the rest of the backward lasts at least the bucket's all-reduce, $t_b = 2(n-1)\\alpha + "
        "\\frac{{2(n-1)}}{{n}} \\cdot \\frac{{S_b}}{{B}}$, with $S_b$ = 25 MiB = {s_mb:.4g} MB.\n"
        "* Latency: {steps} × {alpha_us:g} µs = {lat_ms:.3g} ms; bandwidth: {factor:.4g} × {s_mb:.4g} MB / "
        "{gb_s:g} GB/s = {bw_ms:.3g} ms.\n"
        "* At least **{t_ms:.3g} ms** of backward still to come; with less, the link is still busy when the "
        "backward ends, and the step waits.",
        _p1, answer="t_ms", unit="ms",
        # two-digit rounding of each term stays within 5 %; dropping a term (-30 % or -70 %) fails
        rel_tol=0.1, constants=(IB.alpha, NIC_400G)),
    Problem(
        "4.p2",
        "A {params_b:g}B-parameter model trains with DDP on {n} nodes, one H100 each, its bf16 gradients "
        "all-reduced over 400 Gb/s NICs ($B$ = {gb_s:g} GB/s). The backward costs about 4 FLOPs per parameter "
        "per token. Running at the H100's dense bf16 peak, how many tokens per GPU per step must the backward "
        "process to last as long as the all-reduce (ignore α and the last bucket)?",
        "* All-reduce: $\\frac{{2(n-1)}}{{n}} \\cdot \\frac{{S}}{{B}}$ = {factor:.4g} × {s_gb:g} GB / "
        "{gb_s:g} GB/s = {comm_ms:.3g} ms.\n"
        "* Backward of $T$ tokens: $T$ × {per_token_gflop:g} GFLOP / {peak_t:g} TFLOP/s.\n"
        "* Equal at $T$ = {comm_ms:.3g} ms × {peak_t:g} TFLOP/s / {per_token_gflop:g} GFLOP ≈ **{tokens:,.0f} "
        "tokens** per GPU per step. Fewer, and the network, not the GPU, sets the step time; a real GPU runs "
        "below peak, so somewhat fewer tokens already hide it.",
        _p2, answer="tokens", unit="tokens",
        # rounding 7/4 and the peak to two digits stays within 5 %; dropping (n-1)/n (+14 %) fails
        rel_tol=0.1, constants=(NIC_400G, HOPPER_PEAK)),
    Problem(
        "4.p3",
        "{n} H100s on NVLink 4 ($\\alpha$ = {alpha_us:g} µs a step, $B$ = {gb_s:g} GB/s) train a "
        "{params_b:g}B-parameter model with DDP, bf16 gradients in {mib} MiB buckets. With perfect overlap "
        "only the last bucket's all-reduce is exposed. Assuming it is full, how long is that, in µs?",
        "* $t_b = 2(n-1)\\alpha + \\frac{{2(n-1)}}{{n}} \\cdot \\frac{{S_b}}{{B}}$ with $S_b$ = {s_mb:.4g} MB.\n"
        "* Latency {steps} × {alpha_us:g} µs = {lat_us:.3g} µs; bandwidth {factor:g} × {s_mb:.4g} MB / "
        "{gb_s:g} GB/s = {bw_us:.3g} µs.\n"
        "* Exposed: **{t_us:.3g} µs**. Without overlap the step would wait for all {k} buckets: "
        "{every_ms:.3g} ms, {ratio:.3g} times longer.",
        _p3, answer="t_us", unit="µs",
        # two-digit rounding of each term stays within 5 %; forgetting the latency (-32 %) fails
        rel_tol=0.1, constants=(NVLINK.alpha, NVLINK.beta)),
    Problem(
        "4.p4",
        "In your run, DDP's last bucket held {mib:.3g} MiB, on {n} ranks over the emulated link "
        "($\\alpha$ = {alpha_us:.3g} µs a step, $B$ = {gb_s:.4g} GB/s). With ideal overlap (every earlier "
        "bucket hidden under the backward), how long is the exposed tail of a step, in ms?",
        "* The last bucket holds the first layers: it is ready only when the backward ends, so its whole "
        "all-reduce is exposed.\n"
        "* $t = 2(n-1)\\alpha + \\frac{{2(n-1)}}{{n}} \\cdot \\frac{{S}}{{B}}$ = {lat_ms:.3g} ms + {factor:g} × "
        "{s_mb:.4g} MB / {gb_s:.4g} GB/s = **{t_ms:.3g} ms**.\n"
        "* Measured: step with overlap {ov_ms:.0f} ms − compute alone {c_ms:.0f} ms = {measured_ms:.0f} ms "
        "exposed, {ratio:.2g} times the ideal tail.",
        _p4, answer="t_ms", unit="ms",
        # the inputs are the run's own numbers, printed to 3 digits: 10 % is ample for rounding
        rel_tol=0.1, run=("last_bytes", "world", "alpha", "bandwidth", "compute_s", "overlap_s"),
        example={"last_bytes": 1050624, "world": 2, "alpha": 20e-6, "bandwidth": 125e6,
                 "compute_s": 0.128, "overlap_s": 0.153}),
)
