"""Chapter 7's worked problems: the bubble in seconds, activations in bytes, the send between stages.

The rules are the chapter's derivations: a step of GPipe or 1F1B idles (p-1)(t_f + t_b) per rank
(interleaved: divided by v); GPipe holds m micro-batches' activations on every rank, 1F1B at most
p - r on rank r, interleaved ((v-1)p + 2(p-1-r) + 1)/v. Compute from 2 FLOPs per weight per token
forward and twice that backward. Hardware figures come with their tags and sources; the fourth
problem takes the learner's own measured activation bytes.
"""
from __future__ import annotations

from disttutor.course.problems import Problem, register
from disttutor.scale.hardware import H100, HOPPER_PEAK, NIC_400G, NVLINK4

KIB = 1024
H100_MEMORY = H100.memory_bytes


def _p1() -> dict:
    # Activations a layer keeps for backward, in bf16: k tensors of b x s x d (a stated assumption).
    b, s, d, k, layers, p = 1, 4096, 4096, 16, 8, 4
    a = k * layers * b * s * d * 2
    mem = H100_MEMORY.value
    m = int(mem // a)
    return {"b": b, "s": s, "d": d, "k": k, "layers": layers, "p": p, "a_gb": a / 1e9, "mem_gb": mem / 1e9,
            "m_max": mem / a, "m_floor": m, "bubble": (p - 1) / (m + p - 1), "one_gb": p * a / 1e9}


def _p2() -> dict:
    params, p, m, tokens, mfu = 7e9, 4, 16, 4 * 4096, 0.4
    rate = mfu * HOPPER_PEAK.value
    t_f = 2 * params / p * tokens / rate
    t_b = 2 * t_f
    idle = (p - 1) * (t_f + t_b)
    step = (m + p - 1) * (t_f + t_b)
    return {"params_b": params / 1e9, "p": p, "m": m, "tokens": tokens, "mfu_pct": 100 * mfu,
            "peak_tf": HOPPER_PEAK.value / 1e12, "stage_b": params / p / 1e9, "t_f": t_f, "t_b": t_b,
            "idle_s": idle, "step_s": step, "share": idle / step}


def _p3() -> dict:
    b, s, d = 4, 4096, 8192
    nbytes = b * s * d * 2
    nic = nbytes / NIC_400G.value
    nv = nbytes / NVLINK4.value
    return {"b": b, "s": s, "d": d, "mb": nbytes / 1e6, "nic_gb_s": NIC_400G.value / 1e9,
            "nv_gb_s": NVLINK4.value / 1e9, "nic_ms": nic * 1e3, "nv_ms": nv * 1e3, "ratio": nic / nv,
            "t_f": _p2()["t_f"]}


def _p4(gpipe_bytes: int, m: int, p: int) -> dict:
    if m < 1 or p < 2 or gpipe_bytes <= 0:
        raise ValueError(f"needs a pipeline run: m >= 1, p >= 2 and measured bytes, got m={m}, p={p}, {gpipe_bytes}")
    a = gpipe_bytes / m
    held = min(4 * m, p)
    return {"gpipe_kib": gpipe_bytes / KIB, "m": m, "p": p, "m4": 4 * m, "a_kib": a / KIB,
            "gpipe4_kib": 4 * m * a / KIB, "held": held, "one_kib": held * a / KIB}


def _p5() -> dict:
    p, v, m = 8, 4, 32
    warm = (v - 1) * p + 2 * (p - 1)
    peak = min(warm + 1, v * m) / v
    return {"p": p, "v": v, "m": m, "warm": warm, "chunks": warm + 1, "peak": peak, "one": min(m, p),
            "bubble": (p - 1) / (v * m + p - 1), "bubble_1f1b": (p - 1) / (m + p - 1)}


register(
    Problem(
        "7.p1",
        "A pipeline of p = {p} stages, {layers} Transformer layers a stage; a micro-batch is {b} sequence of "
        "{s} tokens, width {d}, in bf16, and each layer keeps {k} tensors of that size for backward. An H100 "
        "has {mem_gb:g} GB. Counting activations only, how many micro-batches can GPipe run per step?",
        "* One micro-batch on one stage: {k} × {layers} × {b} × {s} × {d} × 2 bytes = {a_gb:.3g} GB.\n"
        "* GPipe keeps all m: $m \\cdot {a_gb:.3g}$ GB ≤ {mem_gb:g} GB, so $m$ ≤ {m_max:.3g}: **{m_floor}**, "
        "a bubble of {bubble:.2g} at best.\n"
        "* 1F1B keeps at most p = {p} on rank 0 ({one_gb:.3g} GB) whatever m is: that is why it is preferred.",
        _p1, answer="m_floor", unit="micro-batches",
        # a count: 10 % still rejects 2x, 1/2x and the 1F1B answer (p = 4)
        rel_tol=0.1, constants=(H100_MEMORY,)),
    Problem(
        "7.p2",
        "A {params_b:g}B-parameter model on p = {p} H100s, one stage each, at {mfu_pct:g} % of the "
        "{peak_tf:g} TFLOP/s bf16 peak; m = {m} micro-batches of {tokens} tokens, 1F1B. A forward costs 2 FLOPs "
        "per weight per token, a backward twice that. How many seconds does each rank idle per step?",
        "* A stage holds {stage_b:g}B weights: $t_f$ = 2 × {stage_b:g}e9 × {tokens} / ({mfu_pct:g} % × "
        "{peak_tf:g} TFLOP/s) = {t_f:.3g} s, $t_b = 2t_f$ = {t_b:.3g} s.\n"
        "* Idle per rank: $(p-1)(t_f+t_b)$ = ({p} − 1) × ({t_f:.3g} + {t_b:.3g}) s = **{idle_s:.3g} s**.\n"
        "* Of a step of $(m+p-1)(t_f+t_b)$ = {step_s:.3g} s: {share:.3g}, the formula's $(p-1)/(m+p-1)$.",
        _p2, answer="idle_s", unit="s",
        # two-digit rounding stays within a few %; forgetting the backward (1/3) or counting p idle slots
        # instead of p - 1 (4/3) must fail
        rel_tol=0.2, constants=(HOPPER_PEAK,)),
    Problem(
        "7.p3",
        "Between two pipeline stages, each micro-batch's activation crosses once: {b} sequences × {s} tokens × "
        "width {d} in bf16. How many milliseconds does one send take over a 400 Gb/s NIC "
        "($B$ = {nic_gb_s:g} GB/s), ignoring latency?",
        "* $S$ = {b} × {s} × {d} × 2 bytes = {mb:.4g} MB.\n"
        "* $t = S/B$ = {mb:.4g} MB / {nic_gb_s:g} GB/s = **{nic_ms:.3g} ms**; over NVLink 4 "
        "({nv_gb_s:g} GB/s) {nv_ms:.3g} ms, {ratio:.3g} times less.\n"
        "* Problem 7.p2's forward slot lasts {t_f:.3g} s: on GPUs a send is short against a slot. On this "
        "chapter's CPUs slots are short, and the gaps between them count.",
        _p3, answer="nic_ms", unit="ms",
        # 10 %: rounding only; bits for bytes (8x) and NVLink's B (9x) must fail
        rel_tol=0.1, constants=(NIC_400G, NVLINK4)),
    Problem(
        "7.p4",
        "Your GPipe run held {gpipe_kib:g} KiB of activations on rank 0 at its peak, with m = {m} micro-batches "
        "on p = {p} ranks. With {m4} micro-batches of the same size, how many KiB would **1F1B** hold on rank 0?",
        "* GPipe keeps all m: one micro-batch is {gpipe_kib:g} / {m} = {a_kib:g} KiB.\n"
        "* 1F1B's rank 0 keeps $\\min(m, p)$ = {held} of them, whatever m: **{one_kib:g} KiB**.\n"
        "* GPipe with {m4} micro-batches would keep {gpipe4_kib:g} KiB.",
        _p4, answer="one_kib", unit="KiB",
        # exact arithmetic on measured bytes: 10 % rejects 2x, 1/2x and GPipe's m/p times more
        rel_tol=0.1, run=("gpipe_bytes", "m", "p"), example={"gpipe_bytes": 393216, "m": 8, "p": 4}),
    Problem(
        "7.p5",
        "Interleaved 1F1B on p = {p} ranks, v = {v} stages per rank, m = {m} micro-batches. Rank 0 runs "
        "$(v-1)p + 2(p-1)$ forwards before its first backward, each of one stage, 1/v of its layers. At its "
        "peak, how many micro-batches' worth of activations does rank 0 hold?",
        "* Warm-up: ({v} − 1) × {p} + 2 × ({p} − 1) = {warm} forwards; one more runs before the first backward: "
        "{chunks} chunks held.\n"
        "* A chunk is 1/v of a micro-batch's activations on the rank: {chunks} / {v} = **{peak:g}**.\n"
        "* 1F1B holds {one}; interleaving buys a bubble of {bubble:.3g} instead of {bubble_1f1b:.3g} with "
        "more memory.",
        _p5, answer="peak", unit="micro-batches",
        # exact: 5 % rejects 1F1B's p (18 % less) and the chunk count without the 1/v
        rel_tol=0.05, quantitative=True),
)
