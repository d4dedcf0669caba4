"""The worked answers of the chapters' check-your-understanding questions (``answer("N.qK")``).

One function per question, returning Markdown; where an answer is a number it is computed here
from the formula the chapter taught, so the text and the arithmetic cannot disagree. The
predict-then-run questions (``N.q1``) have no entry: their answer is the run (``reveal``).
Kernel side; imports no torch.
"""
from __future__ import annotations

import math
from typing import Callable

ANSWERS: dict[str, Callable[[], str]] = {}
GiB = 2 ** 30


def _answer(qid: str):
    def put(f):
        ANSWERS[qid] = f
        return f
    return put


@_answer("0.q2")
def _():
    return ("Ranks 0, 2 and 3 wait inside `dist.all_reduce` for rank 1; after the 3 s timeout each raises an error.\n"
            "Rank 1 is in no collective, so nothing times out there: torchrun stops it once another rank has failed.\n"
            "The collective timeout turns the hang into an error; the launcher's wall-clock limit bounds everything "
            "else.")


@_answer("0.q3")
def _():
    return ("`mp.spawn` starts fresh interpreters and pickles the function *by reference* (module and name), which "
            "works for a notebook's function.\n"
            "Unpickling fails in the child: its `__main__` is not the notebook, so it has no such function.\n"
            "Forking the kernel instead risks deadlock (OpenMP and allocator locks copied mid-use), so jobs are "
            "files started fresh by torchrun.")


@_answer("1.q2")
def _():
    n, w = 7e9, 8
    parts = {"plain DP": 4 + 4 + 8, "ZeRO-1 (optimizer states /8)": 4 + 4 + 8 / w,
             "ZeRO-2 (+ gradients /8)": 4 + (4 + 8) / w, "ZeRO-3 / FSDP (+ weights /8)": (4 + 4 + 8) / w}
    rows = "\n".join(f"| {k} | {b:g} | {n * b / 1e9:.1f} GB | {'yes' if n * b < 80e9 else 'no'} |"
                     for k, b in parts.items())
    return ("Bytes per parameter: 4 (fp32 weight) + 4 (gradient) + 8 (Adam's two moments); ZeRO divides the "
            "states it shards by the 8 data-parallel ranks.\n\n| scheme | bytes/param | per GPU (7e9 params) | "
            "fits 80 GB? |\n|---|---|---|---|\n" + rows + "\n\nThese are model states only: activations come on "
            "top, and sharding does not shrink them (activation checkpointing or smaller micro-batches do).")


@_answer("1.q3")
def _():
    return ("Every sample passes through **every** rank, and no rank holds a copy of the model: nothing is "
            "replicated, no gradient is averaged.\n\n"
            "Section 3.5 measured it: data mode puts each layer on all ranks and each sample on one; pipeline "
            "mode the reverse.\n\n"
            "Large jobs *combine* the two, on a DP × PP mesh (chapter 7).")


@_answer("2.q2")
def _():
    bw = 25e9
    lines = []
    for n in (8, 64):
        sent = 2 * (n - 1) / n * GiB
        lines.append(f"* {n} ranks: 2({n}−1)/{n} · 1 GiB = **{sent / GiB:.3f} GiB** per rank, "
                     f"{sent / bw:.3f} s at 25 GB/s (α ignored)")
    return ("Each rank sends 2(n−1)/n · N: a reduce-scatter and an all-gather of n−1 steps each, N/n bytes "
            "a step.\n\n" + "\n".join(lines) +
            "\n\nThe bytes approach 2N whatever n; the 2(n−1) steps, each paying α, are what grows with n.")


@_answer("2.q3")
def _():
    return ("Both ranks block in `send`, each waiting for the other's `recv`: a deadlock until the collective "
            "timeout ends it.\n\n"
            "A backend may buffer small messages, so a test with small tensors can pass while larger ones hang.\n\n"
            "Fixes: post `dist.isend` and `dist.irecv`, then wait on both (or use `dist.batch_isend_irecv`); "
            "or let even ranks send first and odd ranks receive first.")


