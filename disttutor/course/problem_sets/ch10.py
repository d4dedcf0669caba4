"""Chapter 10's worked problems: a language model's parameters, FLOPs, memory and checkpoint, at scale.

The rules are the chapter's derivations: training costs about 6N FLOPs per token (2 forward, 4
backward per weight); DDP with fp32 AdamW holds 16N bytes on every rank (20N with DDP's default
all-reduce buckets, a copy of the gradients unless gradient_as_bucket_view=True); a DDP checkpoint
keeps weights and both moments (12N), each tensor written once, spread over the ranks; a ring
all-reduce moves 2(n-1)/n · S per rank (chapter 2). Hardware figures come with their tags and
sources; the first problem takes the learner's own run.
"""
from __future__ import annotations

from disttutor.course.problems import Problem, register
from disttutor.scale.hardware import H100, HOPPER_PEAK, NIC_400G, NVLINK4

H100_MEMORY = H100.memory_bytes
DAY = 86400


def _p1(n_params: int, tokens_per_s: float) -> dict:
    if n_params <= 0 or tokens_per_s <= 0:
        raise ValueError(f"needs the run's parameter count and tokens/s, got {n_params}, {tokens_per_s}")
    return {"n": n_params, "tps": tokens_per_s, "per_token": 6 * n_params,
            "gflops": 6 * n_params * tokens_per_s / 1e9}


def _p2() -> dict:
    params, tokens, gpus, mfu = 7e9, 2e12, 1024, 0.4
    total = 6 * params * tokens
    rate = gpus * mfu * HOPPER_PEAK.value
    return {"params_b": params / 1e9, "tokens_t": tokens / 1e12, "gpus": gpus, "mfu_pct": 100 * mfu,
            "peak_tf": HOPPER_PEAK.value / 1e12, "total": total, "rate_pf": rate / 1e15, "days": total / rate / DAY}


def _p3() -> dict:
    mem = H100_MEMORY.value
    return {"mem_gb": mem / 1e9, "n_b": mem / 16 / 1e9}


def _p4() -> dict:
    params, n = 1.3e9, 8
    s = 4 * params
    t = 2 * (n - 1) / n * s / NVLINK4.value
    return {"params_b": params / 1e9, "n": n, "s_gb": s / 1e9, "factor": 2 * (n - 1) / n,
            "nv_gb_s": NVLINK4.value / 1e9, "t_ms": t * 1e3}


def _p5() -> dict:
    params, nodes, per_node = 7e9, 8, 8
    n = nodes * per_node
    total = 12 * params
    share = total / n
    return {"params_b": params / 1e9, "nodes": nodes, "per_node": per_node, "n": n, "total_gb": total / 1e9,
            "share_gb": share / 1e9, "nic_gb_s": NIC_400G.value / 1e9, "t_ms": share / NIC_400G.value * 1e3,
            "all_one_s": total / NIC_400G.value}


