"""Chapter 11's worked problems: ZeRO's memory per rank, FSDP's bytes per step, and when prefetching hides them.

Model states follow chapter 1's calculator (mixed-precision AdamW: 2 + 2 + 12 = 16 bytes a parameter;
fp32 AdamW: 4 + 4 + 8). Communication is the chapter's ring model: n ranks, S bytes, an all-gather or
a reduce-scatter sends (n-1)/n · S per rank, an all-reduce 2(n-1)/n · S; a message costs α + bytes/B.
Hardware figures come from :mod:`disttutor.scale.hardware` and :mod:`disttutor.links.presets`, with
their tags and sources. Problem 11.p4 takes the learner's own run (its parameter bytes and ranks).
"""
from __future__ import annotations

import math

from disttutor.course.problems import Problem, register
from disttutor.links.presets import PRESETS
from disttutor.scale.hardware import A100_MEMORY, H100, HOPPER_PEAK, NIC_400G

NVLINK = PRESETS["NVLink"]
MIXED = {"weights": 2, "gradients": 2, "optimizer": 12}   # bf16 weights and gradients; fp32 master + 2 moments


def _p1() -> dict:
    params, free = 70e9, 0.2
    mem = H100.memory_bytes.value
    states = sum(MIXED.values()) * params
    usable = (1 - free) * mem
    return {"params_b": params / 1e9, "free_pct": free * 100, "mem_gb": mem / 1e9, "states_gb": states / 1e9,
            "usable_gb": usable / 1e9, "exact": states / usable, "gpus": math.ceil(states / usable),
            "ddp_x": states / mem}


def _p2() -> dict:
    n, params, units = 8, 7e9, 32
    a, b = NVLINK.alpha.value, NVLINK.beta.value
    s = 2 * params                                     # bf16 weights and gradients: 2 bytes each
    sent = 3 * (n - 1) / n * s
    lat = 3 * units * (n - 1) * a                      # three collectives per unit, n-1 ring steps each
    ddp = 2 * (n - 1) / n * s
    return {"n": n, "params_b": params / 1e9, "units": units, "alpha_us": a * 1e6, "gb_s": b / 1e9,
            "s_gb": s / 1e9, "sent_gb": sent / 1e9, "bw_ms": sent / b * 1e3, "lat_ms": lat * 1e3,
            "t_ms": (sent / b + lat) * 1e3, "ddp_ms": ddp / b * 1e3}


def _p3() -> dict:
    n = 64
    f, b = HOPPER_PEAK.value, NIC_400G.value
    tokens = (n - 1) / n * f / b
    return {"n": n, "tflops": f / 1e12, "gb_s": b / 1e9, "factor": (n - 1) / n, "tokens": tokens,
            "nvl_tokens": (8 - 1) / 8 * f / NVLINK.beta.value, "nvl_gb_s": NVLINK.beta.value / 1e9}


def _p4(param_bytes: float, n: int) -> dict:
    ag = (n - 1) / n * param_bytes
    n8 = 8  # a world the run did not measure: its printed bytes are the check, not the answer
    ag8 = (n8 - 1) / n8 * param_bytes
    return {"p": int(param_bytes), "n": n, "factor": (n - 1) / n, "ag": ag, "sent_n": 3 * ag,
            "n8": n8, "factor8": (n8 - 1) / n8, "ag8": ag8, "sent": 3 * ag8, "ddp": 2 * ag8, "gloo": 4 * ag8}


def _p5() -> dict:
    params, n = 13e9, 8
    mem = A100_MEMORY.value
    w, g, o = (MIXED[k] * params for k in ("weights", "gradients", "optimizer"))
    stage = {"ddp": w + g + o, "z1": w + g + o / n, "z2": w + (g + o) / n, "z3": (w + g + o) / n}
    return {"params_b": params / 1e9, "n": n, "mem_gb": mem / 1e9, "w_gb": w / 1e9, "g_gb": g / 1e9,
            "o_gb": o / 1e9, **{f"{k}_gb": v / 1e9 for k, v in stage.items()},
            "left_gb": (mem - stage["z2"]) / 1e9}