@_answer("3.q2")
def _():
    return ("Device 0 does what every device does, plus:\n"
            "* it scatters the batch and copies the parameters to every other device, every step;\n"
            "* it gathers every output, computes the loss and its gradient;\n"
            "* it gets the sum of all replicas' gradients and runs the only optimizer step, holding its state.")


@_answer("3.q3")
def _():
    n, s = 8, 100e6 * 4
    copy, chain, ring = (n - 1) * s, s, 2 * (n - 1) / n * s
    return (f"* plain copies: 7 × 400 MB = **{copy / 1e9:.1f} GB** from device 0 per step;\n"
            f"* NCCL's chain: the model once, **{chain / 1e9:.1f} GB**;\n"
            f"* DDP's ring: 2·7/8 × 400 MB = **{ring / 1e9:.2f} GB** per rank, spread evenly.\n\n"
            f"With NCCL device 0 sends {chain / ring:.2f} × a ring rank's bytes: bytes are not the difference.\n"
            "DP rebuilds the replicas every step, runs them under one GIL, does loss and update on device 0\n"
            "alone, and reduces the gradients only after the whole backward, where DDP overlaps them.")


@_answer("4.q2")
def _():
    return ("- Replicas stay equal only if they *start* equal: equal weights, one averaged gradient and the same "
            "optimizer give the same step on every rank\n"
            "- Without the broadcast, ranks seeded differently apply one average gradient to different weights: "
            "the replicas never agree, and nothing warns you\n"
            "- So `DDP(model)` broadcasts rank 0's parameters and buffers (by default the buffers again before "
            "each forward), as section 1's table shows.")


@_answer("4.q3")
def _():
    return ("- Backward produces gradients from the last layer to the first: buckets filled in reverse parameter "
            "order complete in that order\n"
            "- The last layers' bucket is full while backward still computes the earlier layers, so its all-reduce "
            "starts then and travels during computation\n"
            "- Only the final bucket (the first layers) is left when backward ends; filled first, the first "
            "layers' bucket would wait for the whole backward.")


@_answer("5.q2")
def _():
    return ("- If the head (the endpoint's host) arrived, it waits out the join timeout (600 s by "
            "default), then fails: no training code runs\n"
            "- If the head is the one missing, the other fails sooner: it cannot reach the head's store "
            "(`read_timeout`, 60 s per try)\n"
            "- Check first that every node's command has the same `--nnodes`, `--rdzv-id` and `--rdzv-endpoint`\n"
            "- Then that the endpoint's name resolves on every node to a reachable address (not 127.0.1.1), and "
            "that its port is open\n"
            "- Once the rendezvous forms, check the backend's interface: `GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME`")


@_answer("5.q3")
def _():
    return ("- On each machine `torch.distributed.launch` starts 2 processes, and each calls `mp.spawn` with "
            "`nprocs=device_count()`, 2 more: 4 per machine\n"
            "- 12 training processes on the three machines, where 6 were meant (one per GPU)\n"
            "- Each child takes its spawn index (0-1) as its rank in a world of 2: every rank is claimed 6 times, "
            "at one `MASTER_ADDR:MASTER_PORT`\n"
            "- The fix: one launcher. torchrun starts one process per GPU and sets `RANK`, `LOCAL_RANK` and "
            "`WORLD_SIZE`; the script only reads them.")


@_answer("6.q2")
def _():
    return ("A tensor that arrives with `recv` has no autograd history: the graph that made it lives in another process.\n"
            "* With `requires_grad_(True)` it is a leaf, the start of this stage's graph, and `backward` leaves "
            "∂loss/∂input in its `.grad`;\n"
            "* that is what the previous stage needs to continue its own backward, so it is sent back;\n"
            "* without it `.grad` stays None, and the previous stages' weights never get a gradient.")


@_answer("6.q3")
def _():
    p, m = 4, 12
    bubble = (p - 1) / (m + p - 1)
    return (f"* plain model parallelism: one stage works at a time, each device busy at best **1/{p} = "
            f"{1 / p:.0%}** (less with the sends);\n"
            f"* GPipe, m = {m} micro-batches: bubble (p−1)/(m+p−1) = {p - 1}/{m + p - 1} = {bubble:.0%}, "
            f"busy **{1 - bubble:.0%}** (chapter 7).")


