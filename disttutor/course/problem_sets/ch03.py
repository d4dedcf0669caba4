"""Chapter 3's worked problems: DataParallel's copies against DDP's ring, and the mean of shard means.

The model is the calculator's "GPT 1.3B-like (24 x 2048)" shape in fp32 (parameters counted by
:func:`disttutor.sharding.memory.transformer_params`, never typed); hardware from
:mod:`disttutor.scale.hardware`, tagged with its sources. With S the model's bytes and n devices:
DataParallel with copies sends (n-1) S from device 0 to replicate the model, DDP's ring sends
2(n-1)/n S per rank. Equal shards make the mean of the shard means the full batch's mean.
"""
from __future__ import annotations

from disttutor.course.problems import Problem, register
from disttutor.scale.hardware import NVLINK3
from disttutor.sharding import memory as mem

P13 = mem.transformer_params(*mem.PRESETS["GPT 1.3B-like (24 x 2048)"][:2])  # counted from the shape
FP32 = 4


def _p1() -> dict:
    n, B = 8, NVLINK3.value
    S = P13 * FP32
    return {"P_b": f"{P13 / 1e9:.2f}", "params": f"{P13:,}", "n": n, "B_gb": f"{B / 1e9:g}", "S_gb": f"{S / 1e9:.2f}",
            "copies": n - 1, "sent_gb": f"{(n - 1) * S / 1e9:.1f}", "ms": (n - 1) * S / B * 1e3,
            "chain_ms": f"{S / B * 1e3:.3g}"}  # NCCL's broadcast: device 0 sends S once


def _p2() -> dict:
    n, B = 8, NVLINK3.value
    S = P13 * FP32
    ring = 2 * (n - 1) / n * S
    return {"P_b": f"{P13 / 1e9:.2f}", "n": n, "B_gb": f"{B / 1e9:g}", "S_gb": f"{S / 1e9:.2f}",
            "factor": f"{2 * (n - 1) / n:.3g}", "ring_gb": f"{ring / 1e9:.2f}", "ms": ring / B * 1e3,
            "copy_ms": f"{(n - 1) * S / B * 1e3:.3g}"}


def _p3() -> dict:
    big, small = 40, 24  # rank 0's and rank 1's samples: a batch of 64 split unevenly
    batch = big + small
    w_small, w_full = 1 / (2 * small), 1 / batch  # weight of one of rank 1's samples: averaged, full batch
    return {"big": big, "small": small, "batch": batch, "w_small": f"1/{2 * small}", "w_big": f"1/{2 * big}",
            "w_full": f"1/{batch}", "factor": w_small / w_full, "big_factor": f"{(1 / (2 * big)) / w_full:.3g}"}


def _p4(shard_losses: list, one_process: float) -> dict:
    n = len(shard_losses)
    mean = sum(shard_losses) / n
    return {"n": n, "losses": ", ".join(f"{x:.4f}" for x in shard_losses), "mean": mean,
            "ref": f"{one_process:.4f}", "sum": f"{sum(shard_losses):.4f}",
            "diff": f"{abs(mean - one_process):.1e}"}


def _p5() -> dict:
    n, B = 8, NVLINK3.value
    b, seq, vocab = 32, 1024, mem.TrainingSetup().vocab  # the calculator's default batch and sequence; GPT-2's vocabulary
    logits = b * seq * vocab * FP32  # the gathered outputs: one fp32 logit per token and vocabulary entry
    moved = 2 * (n - 1) / n * logits  # received (gather), then their gradients sent back (scatter)
    return {"n": n, "B_gb": f"{B / 1e9:g}", "b": b, "seq": seq, "vocab": vocab, "logits_gb": f"{logits / 1e9:.2f}",
            "part_gb": f"{(n - 1) / n * logits / 1e9:.2f}", "moved_gb": f"{moved / 1e9:.2f}", "ms": moved / B * 1e3}