register(
    Problem(
        "11.p1",
        "A {params_b:g}B-parameter model trains with mixed-precision AdamW (16 bytes of model states a "
        "parameter) under FSDP on H100s with {mem_gb:g} GB each. Keeping {free_pct:g} % of every GPU free "
        "for activations and gathered units, how many GPUs at least hold the model states?",
        "* Model states: 16 × {params_b:g}e9 = {states_gb:g} GB; DDP would need {ddp_x:.3g} GPUs' memory on "
        "every GPU.\n"
        "* FSDP stores $1/n$ of them per GPU: $16P/n \\le$ {usable_gb:g} GB.\n"
        "* $n \\ge$ {states_gb:g} / {usable_gb:g} = {exact:.3g}, so **{gpus} GPUs**.",
        _p1, answer="gpus", unit="GPUs",
        # a whole number of GPUs: 10 % accepts rounding 17.5 down or up, and rejects 2x, 0.5x and the
        # 14 GPUs of forgetting the 20 % kept free (22 % low)
        rel_tol=0.1, constants=(H100.memory_bytes,)),
    Problem(
        "11.p2",
        "FSDP trains a {params_b:g}B-parameter model in bf16 (2-byte weights and gradients) on one node of "
        "{n} H100s over NVLink 4 ($\\alpha$ = {alpha_us:g} µs a ring step, $B$ = {gb_s:g} GB/s one way), in "
        "{units} units resharded after forward. How long does one step's communication take if none of it "
        "hides, in ms?",
        "* $S$ = {params_b:g}e9 × 2 bytes = {s_gb:g} GB.\n"
        "* Per step: all-gather in forward, again in backward, one reduce-scatter, each "
        "$\\frac{{n-1}}{{n}}S$: $3\\frac{{n-1}}{{n}}S$ = {sent_gb:.4g} GB per GPU.\n"
        "* Bandwidth: {sent_gb:.4g} GB / {gb_s:g} GB/s = {bw_ms:.3g} ms; latency: 3 × {units} units × "
        "$(n-1)\\alpha$ = {lat_ms:.3g} ms.\n"
        "* **{t_ms:.3g} ms**. DDP's all-reduce of $2\\frac{{n-1}}{{n}}S$: {ddp_ms:.3g} ms of bandwidth (FSDP's "
        "is 1.5 × that), plus its buckets' latency.",
        _p2, answer="t_ms", unit="ms",
        # rounding to two digits moves it a few %; counting two collectives, not three (0.67x), must fail
        rel_tol=0.1, constants=(NVLINK.alpha, NVLINK.beta)),
    Problem(
        "11.p3",
        "FSDP shards a transformer over {n} H100s on several nodes; each GPU's ring traffic crosses its own "
        "400 Gb/s NIC ($B$ = {gb_s:g} GB/s) and it computes at the bf16 peak, {tflops:g} TFLOP/s. A block "
        "of $P_b$ parameters runs forward on $T$ tokens in $2P_bT$ FLOPs. With the next block's bf16 "
        "all-gather prefetched, and α aside, how many tokens per GPU at least does a block's forward need to "
        "hide it?",
        "* All-gather: each GPU receives $\\frac{{n-1}}{{n}} \\cdot 2P_b$ bytes: "
        "$t_\\text{{AG}} = \\frac{{n-1}}{{n}} \\cdot \\frac{{2P_b}}{{B}}$.\n"
        "* Forward: $t_c = \\frac{{2P_bT}}{{F}}$. Hidden when $t_c \\ge t_\\text{{AG}}$: "
        "$T \\ge \\frac{{n-1}}{{n}} \\cdot \\frac{{F}}{{B}}$, whatever $P_b$.\n"
        "* {factor:.4g} × {tflops:g}e12 / {gb_s:g}e9 = **{tokens:,.0f} tokens** per GPU.\n"
        "* Inside one node, over NVLink 4 ({nvl_gb_s:g} GB/s, 8 GPUs), {nvl_tokens:,.0f} tokens would do.",
        _p3, answer="tokens", unit="tokens",
        # two-digit rounding of F/B stays within 5 %; forgetting the factor 2 in 2 P_b T (2x) must fail
        rel_tol=0.1, constants=(HOPPER_PEAK, NIC_400G, NVLINK.beta)),
    Problem(
        "11.p4",
        "Your FSDP2 run keeps $S$ = {p} bytes of fp32 parameters; section 2.1's table gives what each of its "
        "{n} ranks sends. By the ring formula, with a native reduce-scatter, how many bytes would each rank "
        "send in one step on **{n8} ranks**?",
        "* One all-gather or reduce-scatter of $S$ bytes: each rank sends $\\frac{{n-1}}{{n}}S$ = "
        "{factor8:.3g} × {p} = {ag8:.0f} bytes on {n8} ranks.\n"
        "* Forward all-gather + backward all-gather + reduce-scatter: **{sent:.0f} bytes**; DDP's all-reduce: "
        "{ddp:.0f}.\n"
        "* On your {n} ranks the same sum is 3 × {ag:.0f} = {sent_n:.0f} bytes, the table's ring figure; gloo "
        "runs the reduce-scatter as an all-reduce of the whole gradient: {gloo:.0f} bytes on {n8} ranks, 2 × DDP.",
        _p4, answer="sent", unit="bytes",
        # exact arithmetic: 1 % allows rounding, and rejects 2x (an all-reduce per collective)
        rel_tol=0.01, run=("param_bytes", "n"), example={"param_bytes": 550400, "n": 2}),
    Problem(
        "11.p5",
        "A {params_b:g}B-parameter model, mixed-precision AdamW (2 + 2 + 12 bytes a parameter), on {n} "
        "A100s of {mem_gb:g} GB. How many GB of model states does each GPU hold under ZeRO-2?",
        "* Whole: weights {w_gb:g} GB, gradients {g_gb:g} GB, optimizer states {o_gb:g} GB; DDP "
        "{ddp_gb:g} GB per GPU: it does not fit.\n"
        "* ZeRO-1 shards the optimizer states: {z1_gb:.4g} GB; ZeRO-2 also the gradients: "
        "{w_gb:g} + ({g_gb:g} + {o_gb:g}) / {n} = **{z2_gb:.4g} GB**, leaving {left_gb:.3g} GB for "
        "activations.\n"
        "* ZeRO-3 (FSDP) shards the weights too: {z3_gb:.4g} GB.",
        _p5, answer="z2_gb", unit="GB",
        # 10 % absorbs rounding; ZeRO-1's 71.5 GB (1.47x) and ZeRO-3's 26 GB (0.53x) must fail
        rel_tol=0.1, constants=(A100_MEMORY,)),
)