@_answer("7.q2")
def _():
    p = 8
    m_gpipe = next(m for m in range(1, 10_000) if (p - 1) / (m + p - 1) < 0.1)
    m_il = next(m for m in range(1, 10_000) if (p - 1) / (2 * m + p - 1) < 0.1)
    # Markdown soft-wraps the "\n" between lines: one paragraph, in lines short enough to scan.
    return (f"GPipe/1F1B: (p−1)/(m+p−1) < 0.1 ⇔ m > 9(p−1) = {9 * (p - 1)}: **m = {m_gpipe}** "
            f"(bubble {(p - 1) / (m_gpipe + p - 1):.3f}).\n"
            f"Interleaved, v = 2: (p−1)/(v·m+p−1) < 0.1 ⇔ v·m > {9 * (p - 1)}: **m = {m_il}** "
            f"(bubble {(p - 1) / (2 * m_il + p - 1):.3f}).\n"
            "Each micro-batch is then small: smaller matrix multiplications, and more sends per step,\n"
            "costs the formula does not count (section 4).")


@_answer("7.q3")
def _():
    return ("Memory: GPipe runs all m forwards before any backward, so every rank holds all m micro-batches' "
            "activations.\n"
            "1F1B starts backwards as soon as the pipe is full: rank r holds at most p − r, whatever m.\n"
            "So m can grow, shrinking the bubble, without activation memory growing with it.")


@_answer("8.q2")
def _():
    # Markdown soft-wraps the "\n" between lines: the answer reads as one paragraph, in lines short enough to scan.
    return ("`backward` *adds* into `.grad`: k backwards of mean losses leave k times the mean gradient over all\n"
            "k·b samples, so dividing each loss by k gives the step of one k-times-larger batch.\n"
            "Forget it and SGD steps k times too far (the learning rate silently multiplied by k);\n"
            "AdamW divides by the gradient's own size, so its step barely changes (up to its ε): the bug hides\n"
            "until a clipping threshold, an L2 term in the loss or another optimizer exposes it.")


@_answer("8.q3")
def _():
    n = 25e6
    tiny, cut = 2.0 ** -24, 2.0 ** -25
    # fp16's largest finite value is (2 - 2**-10) * 2**15 = 65504; from half an ulp above it (2**4) a cast rounds to inf
    inf_from = (2 - 2.0 ** -10) * 2.0 ** 15 + 2.0 ** 4
    # The division runs in fp16 after the cast (default_hooks._compress_hook): g/W underflows where g did not.
    return (f"fp32: {4 * n / 1e6:.0f} MB per step, fp16: **{2 * n / 1e6:.0f} MB**.\n"
            "torch's `fp16_compress_hook` casts the bucket to fp16, then divides it, in fp16, by the world size W,\n"
            f"both before the all-reduce, so the sum stays in range (from {inf_from:.0f} up, a gradient overflows in the cast).\n"
            f"The cast rounds to zero anything up to 2⁻²⁵ = {cut:.2e} (half of fp16's smallest subnormal,\n"
            f"2⁻²⁴ = {tiny:.2e}), and the division then zeroes every share g/W that small:\n"
            f"everything below **W × 2⁻²⁵** is lost ({4 * cut:.2e} on 4 ranks): bf16 (fp32's exponent range) avoids this.")


@_answer("9.q2")
def _():
    return ("The **fast** ranks: DDP's all-reduce runs inside backward, and a fast rank sits in it until the\n"
            "slow rank's gradients arrive, so its backward contains the waiting; the slow rank waits least.\n"
            "Find the straggler from work no collective is mixed into: the rank with the longest forward\n"
            "(Exercise 9.1).")


@_answer("9.q3")
def _():
    return ("At the last step the other ranks enter backward's all-reduce while the short rank has left the loop:\n"
            "they wait for it, and the job fails at the collective timeout (sooner if the short rank exits).\n"
            "Fixes: give every rank the same number of batches (`DistributedSampler`, `drop_last=True`),\n"
            "or wrap the loop in `torch.distributed.algorithms.Join` with the DDP model (chapter 4).")


