"""Chapter 6's worked problems: splitting a model over devices -- memory, boundary bytes, idle stages.

The chapter's notation: p stages, m micro-batches, a stage boundary carries the activation forward and
its gradient back; a message of S bytes takes α + S/B (α latency in s, B bandwidth in bytes/s). Hardware
figures come from :mod:`disttutor.scale.hardware` and :mod:`disttutor.links.presets`, with their tags and
sources. The last problem takes the learner's own run (stages, batch, width, measured step time).
"""
from __future__ import annotations

import math
from fractions import Fraction

from disttutor.course.problems import Problem, register
from disttutor.links.presets import PRESETS
from disttutor.scale.hardware import H100, HOPPER_PEAK, NIC_400G, NVLINK4

TENGBE = PRESETS["10GbE"]
# The model of problems 6.p1 and 6.p2: a 70B-parameter transformer, hidden size 8,192, 80 layers, cut
# into 8 stages of 10 layers; one micro-batch is one sequence of 8,192 tokens, bf16 (2 bytes a number).
PARAMS, HIDDEN, LAYERS, STAGES, TOKENS, BF16 = 70e9, 8192, 80, 8, 8192, 2


def _p1() -> dict:
    s = TOKENS * HIDDEN * BF16                      # one activation: tokens x hidden numbers
    t_nic, t_nvl = s / NIC_400G.value, s / NVLINK4.value
    return {"params_b": PARAMS / 1e9, "hidden": f"{HIDDEN:,}", "tokens": f"{TOKENS:,}", "s_mb": s / 1e6,
            "gb_s": NIC_400G.value / 1e9, "nvl_gb_s": NVLINK4.value / 1e9, "t_ms": t_nic * 1e3,
            "nvl_ms": t_nvl * 1e3}


def _p2() -> dict:
    flops = 2 * PARAMS / STAGES * TOKENS            # forward: 2 FLOPs per parameter per token
    t_comp = flops / HOPPER_PEAK.value
    t_send = TOKENS * HIDDEN * BF16 / NIC_400G.value
    return {"params_b": PARAMS / 1e9, "stages": STAGES, "layers": LAYERS // STAGES, "tokens": f"{TOKENS:,}",
            "tflop": flops / 1e12, "tflops": HOPPER_PEAK.value / 1e12, "comp_ms": t_comp * 1e3,
            "send_ms": t_send * 1e3, "ratio": t_comp / t_send, "at40": t_comp / 0.4 / t_send}  # 40 %: 2.5x as long


def _p3() -> dict:
    per_param = 16                                  # bf16 weight 2 + bf16 grad 2 + fp32 master 4 + Adam m, v 4 + 4
    total = PARAMS * per_param
    mem = H100.memory_bytes.value
    return {"params_b": PARAMS / 1e9, "per_param": per_param, "total_tb": total / 1e12, "gb": mem / 1e9,
            "ratio": total / mem, "gpus": math.ceil(total / mem - 1e-9)}  # 1e-9: a float ratio of 14 stays 14


def _p4() -> dict:
    p, target = 8, Fraction(9, 10)                  # exact: 0.9 in floats puts m a hair above 63
    m = math.ceil(target * (p - 1) / (1 - target))  # m / (m + p - 1) >= u  <=>  m >= u (p - 1) / (1 - u)
    return {"p": p, "pct": f"{float(target):.0%}", "u": float(target), "m": m, "got": m / (m + p - 1), "naive": 1 / p,
            "m_less": m - 1, "got_less": (m - 1) / (m - 1 + p - 1)}


def _p5(stages: int, batch: int, width: int, step_s: float) -> dict:
    s = batch * width * 4                           # one float32 activation (or its gradient)
    a, b = TENGBE.alpha.value, TENGBE.beta.value
    msgs = 2 * (stages - 1)
    t = msgs * (a + s / b)
    return {"stages": stages, "batch": batch, "width": width, "s_bytes": f"{s:,}", "msgs": msgs,
            "alpha_us": a * 1e6, "gb_s": b / 1e9, "msg_ms": (a + s / b) * 1e3, "t_ms": t * 1e3,
            "step_ms": step_s * 1e3, "share": t / step_s}


