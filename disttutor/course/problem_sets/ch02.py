"""Chapter 2's worked problems: naive, tree and ring all-reduce, reduce-scatter and all-gather on real links.

Every time is the chapter's α–B model (α: latency of one message, s; B: bandwidth, bytes/s; n ranks;
S bytes per rank): a message of b bytes takes α + b/B, and each rank sends one message while it
receives another. Hardware figures come from :mod:`disttutor.links.presets` and
:mod:`disttutor.scale.hardware`, with their tags and sources. The last problem takes the learner's own
α and B, fitted by the chapter's sweep.
"""
from __future__ import annotations

from disttutor.course.problems import Problem, register
from disttutor.links.presets import PRESETS
from disttutor.scale.hardware import NIC_400G

NVLINK, IB, TENGBE = PRESETS["NVLink"], PRESETS["IB100"], PRESETS["10GbE"]
GIB, MIB = 1 << 30, 1 << 20


def _rounds(n: int) -> int:
    """⌈log₂ n⌉: the binomial tree's depth."""
    return (n - 1).bit_length()


def _ring(n: int, alpha: float, nbytes: float, bandwidth: float) -> float:
    """Ring all-reduce: 2(n-1) steps of S/n, every rank sending while it receives."""
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bandwidth


def _p1() -> dict:
    n, params = 8, 7e9
    a, b = NVLINK.alpha.value, NVLINK.beta.value
    s = 2 * params                                   # bf16: 2 bytes a gradient
    lat, bw = 2 * (n - 1) * a, 2 * (n - 1) / n * s / b
    return {"n": n, "params_b": params / 1e9, "alpha_us": a * 1e6, "gb_s": b / 1e9, "s_gb": s / 1e9,
            "steps": 2 * (n - 1), "factor": 2 * (n - 1) / n, "lat_ms": lat * 1e3, "bw_ms": bw * 1e3,
            "t_ms": (lat + bw) * 1e3, "share": bw / (lat + bw)}


def _p2() -> dict:
    n, s = 16, GIB
    a, b = IB.alpha.value, IB.beta.value
    naive = 2 * (n - 1) * (a + s / b)
    ring = _ring(n, a, s, b)
    return {"n": n, "alpha_us": a * 1e6, "gb_s": b / 1e9, "s_ms": s / b * 1e3, "steps": 2 * (n - 1),
            "factor": 2 * (n - 1) / n, "naive_s": naive, "ring_ms": ring * 1e3, "ratio": naive / ring}


def _p3() -> dict:
    n = 64
    a, b = TENGBE.alpha.value, TENGBE.beta.value
    r = _rounds(n)
    star = a * b * (n - 1 - r) / (r - (n - 1) / n)
    return {"n": n, "r": r, "alpha_us": a * 1e6, "gb_s": b / 1e9, "ab_kb": a * b / 1e3, "num": n - 1 - r,
            "den": r - (n - 1) / n, "star_kb": star / 1e3,
            "extra": 2 * (n - 1) - 2 * r, "tree_ms": 2 * r * (a + star / b) * 1e3}


def _p4() -> dict:
    n, params, per_node = 64, 70e9, 8
    a, b = IB.alpha.value, NIC_400G.value
    s = 2 * params
    lat, bw = (n - 1) * a, (n - 1) / n * s / b
    return {"n": n, "nodes": n // per_node, "params_b": params / 1e9, "s_gb": s / 1e9, "alpha_us": a * 1e6,
            "gb_s": b / 1e9, "factor": (n - 1) / n, "steps": n - 1, "lat_ms": lat * 1e3, "bw_s": bw,
            "t_s": lat + bw, "ar_s": 2 * (lat + bw)}


def _p5(alpha: float, bandwidth: float) -> dict:
    n, s = 8, 16 * MIB
    am = alpha / 2                                   # on 2 ranks the ring sends 2 messages one after another
    lat, bw = 2 * (n - 1) * am, 2 * (n - 1) / n * s / bandwidth
    return {"alpha_ms": alpha * 1e3, "gb_s": bandwidth / 1e9, "n": n, "mib": s // MIB, "s_mb": s / 1e6,
            "am_ms": am * 1e3, "steps": 2 * (n - 1), "factor": 2 * (n - 1) / n, "lat_ms": lat * 1e3,
            "bw_ms": bw * 1e3, "t_ms": (lat + bw) * 1e3}