register(
    Problem(
        "10.p1",
        "Your capstone model has N = {n:,} parameters, and rank 0 trained at {tps:.0f} tokens/s. Counting "
        "6N FLOPs per token, how many GFLOP/s did rank 0 compute?",
        "* 6N = 6 × {n:,} = {per_token:,} FLOPs per token: 2 per weight forward, 4 backward.\n"
        "* {per_token:,} × {tps:.0f} tokens/s = **{gflops:.3g} GFLOP/s**.\n"
        "* The exact count printed in section 3 is higher: attention's products and, with activation "
        "checkpointing, a second forward of each layer.",
        _p1, answer="gflops", unit="GFLOP/s",
        # rounding the tokens/s and N to two digits stays within a few %; 2N or 4N per token (3x, 1.5x off) fails
        rel_tol=0.1, run=("n_params", "tokens_per_s"), example={"n_params": 107836, "tokens_per_s": 9000.0}),
    Problem(
        "10.p2",
        "A {params_b:g}B-parameter model is trained on {tokens_t:g} trillion tokens by {gpus} H100s at "
        "{mfu_pct:g} % of the {peak_tf:g} TFLOP/s bf16 peak. Counting 6N FLOPs per token, how many days does "
        "it take?",
        "* Work: 6 × {params_b:g}e9 × {tokens_t:g}e12 = {total:.3g} FLOPs.\n"
        "* Rate: {gpus} × {mfu_pct:g} % × {peak_tf:g} TFLOP/s = {rate_pf:.3g} PFLOP/s.\n"
        "* Time: {total:.3g} / {rate_pf:.3g}e15 s = **{days:.3g} days**.",
        _p2, answer="days", unit="days",
        # two-digit rounding stays within a few %; 2N (forward only, 1/3) or the peak without MFU (0.4x) fail
        rel_tol=0.15, constants=(HOPPER_PEAK,)),
    Problem(
        "10.p3",
        "DDP with fp32 weights and AdamW, built with `gradient_as_bucket_view=True` (its all-reduce buckets are "
        "the gradients, not a copy): every rank holds weights, gradients and the two moments. Ignoring "
        "activations, what is the largest model, in billions of parameters, that fits on one {mem_gb:g} GB H100?",
        "* Per parameter: 4 bytes of weight + 4 of gradient + 4 + 4 of AdamW's moments = 16 bytes.\n"
        "* $N$ ≤ {mem_gb:g} GB / 16 bytes = **{n_b:.3g}B** parameters, before a single activation.\n"
        "* Beyond that, shard the state across ranks (chapter 11) instead of replicating it.",
        _p3, answer="n_b", unit="billion parameters",
        # exact arithmetic: 10 % rejects forgetting the gradients (12 bytes, 1.33x) and the moments (8 bytes, 2x)
        rel_tol=0.1, constants=(H100_MEMORY,)),
    Problem(
        "10.p4",
        "DDP on {n} H100s in one node averages the fp32 gradients of a {params_b:g}B-parameter model with a ring "
        "all-reduce over NVLink 4 ($B$ = {nv_gb_s:g} GB/s). Ignoring latency, how many milliseconds does one "
        "all-reduce take?",
        "* $S$ = 4 bytes × {params_b:g}e9 = {s_gb:.3g} GB.\n"
        "* A ring sends $\\frac{{2(n-1)}}{{n}} S$ per rank: $T$ = {factor:.3g} × {s_gb:.3g} GB / {nv_gb_s:g} GB/s "
        "= **{t_ms:.3g} ms**.\n"
        "* DDP overlaps it with the backward, bucket by bucket (chapter 4).",
        _p4, answer="t_ms", unit="ms",
        # rounding only; S/B without the ring's factor (0.57x), without its 2 (0.5x), bf16's 2 bytes (0.5x) fail
        rel_tol=0.15, constants=(NVLINK4,)),
    Problem(
        "10.p5",
        "A {params_b:g}B-parameter model trained with DDP on {nodes} nodes × {per_node} GPUs saves a DCP "
        "checkpoint of its fp32 weights and AdamW's two moments. Each rank sends its share to remote storage "
        "through its own 400 Gb/s NIC ($B$ = {nic_gb_s:g} GB/s). How many milliseconds does a rank need, at least?",
        "* The checkpoint: 12 bytes × {params_b:g}e9 = {total_gb:.3g} GB (gradients are not saved).\n"
        "* The replicas are equal, so DCP writes each tensor once, spread over the {n} ranks: "
        "{share_gb:.3g} GB a rank.\n"
        "* {share_gb:.3g} GB / {nic_gb_s:g} GB/s = **{t_ms:.3g} ms**, if the storage keeps up; one rank writing "
        "everything would need {all_one_s:.3g} s.",
        _p5, answer="t_ms", unit="ms",
        # rounding only; every rank writing the whole checkpoint (64x) or saving gradients too (16N, 1.33x) fails
        rel_tol=0.15, constants=(NIC_400G,)),
)
