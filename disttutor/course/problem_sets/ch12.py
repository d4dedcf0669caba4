"""Chapter 12's worked problems: what tensor, sequence and context parallelism cost on real links.

The chapter's letters: ``s`` tokens a sequence, ``b`` sequences, ``d`` the model width, ``h`` the
feed-forward width (``4d`` in these problems), ``t`` tensor-parallel ranks (``n`` for ring attention),
``e`` bytes a number; α latency (s), B bandwidth (bytes/s), F a GPU's peak FLOP/s. A ring all-reduce
of S bytes: 2(t-1)α + 2(t-1)/t · S/B. Hardware figures from :mod:`disttutor.scale.hardware` and
:mod:`disttutor.links.presets`, with tags and sources; problem 12.p4 takes the learner's own run.
"""
from __future__ import annotations

from disttutor.course.problems import Problem, register
from disttutor.links.presets import PRESETS
from disttutor.scale.hardware import HOPPER_PEAK, NIC_400G

NVLINK = PRESETS["NVLink"]
LLAMA3_405B_D = 16384   # model dimension of Llama 3 405B (Llama 3 paper, "The Llama 3 Herd of Models", Table 3)


def _ratio(t: int, e: int, f: float, d: int, b: float) -> float:
    """Per layer forward: 2 all-reduces of s*b*d*e bytes against 24*s*b*d^2/t FLOPs (h = 4d)."""
    return (t - 1) * e * f / (6 * d * b)


def _p1() -> dict:
    s, b, d, t, e = 8192, 1, 8192, 8, 2
    a, bw = NVLINK.alpha.value, NVLINK.beta.value
    size = s * b * d * e
    one = 2 * (t - 1) * a + 2 * (t - 1) / t * size / bw
    return {"s": s, "b": b, "d": d, "t": t, "alpha_us": a * 1e6, "gb_s": bw / 1e9, "mb": size / 1e6,
            "steps": 2 * (t - 1), "factor": 2 * (t - 1) / t, "lat_us": 2 * (t - 1) * a * 1e6,
            "bw_ms": 2 * (t - 1) / t * size / bw * 1e3, "one_ms": one * 1e3, "layer_ms": 2 * one * 1e3}


def _p2() -> dict:
    d, t, e = 8192, 8, 2
    f, bw = HOPPER_PEAK.value, NVLINK.beta.value
    return {"d": d, "t": t, "e": e, "tflops": f / 1e12, "gb_s": bw / 1e9, "ratio": _ratio(t, e, f, d, bw)}


def _p3() -> dict:
    t, e = 16, 2
    f, bw = HOPPER_PEAK.value, NIC_400G.value
    d_star = (t - 1) * e * f / (6 * bw)
    return {"t": t, "e": e, "tflops": f / 1e12, "gb_s": bw / 1e9, "d_star": d_star, "llama_d": LLAMA3_405B_D,
            "llama_x": d_star / LLAMA3_405B_D,
            "nvl_d": (8 - 1) * e * f / (6 * NVLINK.beta.value)}


def _p4(seq: int, batch: int, dim: int, t: int) -> dict:
    n = seq * batch * dim
    tt = 8 if t == 4 else 4  # a degree the run did not use: its printed bytes are the check, not the answer
    one = 2 * (tt - 1) / tt * n * 4
    return {"s": seq, "b": batch, "d": dim, "t": t, "tt": tt, "numbers": n, "bytes": n * 4,
            "factor": 2 * (tt - 1) / tt, "one": one, "block": 2 * one, "run_block": 2 * 2 * (t - 1) / t * n * 4}


def _p5() -> dict:
    e = 2
    f, bw = HOPPER_PEAK.value, NIC_400G.value
    return {"e": e, "tflops": f / 1e12, "gb_s": bw / 1e9, "tokens": e * f / (2 * bw),
            "nvl_tokens": e * f / (2 * NVLINK.beta.value), "nvl_gb_s": NVLINK.beta.value / 1e9}


