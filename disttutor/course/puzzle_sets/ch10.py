"""Chapter 10's puzzles: the capstone's tokens per step, an epoch's order, clipping, and resuming.

10.z3 runs for real on 4 gloo ranks in the tests; 10.z2 is checked against
``torch.utils.data.DistributedSampler``; 10.z1 and 10.z4 are counted by the tests.
"""
from __future__ import annotations

import math

from disttutor.course.puzzle_sets._code import WORLD
from disttutor.course.puzzles import Puzzle, register


def _z1() -> dict:
    ranks, batch, seq, accum = 2, 8, 128, 4
    return {"ranks": ranks, "batch": batch, "seq": seq, "accum": accum, "answer": ranks * batch * seq * accum,
            "one_rank": batch * seq * accum, "no_accum": ranks * batch * seq}


def _z2() -> dict:
    epochs, seed = 3, 0
    orders = {seed + 0 for _ in range(epochs)}     # the shuffle is seeded by seed + epoch; epoch stays 0
    return {"epochs": epochs, "answer": len(orders), "each": epochs}


def _z3() -> dict:
    grads = [[3.0 * r, 4.0 * r] for r in range(WORLD)]
    mean = [sum(g[i] for g in grads) / WORLD for i in range(2)]
    return {"n": WORLD, "g0": f"{mean[0]:g}", "g1": f"{mean[1]:g}", "answer": math.hypot(*mean),
            "own": math.hypot(*grads[0]), "summed": math.hypot(*(WORLD * v for v in mean)), "clipped": 1.0}


def _z4() -> dict:
    every, done = 100, 370
    last = done // every * every
    return {"every": every, "done": done, "last": last, "answer": done - last, "lost_to_next": last + every - done}


register(
    Puzzle(
        "10.z1", "count",
        "The capstone's loop is configured for {ranks} ranks, {batch} sequences of {seq} tokens per micro-batch "
        "and {accum} micro-batches per optimizer step. How many tokens does one optimizer step learn from?",
        "{ranks} ranks × {batch} sequences × {seq} tokens × {accum} micro-batches = **{answer}** tokens.",
        _z1, "answer",
        wrong={"one_rank": "That is one rank's tokens; DDP averages the gradients of all {ranks} ranks.",
               "no_accum": "That is one micro-batch on each rank; the step accumulates {accum} of them."}),
    Puzzle(
        "10.z2", "data",
        "A shuffling `DistributedSampler` and a loop that forgets `set_epoch`. Over {epochs} epochs, how many "
        "different orders of its samples does rank 0 see?",
        "The sampler shuffles with a generator seeded by `seed + epoch`, and its epoch stays 0 until "
        "`set_epoch` changes it: the same order every epoch, **{answer}**. Call "
        "`sampler.set_epoch(epoch)` before each epoch.",
        _z2, "answer",
        code="from torch.utils.data import DistributedSampler\n"
             "sampler = DistributedSampler(dataset, num_replicas=2, rank=0, shuffle=True, seed=0)\n"
             "for epoch in range(3):\n"
             "    order = list(sampler)                      # no sampler.set_epoch(epoch)",
        wrong={"each": "`shuffle=True` shuffles with a fixed seed plus the epoch the sampler was told; "
                       "without `set_epoch` that epoch never changes."}),
    Puzzle(
        "10.z3", "collective",
        "The capstone clips gradients after DDP's backward. On {n} ranks, what does `clip_grad_norm_` return "
        "on rank 0?",
        "The norm is computed after DDP's all-reduce, from the **averaged** gradient ({g0}, {g1}) that every "
        "rank holds: √({g0}² + {g1}²) = **{answer:g}**. Every rank gets the same norm and clips the same "
        "way, so the replicas stay equal.",
        _z3, "answer",
        code="from torch.nn.parallel import DistributedDataParallel as DDP\n"
             "model = DDP(torch.nn.Linear(2, 1, bias=False))\n"
             "x = torch.tensor([[3.0 * rank, 4.0 * rank]])\n"
             "model(x).sum().backward()\n"
             "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)",
        expr="norm.item()", reads=lambda per: per[0],
        # √(4.5² + 6²) is exactly 7.5; 1 % forgives a rounded square root
        rel_tol=0.01,
        wrong={"own": "Rank 0's own input gives a zero gradient, but DDP's backward replaced it with the "
                      "average over the ranks before the clip.",
               "summed": "DDP averages over the ranks, it does not sum.",
               "clipped": "`clip_grad_norm_` returns the total norm *before* clipping (here the gradients "
                          "are scaled down to norm 1)."}),
    Puzzle(
        "10.z4", "count",
        "The capstone's loop, run with `ckpt_every={every}`, saves a checkpoint after every {every} steps. A rank "
        "is killed after step {done}; the job restarts from the newest checkpoint. How many steps are run a "
        "second time?",
        "The newest checkpoint is from step {last}; steps {last}+1 ... {done} are lost and run again: "
        "**{answer}**. A checkpoint every k steps loses k - 1 steps at worst: the price against the time "
        "each save takes.",
        _z4, "answer",
        wrong={"lost_to_next": "That counts forward to the next checkpoint; the restart goes back to the last "
                               "one, step {last}."}),
)