register(
    Problem(
        "6.p1",
        "A {params_b:.0f}B-parameter transformer (hidden size {hidden}) is split into pipeline stages on "
        "different nodes. One micro-batch is a sequence of {tokens} tokens in bf16. How many **milliseconds** "
        "does its activation take to cross one stage boundary over a 400 Gb/s NIC (bandwidth term only)?",
        "* The activation is tokens × hidden numbers of 2 bytes: $S$ = {s_mb:.0f} MB.\n"
        "* Over the NIC, $S/B$ = {s_mb:.0f} MB / {gb_s:.0f} GB/s = **{t_ms:.2f} ms**; its gradient "
        "comes back in as long.\n"
        "* Inside a node, NVLink 4 ({nvl_gb_s:.0f} GB/s one way) would take {nvl_ms:.2f} ms.",
        _p1, answer="t_ms", unit="ms",
        rel_tol=0.15,  # 15 %: rounding S to 134 MB or B to 50 GB/s; a wrong byte count (fp32: 2x) fails
        constants=(NIC_400G, NVLINK4),
    ),
    Problem(
        "6.p2",
        "The same {params_b:.0f}B model in {stages} stages of {layers} layers, one H100 each. A forward costs "
        "about 2 FLOPs per parameter per token. At the dense bf16 peak, how many **milliseconds** does one "
        "stage's forward of the {tokens}-token micro-batch take?",
        "* One stage holds $P/p$ parameters: $2 \\cdot (P/p) \\cdot$ tokens = {tflop:.0f} TFLOP.\n"
        "* At {tflops:.0f} TFLOP/s that is **{comp_ms:.0f} ms**: {ratio:.0f} times 6.p1's send of "
        "{send_ms:.2f} ms, and {at40:.0f} times at 40 % of peak.\n"
        "* A pipeline's cost is its idle stages, not the bytes between them.",
        _p2, answer="comp_ms", unit="ms",
        rel_tol=0.2,  # 20 %: rounding the FLOPs and the rate; forgetting the factor 2 (or 1/p) fails
        constants=(HOPPER_PEAK,),
    ),
    Problem(
        "6.p3",
        "Training the {params_b:.0f}B model with Adam in mixed precision keeps {per_param} bytes per parameter "
        "(bf16 weight and gradient, fp32 master weight and two moments). Ignoring activations, over at least "
        "how many **80 GB H100s** must the model be split?",
        "* States: {params_b:.0f}e9 × {per_param} B = {total_tb:.2f} TB.\n"
        "* {total_tb:.2f} TB / {gb:.0f} GB = {ratio:.2f}, so at least **{gpus}** GPUs (stages); activations "
        "need more.",
        _p3, answer="gpus", unit="GPUs",
        rel_tol=0.1,  # 10 %: the count is an integer; rounding down to 13 passes, the weights alone (2) fail
        constants=(H100.memory_bytes,),
    ),
    Problem(
        "6.p4",
        "A pipeline of {p} equal stages (GPipe: all forwards, then all backwards). At least how many **micro-batches** "
        "keep each stage busy at least {pct} of the step?",
        "* Busy share $u = m/(m+p-1)$; $u \\ge$ {u} gives $m \\ge u(p-1)/(1-u)$ = **{m}**.\n"
        "* With {m}: {got:.3f}; with {m_less}: {got_less:.3f}. Without micro-batches: $1/p$ = {naive:.3f}.",
        _p4, answer="m", unit="micro-batches",
        rel_tol=0.1,  # 10 %: off by one or two in the rounding passes; m = p - 1 or 10 (p - 1) fails
    ),
    Problem(
        "6.p5",
        "Your run: {stages} stages, an activation of {batch} × {width} float32 numbers crossing each boundary, "
        "a measured step of {step_ms:.1f} ms. If the stages sat on machines joined by 10 GbE "
        "($\\alpha$ = {alpha_us:.0f} µs, $B$ = {gb_s:.2f} GB/s), how many **ms** would the boundary "
        "messages add per step?",
        "* Each boundary: the activation forward and its gradient back, {msgs} messages in all, "
        "each of {s_bytes} bytes.\n"
        "* One message: $\\alpha + S/B$ = {msg_ms:.3f} ms; all: **{t_ms:.2f} ms**.\n"
        "* That is {share:.0%} of your step: no stage computes while they travel.",
        _p5, answer="t_ms", unit="ms",
        rel_tol=0.15,  # 15 %: rounding α and S/B; one direction only (0.5x) or bits for bytes (8x) fail
        run=("stages", "batch", "width", "step_s"),
        constants=(TENGBE.alpha, TENGBE.beta),
        example={"stages": 2, "batch": 256, "width": 256, "step_s": 0.007},
    ),
)