register(
    Problem(
        "12.p1",
        "Tensor parallelism over {t} H100s on NVLink 4 ($\\alpha$ = {alpha_us:g} µs a ring step, $B$ = "
        "{gb_s:g} GB/s one way): one transformer layer, $b$ = {b} sequence of $s$ = {s} tokens, $d$ = {d}, "
        "bf16 activations. Its forward all-reduces the attention output and the MLP output. How long do "
        "the two all-reduces take together, in ms?",
        "* One all-reduce of $[sb, d]$ in bf16: $S$ = {s} × {b} × {d} × 2 bytes = {mb:.4g} MB.\n"
        "* Ring: {steps} × {alpha_us:g} µs = {lat_us:.3g} µs of latency, $\\frac{{2(t-1)}}{{t}}\\cdot\\frac{{S}}{{B}}$ = "
        "{factor:g} × {mb:.4g} MB / {gb_s:g} GB/s = {bw_ms:.3g} ms: {one_ms:.3g} ms each.\n"
        "* Two per layer forward: **{layer_ms:.3g} ms**, and two more in backward.",
        _p1, answer="layer_ms", unit="ms",
        # two-digit rounding moves it a few %; one all-reduce instead of two (0.5x) must fail
        rel_tol=0.1, constants=(NVLINK.alpha, NVLINK.beta)),
    Problem(
        "12.p2",
        "Same layer, $t$ = {t}, $d$ = {d}, $h = 4d$, bf16 ($e$ = {e} bytes), H100s at {tflops:g} TFLOP/s "
        "on NVLink 4 ($B$ = {gb_s:g} GB/s). Ignoring α and the attention scores, what is the forward's "
        "communication time divided by its compute time, per rank?",
        "* Compute: $2sb(4d^2 + 2dh) = 24\\,sbd^2$ FLOPs, split over $t$: $\\frac{{24\\,sbd^2}}{{tF}}$.\n"
        "* Communication: 2 all-reduces of $sbd\\,e$ bytes: $4\\frac{{t-1}}{{t}}\\cdot\\frac{{sbd\\,e}}{{B}}$.\n"
        "* Ratio $\\frac{{(t-1)\\,e\\,F}}{{6\\,d\\,B}}$, whatever $s$ and $b$: "
        "({t} − 1) × {e} × {tflops:g}e12 / (6 × {d} × {gb_s:g}e9) = **{ratio:.3g}**.\n"
        "* Unless it overlaps compute, communication adds {ratio:.0%} to the layer's time.",
        _p2, answer="ratio", unit="",
        # 10 % for rounding; forgetting the ring's factor 2 (0.5x) or the two all-reduces (0.5x) must fail
        rel_tol=0.1, constants=(HOPPER_PEAK, NVLINK.beta)),
    Problem(
        "12.p3",
        "Now stretch tensor parallelism over $t$ = {t} H100s on two nodes, where the ring crosses each GPU's "
        "400 Gb/s NIC ($B$ = {gb_s:g} GB/s). At {tflops:g} TFLOP/s and $e$ = {e}, above what model width "
        "$d$ does the layer's compute time exceed its all-reduce time?",
        "* Equal when $\\frac{{(t-1)\\,e\\,F}}{{6\\,d\\,B}} = 1$: $d^* = \\frac{{(t-1)\\,e\\,F}}{{6B}}$.\n"
        "* ({t} − 1) × {e} × {tflops:g}e12 / (6 × {gb_s:g}e9) = **{d_star:,.0f}**: {llama_x:.0f} times the width of "
        "the largest Llama 3 ($d$ = {llama_d:,}, Llama 3 paper, Table 3).\n"
        "* Inside a node, 8 GPUs on NVLink 4: $d^*$ = {nvl_d:,.0f}. Keep TP inside a node.",
        _p3, answer="d_star", unit="",
        # 10 % for rounding; t instead of t - 1 (7 %) passes, dropping e (0.5x) must fail
        rel_tol=0.1, constants=(HOPPER_PEAK, NIC_400G, NVLINK.beta)),
    Problem(
        "12.p4",
        "Your run's TP block: $s$ = {s} tokens, $b$ = {b}, $d$ = {d}, fp32 (4 bytes), on $t$ = {t} ranks; "
        "section 2 printed what each rank sent. By the ring formula, how many bytes would each rank send per "
        "block in one training step (forward and backward) with $t$ = **{tt}**?",
        "* One all-reduce of $[sb, d]$: $S$ = {numbers} numbers × 4 = {bytes} bytes; each rank sends "
        "$\\frac{{2(t-1)}}{{t}}S$ = {factor:g} × {bytes} = {one:.0f} bytes.\n"
        "* `g` forward and `f` backward: **{block:.0f} bytes**, whatever $h$ (on your {t} ranks the same "
        "formula gives {run_block:.0f}, the printed figure).",
        _p4, answer="block", unit="bytes",
        # exact arithmetic: 1 %; one all-reduce (0.5x), forgetting (t-1)/t, or the run's own t must fail
        rel_tol=0.01, run=("seq", "batch", "dim", "t"), example={"seq": 16, "batch": 2, "dim": 16, "t": 2}),
    Problem(
        "12.p5",
        "Ring attention over several nodes: each step sends a rank's bf16 keys and values ($e$ = {e}) over its "
        "400 Gb/s NIC ($B$ = {gb_s:g} GB/s) while it computes one block of $s/n$ queries against $s/n$ keys, "
        "at {tflops:g} TFLOP/s. How many tokens per rank, $s/n$, at least hide the send?",
        "* Send: keys and values, $2\\,b\\,\\frac{{s}}{{n}}\\,d\\,e$ bytes, in $\\frac{{2b(s/n)d\\,e}}{{B}}$.\n"
        "* Compute: scores and their product with the values, $4\\,b\\,(s/n)^2 d$ FLOPs.\n"
        "* Hidden when $\\frac{{s}}{{n}} \\ge \\frac{{e\\,F}}{{2B}}$ = {e} × {tflops:g}e12 / (2 × {gb_s:g}e9) = "
        "**{tokens:,.0f} tokens**, whatever $b$ and $d$; on NVLink 4 ({nvl_gb_s:g} GB/s), {nvl_tokens:,.0f}.",
        _p5, answer="tokens", unit="tokens",
        # 10 % for rounding; counting keys only (2x) or one matmul (2x) must fail
        rel_tol=0.1, constants=(HOPPER_PEAK, NIC_400G, NVLINK.beta)),
)