@_answer("10.q2")
def _():
    return ("- Everything the next step reads: weights, AdamW's moments, the scheduler's position, "
            "each rank's RNG state and the step number (with fp16, the loss scaler)\n"
            "- Miss one and the run goes on without an error, but differs: other dropout masks, another learning "
            "rate, other batches\n"
            "- Written under a temporary name and renamed when complete, so a crash during the save leaves the "
            "previous checkpoint the newest.")


@_answer("10.q3")
def _():
    every, step_s, died, c, mtbf = 50, 2.0, 437, 20.0, 8 * 3600
    last = died // every * every
    tau = math.sqrt(2 * c * mtbf)
    return (f"- The job resumes from step {last}: **{died - last} steps** ({(died - last) * step_s:.0f} s) are "
            "recomputed, plus the restart; on average a failure costs half an interval\n"
            f"- Young/Daly: τ = √(2CM) = √(2 · {c:g} s · {mtbf} s) = **{tau:.0f} s** ≈ {tau / step_s:.0f} steps, "
            f"one every ~{tau / 60:.0f} minutes (chapter 13 derives the rule).")


@_answer("11.q2")
def _():
    n, w = 1e9, 8
    rows = {"DDP": 16, "ZeRO-1": 4 + 4 + 8 / w, "ZeRO-2": 4 + 12 / w, "FSDP (ZeRO-3)": 16 / w}
    return ("Per rank, model states only (4 B weight, 4 B gradient, 8 B AdamW moments per parameter):\n\n"
            + "\n".join(f"* {k}: {b:g} B/param → **{n * b / 1e9:g} GB**" for k, b in rows.items())
            + "\n\nFSDP also holds, briefly, the full parameters of the unit it computes: per-block units keep "
              "that to one or two blocks (two while prefetching).")


@_answer("11.q3")
def _():
    n = 8
    f = (n - 1) / n
    return (f"Per rank and step, with S the model's bytes and n = {n}:\n\n"
            f"* DDP all-reduces the gradients: reduce-scatter + all-gather = 2·{f:.3f}·S\n"
            f"* FSDP all-gathers the parameters in forward and again in backward, and reduce-scatters the "
            f"gradients: 3·{f:.3f}·S, **{3 / 2:.1f}×** DDP\n\n"
            "Keeping the parameters from forward to backward (`reshard_after_forward=False`) saves the second "
            "all-gather: DDP's volume, with more memory.")


@_answer("13.q2")
def _():
    alpha, busbw, n = 20e-6, 100e9, 8
    f = 2 * (n - 1) / n
    s = alpha * busbw / f
    bucket = 25 * 2 ** 20
    share = bucket * f / busbw / (alpha + bucket * f / busbw)
    return (f"- An all-reduce takes t = α + S·2(n−1)/n / busbw; the two terms are equal at S = α·busbw/(2(n−1)/n)\n"
            f"- With n = {n}: {alpha * 1e6:g} µs · {busbw / 1e9:g} GB/s / {f:.2f} = **{s / 1e6:.2f} MB**\n"
            f"- A 25 MiB bucket spends {share:.1%} of its time moving bytes: large buckets pay α rarely\n"
            "- A bucket per tensor would leave small tensors latency-bound.")


@_answer("13.q3")
def _():
    c, m = 60.0, 3 * 3600.0
    tau = math.sqrt(2 * c * m)
    lost = c / tau + tau / (2 * m)
    return (f"- τ = √(2δM) = √(2 · {c:g} s · {m:g} s) = **{tau:.0f} s** ({tau / 60:.0f} min)\n"
            f"- Lost ≈ δ/τ (saving) + τ/(2M) (rework, half an interval per failure) = {c / tau:.3f} + "
            f"{tau / (2 * m):.3f} = **{lost:.1%}**, before the restart's own cost\n"
            "- Halving δ lowers the loss by a factor of about √2.")