register(
    Problem(
        "3.p1",
        "Suppose `nn.DataParallel` on {n} A100s replicated the calculator's {P_b}-billion-parameter model (fp32) at "
        "every forward by plain copies, device 0 copying it to each other GPU in turn over its NVLink 3 ({B_gb} GB/s "
        "per direction): the chapter's dp-copy, the article's picture. How many **milliseconds** would device 0 "
        "spend sending the copies each step?",
        "* $S$ = {params} parameters × 4 bytes = {S_gb} GB.\n"
        "* Device 0 sends one copy to each of the other $n-1$ = {copies} GPUs: $(n-1)S$ = {sent_gb} GB.\n"
        "* {sent_gb} GB / {B_gb} GB/s = **{ms:.3g} ms**, before a single sample is computed; the gradients "
        "come back the same way. On GPUs torch broadcasts with NCCL instead, a chain in which device 0 sends $S$ "
        "once: {chain_ms} ms.",
        _p1, answer="ms", unit="ms",
        rel_tol=0.1,  # 10 %: hand rounding; sending S once (NCCL's chain) instead of n-1 times is 7x off
        constants=(NVLINK3,)),
    Problem(
        "3.p2",
        "DDP instead, on the same {n} A100s (NVLink 3, {B_gb} GB/s per direction): each step ring-all-reduces the "
        "{P_b}-billion-parameter model's fp32 gradients. Ignoring latency, how many **milliseconds** does it take?",
        "* $S$ = {S_gb} GB; each rank sends 2(n−1)/n × S = {factor} × {S_gb} = {ring_gb} GB.\n"
        "* {ring_gb} GB / {B_gb} GB/s = **{ms:.3g} ms**, the same on every GPU, against the {copy_ms} ms "
        "of 3.p1's plain copies out of device 0 alone.",
        _p2, answer="ms", unit="ms",
        rel_tol=0.1,  # 10 %: hand rounding; forgetting the 2 (only the reduce-scatter) is 2x off
        constants=(NVLINK3,)),
    Problem(
        "3.p3",
        "A batch of {batch} samples split unevenly: rank 0 gets {big}, rank 1 gets {small}. Each rank computes the "
        "mean gradient over its shard, and the all-reduce averages the two. What weight does the result give each "
        "of rank 1's samples, as a **multiple** of the weight the full batch's mean gives it?",
        "* The average halves each shard's mean: a sample of rank 1 weighs ½ × 1/{small} = {w_small}, one of rank 0 "
        "½ × 1/{big} = {w_big}.\n"
        "* The full batch's mean weights every sample {w_full}.\n"
        "* Ratio: **{factor:.3g}×** for rank 1's samples ({big_factor}× for rank 0's): the smaller shard counts more. "
        "Equal shards, or weighting each mean by its shard's size, give the full-batch gradient.",
        _p3, answer="factor", unit="×",
        rel_tol=0.05,  # 5 %: a ratio of small integers; "no change" (1) is 25 % off
    ),
    Problem(
        "3.p4",
        "In your run on {n} ranks, DDP's first step computed these shard losses, each the mean over one rank's "
        "equal shard: {losses}. What is the **full batch's mean loss** at that step?",
        "* Equal shards: the mean of the {n} shard means is the mean over all samples (the derivation above).\n"
        "* So: ({losses}) / {n} = **{mean:.4f}**; one process on the whole batch measured {ref} "
        "(difference {diff}). Their sum, {sum}, is $n$ times too big: that is why DDP divides by $n$.",
        _p4, answer="mean", unit="",
        rel_tol=0.02,  # 2 %: the losses are shown to 4 decimals; the sum (n times too big) fails
        run=("shard_losses", "one_process"),
        example={"shard_losses": [2.3012, 2.2871, 2.3305, 2.3198], "one_process": 2.30965}),
    Problem(
        "3.p5",
        "`nn.DataParallel` on {n} A100s (NVLink 3, {B_gb} GB/s per direction) trains a language model on a batch of "
        "{b} sequences of {seq} tokens, vocabulary {vocab}. Its outputs, fp32 logits, are gathered on device 0, "
        "where the loss is. How many **milliseconds** does device 0's link spend per step on them and their gradients?",
        "* The logits: {b} × {seq} × {vocab} × 4 bytes = {logits_gb} GB; device 0 computed $\\frac{{1}}{{n}}$ of them.\n"
        "* It receives the other $\\frac{{n-1}}{{n}}$ of them, {part_gb} GB (gather), then sends their gradients "
        "back, as many bytes (the gather's backward is a scatter), one after the other: {moved_gb} GB in all.\n"
        "* {moved_gb} GB / {B_gb} GB/s = **{ms:.3g} ms** a step, on device 0 alone; DDP computes each rank's loss "
        "where its logits are and moves none of them.",
        _p5, answer="ms", unit="ms",
        rel_tol=0.1,  # 10 %: hand rounding; counting only the gather (not the gradients back) is 2x off
        constants=(NVLINK3,)),
)
