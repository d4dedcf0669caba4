"""Chapter 8's puzzles: gradient accumulation under DDP -- the all-reduces it runs, the batch it makes,
the gradient it leaves.

8.z1 and 8.z3 run for real on 4 gloo ranks in the tests (a comm hook counts the buckets); 8.z2 is
counted by the tests over every rank and micro-batch.
"""
from __future__ import annotations

from disttutor.course.puzzle_sets._code import COUNTED, DDP_IMPORTS, WORLD
from disttutor.course.puzzle_sets.ch04 import MIB, buckets
from disttutor.course.puzzles import Puzzle, register


def _z1() -> dict:
    m, layer = 4, 512 * 512 * 4                        # 1 MiB of fp32 gradient a layer, 2 layers
    n_buckets = len(buckets([layer, layer], cap=MIB, first=MIB))   # bucket_cap_mb=1 set: every cap 1 MiB
    return {"m": m, "b": n_buckets, "b_mib": f"{layer / MIB:g}", "answer": m * n_buckets, "synced": n_buckets,
            "per_step": m}


def _z2() -> dict:
    ranks, micro, accum = 8, 4, 16
    return {"ranks": ranks, "micro": micro, "accum": accum, "answer": ranks * micro * accum,
            "no_ranks": micro * accum, "no_accum": ranks * micro}


def _z3() -> dict:
    m = 4
    own = [sum(r + k for k in range(m)) / m for r in range(WORLD)]     # each rank's accumulated gradient
    last_only = [(r + m - 1) / m for r in range(WORLD)]
    return {"m": m, "n": WORLD, "own": ", ".join(f"{g:g}" for g in own), "answer": sum(own) / WORLD,
            "sum": sum(own), "rank0": own[0], "last": sum(last_only) / WORLD}


register(
    Puzzle(
        "8.z1", "count",
        "Gradient accumulation over {m} micro-batches, written without `no_sync()`, after a first step. "
        "Each layer's gradient is {b_mib} MiB, and so is `bucket_cap_mb`. How many all-reduces does the loop run?",
        "Each layer's gradient fills a bucket: {b} buckets. Without `no_sync()` every backward all-reduces "
        "every bucket: {m} × {b} = **{answer}**, of which only the last {b} were needed.",
        _z1, "answer",
        code=DDP_IMPORTS +
             "net = torch.nn.Sequential(torch.nn.Linear(512, 512, bias=False), torch.nn.Linear(512, 512, bias=False))\n"
             "model = DDP(net, bucket_cap_mb=1)            # 1 MiB of fp32 gradient a layer\n" + COUNTED +
             "model(torch.randn(2, 512)).sum().backward()  # a first step: after it DDP rebuilds its buckets\n"
             "calls.clear()\n"
             "for k in range(4):                           # accumulate 4 micro-batches\n"
             "    model(torch.randn(2, 512)).sum().backward()",
        expr="len(calls)", reads=lambda per: per[0],
        wrong={"synced": "That is what `no_sync()` would give. Here every backward runs DDP's all-reduces.",
               "per_step": "One all-reduce *per bucket* per backward: {b} buckets each time."}),
    Puzzle(
        "8.z2", "count",
        "{ranks} DDP ranks, micro-batches of {micro} samples, {accum} micro-batches accumulated per optimizer "
        "step. How many samples does one optimizer step learn from?",
        "Each rank accumulates {accum} × {micro} samples and DDP averages over the {ranks} ranks: {ranks} × "
        "{micro} × {accum} = **{answer}**, the global batch the learning rate is tuned for.",
        _z2, "answer",
        wrong={"no_ranks": "That is one rank's share. DDP's all-reduce averages the gradients of all {ranks} "
                           "ranks, so every step sees all of their samples.",
               "no_accum": "That is one micro-batch on every rank; the optimizer steps once per {accum} of "
                           "them."}),
    Puzzle(
        "8.z3", "collective",
        "{n} ranks accumulate {m} micro-batches with `no_sync()`, dividing each loss by {m}. What is "
        "`weight.grad` on rank 0 after the loop?",
        "Each rank accumulates (r + 0 + r + 1 + r + 2 + r + 3) / {m}: {own}. The backward outside "
        "`no_sync()` all-reduces the *accumulated* gradients and averages them over the ranks: **{answer:g}**.",
        _z3, "answer",
        code=DDP_IMPORTS + "from contextlib import nullcontext\n"
             "model = DDP(torch.nn.Linear(1, 1, bias=False))\n"
             "for k in range(4):                            # 4 micro-batches\n"
             "    x = torch.tensor([[float(rank + k)]])\n"
             "    with model.no_sync() if k < 3 else nullcontext():\n"
             "        (model(x).sum() / 4).backward()           # the loss divided by the micro-batches",
        expr="model.module.weight.grad.item()", reads=lambda per: per[0],
        # small integers over powers of two are exact in binary; the tolerance forgives typing 3.0 as 3
        rel_tol=1e-6,
        wrong={"rank0": "That is rank 0's accumulated gradient before the all-reduce; the last backward "
                        "averages it with the other ranks'.",
               "sum": "DDP averages over the ranks, it does not sum.",
               "last": "`no_sync()` does not throw the first micro-batches away: it defers their all-reduce "
                       "and the last backward sends everything accumulated."}),
)