register(
    Problem(
        "2.p1",
        "One node of {n} H100s trains with data parallelism. Each step ring-all-reduces the bf16 gradients "
        "(2 bytes each) of a {params_b:g}B-parameter model over NVLink 4 ($\\alpha$ = {alpha_us:g} µs a step, "
        "$B$ = {gb_s:g} GB/s one way). How long does the all-reduce take, in ms?",
        "* $S$ = {params_b:g}e9 × 2 bytes = {s_gb:g} GB per rank.\n"
        "* Ring: $2(n-1)$ = {steps} steps, each sending $S/n$: "
        "$T = 2(n-1)\\alpha + \\frac{{2(n-1)}}{{n}} \\cdot \\frac{{S}}{{B}}$.\n"
        "* Latency: {steps} × {alpha_us:g} µs = {lat_ms:.3g} ms; bandwidth: {factor:g} × {s_gb:g} GB / "
        "{gb_s:g} GB/s = {bw_ms:.3g} ms.\n"
        "* $T$ ≈ **{t_ms:.3g} ms**; the bandwidth term is {share:.1%} of it.",
        _p1, answer="t_ms", unit="ms",
        # two-digit rounding moves it a few %; dropping (n-1)/n (8/7: 14 % high) is the mistake to catch
        rel_tol=0.1, constants=(NVLINK.alpha, NVLINK.beta)),
    Problem(
        "2.p2",
        "{n} nodes, one 100 Gb/s InfiniBand EDR port each ($\\alpha$ = {alpha_us:g} µs a message, $B$ = "
        "{gb_s:g} GB/s), all-reduce a 1 GiB tensor. How many times longer does the naive all-reduce "
        "(everything to rank 0, then the sum back) take than the ring?",
        "* $S/B$ = 1 GiB / {gb_s:g} GB/s = {s_ms:.3g} ms.\n"
        "* Naive: rank 0 receives $n-1$ tensors, then sends $n-1$: "
        "$2(n-1)(\\alpha + S/B)$ = {steps} × ({alpha_us:g} µs + {s_ms:.3g} ms) = {naive_s:.3g} s.\n"
        "* Ring: {steps} × {alpha_us:g} µs + {factor:g} × {s_ms:.3g} ms = {ring_ms:.3g} ms.\n"
        "* Ratio **{ratio:.3g}**: close to $n$ = {n}, because the bytes dominate and the ring sends "
        "$2(n-1)/n$ tensors where rank 0 sends and receives $n-1$ each.",
        _p2, answer="ratio", unit="times",
        # the ratio is within 0.3 % of n = 16; 5 % still rejects n - 1 = 15 (a 6 % slip)
        rel_tol=0.05, constants=(IB.alpha, IB.beta)),
    Problem(
        "2.p3",
        "{n} ranks on 10 GbE ($\\alpha$ = {alpha_us:g} µs a message, $B$ = {gb_s:g} GB/s). Below what "
        "message size does the tree all-reduce beat the ring? Answer in KB (1 KB = 1000 bytes).",
        "* Tree: $T = 2\\lceil\\log_2 n\\rceil(\\alpha + S/B)$ with $\\lceil\\log_2 n\\rceil$ = {r}; ring: "
        "$T = 2(n-1)\\alpha + \\frac{{2(n-1)}}{{n}} \\cdot \\frac{{S}}{{B}}$.\n"
        "* Equal when $S^* = \\alpha B \\cdot \\frac{{n-1-\\lceil\\log_2 n\\rceil}}"
        "{{\\lceil\\log_2 n\\rceil - (n-1)/n}}$.\n"
        "* $\\alpha B$ = {ab_kb:.3g} KB; the fraction is {num} / {den:.4g}.\n"
        "* $S^*$ ≈ **{star_kb:.3g} KB**: there both take {tree_ms:.3g} ms; below it the ring's "
        "{extra} extra latencies cost more than the tree's extra bytes.",
        _p3, answer="star_kb", unit="KB",
        # rounding αB and the fraction to two digits stays within 5 %
        rel_tol=0.1, constants=(TENGBE.alpha, TENGBE.beta)),
    Problem(
        "2.p4",
        "FSDP shards a {params_b:g}B-parameter model over {n} H100s on {nodes} nodes; each GPU has its own "
        "400 Gb/s NIC ($B$ = {gb_s:g} GB/s), and a network step costs $\\alpha$ = {alpha_us:g} µs. During "
        "the forward pass every GPU all-gathers the full bf16 weights, layer by layer. Counted as one ring "
        "all-gather bounded by the NIC, how long does it take, in seconds?",
        "* $S$ = {params_b:g}e9 × 2 bytes = {s_gb:g} GB: the full tensor each GPU ends with.\n"
        "* All-gather is the ring's second half: $n-1$ = {steps} steps of $S/n$, "
        "$T = (n-1)\\alpha + \\frac{{n-1}}{{n}} \\cdot \\frac{{S}}{{B}}$.\n"
        "* Latency {lat_ms:.3g} ms; bandwidth {factor:.4g} × {s_gb:g} GB / {gb_s:g} GB/s = {bw_s:.3g} s.\n"
        "* $T$ ≈ **{t_s:.3g} s**. The gradients' reduce-scatter costs as much again: {ar_s:.3g} s "
        "together, the same as one all-reduce; FULL_SHARD gathers the weights again in backward, so a step "
        "moves 1.5 times what DDP's all-reduce does.",
        _p4, answer="t_s", unit="s",
        # the answer is nearly S/B: rounding moves it a few %; mistaking it for an all-reduce (2x) must fail
        rel_tol=0.1, constants=(NIC_400G, IB.alpha)),
    Problem(
        "2.p5",
        "Your sweep fitted the course's ring all-reduce on 2 ranks as $t = \\alpha + S/B$ per call, with "
        "$\\alpha$ = {alpha_ms:.3g} ms and $B$ = {gb_s:.3g} GB/s. Predict one {mib} MiB ring all-reduce on "
        "{n} ranks, each with a link like yours, in ms.",
        "* On 2 ranks the ring is 2 steps, each sending $S/2$: $t = 2\\alpha_m + S/B$. So your $\\alpha$ is "
        "two messages' latency: one message's is $\\alpha_m$ = {am_ms:.3g} ms; your $B$ is the link's.\n"
        "* On $n$ = {n}: $T = 2(n-1)\\alpha_m + \\frac{{2(n-1)}}{{n}} \\cdot \\frac{{S}}{{B}}$ = "
        "{steps} × {am_ms:.3g} ms + {factor:g} × {s_mb:.3g} MB / {gb_s:.3g} GB/s.\n"
        "* $T$ = {lat_ms:.3g} ms + {bw_ms:.3g} ms ≈ **{t_ms:.3g} ms**: a prediction for a link per rank, "
        "not for {n} ranks sharing this machine's cores.",
        _p5, answer="t_ms", unit="ms",
        # α and B are printed to 3 digits (0.5 %): 10 % is ample for pen-and-paper rounding
        rel_tol=0.1, run=("alpha", "bandwidth"), example={"alpha": 3.16e-3, "bandwidth": 0.25e9}),
)
