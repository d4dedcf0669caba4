"""Chapter 4's puzzles: what DDP's backward leaves, how many all-reduces it runs, and its buckets.

4.z1-4.z3 run for real on 4 gloo ranks in the tests (a comm hook counts the buckets DDP all-reduces);
4.z4 is checked against ``torch.utils.data.DistributedSampler`` itself.
"""
from __future__ import annotations

from disttutor.course.puzzle_sets._code import COUNTED, DDP_IMPORTS, WORLD
from disttutor.course.puzzles import Puzzle, register

MIB = 1 << 20
FIRST_BUCKET = 1 * MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES: the first bucket's cap, bucket_cap_mb unset
DEFAULT_CAP = 25 * MIB  # bucket_cap_mb's default


def buckets(sizes: list[int], cap: int, first: int = FIRST_BUCKET) -> list[int]:
    """DDP's bucket assignment: gradients in reverse order of the parameters, a bucket closes once it
    holds at least its cap (the first bucket's cap is ``first``). Returns the parameters per bucket."""
    out, held, count, limit = [], 0, 0, first
    for size in reversed(sizes):
        held, count = held + size, count + 1
        if held >= limit:
            out.append(count)
            held, count, limit = 0, 0, cap
    return out + ([count] if count else [])


def _z1() -> dict:
    grads = [r + 1 for r in range(WORLD)]
    return {"n": WORLD, "grads": ", ".join(map(str, grads)), "answer": sum(grads) / WORLD,
            "sum": float(sum(grads)), "own": float(grads[0])}


def _z2() -> dict:
    m, n_buckets = 4, 1
    return {"m": m, "synced": 1, "answer": n_buckets * 1, "every": n_buckets * m, "inverted": m - 1}


def _z3() -> dict:
    layers, cap = 4, DEFAULT_CAP
    sizes = [512 * 512 * 4] * layers                  # fp32, no bias: 1 MiB of gradient a layer
    got = buckets(sizes, cap)
    # the first backward runs with one bucket: DDP does not know yet in which order gradients arrive
    return {"layers": layers, "cap": cap // MIB, "layer_mib": sizes[0] / MIB, "split": got,
            "answer": [1, len(got)], "known": [len(got), len(got)],
            "no_first": [1, len(buckets(sizes, cap, first=cap))], "one_each": [layers, layers]}


def _z4() -> dict:
    n_items, replicas, rank = 10, 4, 3
    per = -(-n_items // replicas)
    padded = list(range(n_items)) + list(range(per * replicas - n_items))   # padded from the start
    return {"n_items": n_items, "replicas": replicas, "rank": rank, "per": per, "total": per * replicas,
            "pad": per * replicas - n_items, "answer": padded[rank::replicas],
            "unpadded": list(range(n_items))[rank::replicas],
            "block": list(range(n_items))[rank * per:(rank + 1) * per]}


register(
    Puzzle(
        "4.z1", "collective",
        "On {n} ranks, rank r's input is r + 1, so its own gradient would be r + 1. After `backward()`, what "
        "is `weight.grad` on rank 0?",
        "DDP all-reduces the gradients during `backward()` and divides by the world size: every rank ends "
        "with the **mean**, ({grads}) / {n} = **{answer:g}**, so every replica takes the same step.",
        _z1, "answer",
        code=DDP_IMPORTS + "model = DDP(torch.nn.Linear(1, 1, bias=False))\n"
             "x = torch.tensor([[rank + 1.0]])\n"
             "model(x).sum().backward()",
        expr="model.module.weight.grad.item()", reads=lambda per: per[0],
        # the mean of small integers is exact in binary; the tolerance only forgives how it is typed
        rel_tol=1e-6,
        wrong={"sum": "That is the sum. DDP averages: it divides the all-reduced gradient by the world size, "
                      "so the learning rate means the same as on one process.",
               "own": "That is rank 0's own gradient. DDP's backward all-reduces every gradient: no rank "
                      "keeps its own."}),
    Puzzle(
        "4.z2", "count",
        "Gradient accumulation over {m} micro-batches with `no_sync()`. The model's gradients fit in one "
        "bucket. How many all-reduces does the loop run?",
        "Inside `no_sync()` DDP only accumulates into `.grad`; the first backward outside it all-reduces "
        "everything accumulated so far, one all-reduce per bucket: **{answer}**, instead of {every} without "
        "`no_sync`.",
        _z2, "answer",
        code=DDP_IMPORTS + "from contextlib import nullcontext\n"
             "model = DDP(torch.nn.Linear(8, 8))\n" + COUNTED +
             "for k in range(4):                           # 4 micro-batches, then one optimizer step\n"
             "    with model.no_sync() if k < 3 else nullcontext():\n"
             "        model(torch.randn(2, 8)).sum().backward()",
        expr="len(calls)", reads=lambda per: per[0],
        wrong={"every": "That is without `no_sync()`: inside it DDP skips the all-reduce and only "
                        "accumulates.",
               "inverted": "`no_sync()` is on for the first {inverted} micro-batches: those are the ones that do *not* "
                           "all-reduce."}),
    Puzzle(
        "4.z3", "bucket",
        "DDP, `bucket_cap_mb` left at its default ({cap} MiB), wraps {layers} layers of {layer_mib:g} MiB of "
        "gradients each. How many all-reduces (buckets) does the first backward run, and the second? Answer "
        "`[first, second]`.",
        "Until it has seen one backward, DDP does not know in which order the gradients arrive, so the first "
        "backward all-reduces them all as **one** bucket. Then it rebuilds the buckets in that order, last "
        "layer first, closing a bucket once it holds at least its cap -- and with the default cap the first "
        "bucket's is only 1 MiB, so the last layer's gradient goes out alone, early. Layers per bucket: "
        "{split}. **{answer}**.",
        _z3, "answer",
        code=DDP_IMPORTS +
             "net = torch.nn.Sequential(*[torch.nn.Linear(512, 512, bias=False) for _ in range(4)])\n"
             "model = DDP(net)\n" + COUNTED +
             "counts = []\n"
             "for step in range(2):\n"
             "    calls.clear()\n"
             "    model(torch.randn(2, 512)).sum().backward()\n"
             "    counts.append(len(calls))",
        expr="counts", reads=lambda per: per[0],
        wrong={"known": "The second is right. The first backward runs with one bucket: the buckets follow the "
                        "order the gradients arrive in, which DDP learns during it.",
               "no_first": "With `bucket_cap_mb` unset, DDP caps the first bucket at 1 MiB so that the "
                           "gradients ready first do not wait for {cap} MiB of others.",
               "one_each": "A bucket holds gradients until it reaches its cap: up to {cap} MiB here."}),
    Puzzle(
        "4.z4", "data",
        "`DistributedSampler` splits {n_items} samples over {replicas} ranks, without shuffling. Which "
        "indices does rank {rank} read, in order?",
        "Each rank gets ⌈{n_items}/{replicas}⌉ = {per} samples, so the list is padded to {total} by "
        "repeating its first {pad}; rank r takes every {replicas}th index from r: **{answer}**. Those {pad} "
        "samples are read twice per epoch unless `drop_last=True`.",
        _z4, "answer",
        code="from torch.utils.data import DistributedSampler\n"
             "sampler = DistributedSampler(range(10), num_replicas=4, rank=3, shuffle=False)\n"
             "print(list(sampler))",
        wrong={"unpadded": "Every rank gets the same number of samples ({per}): the sampler pads the list by "
                           "repeating it from the start.",
               "block": "The sampler deals the indices out in turn (rank r takes r, r+{replicas}, ...), not "
                        "in contiguous blocks."}),
)
