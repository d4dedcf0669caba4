"""Chapter 6's puzzles: blocking sends that face each other, and naive model parallelism's idle time.

6.z1 runs for real on 4 gloo ranks in the tests (a short timeout stands for "forever"); 6.z2's answer
is checked against chapter 7's schedule simulator (GPipe with one micro-batch is naive model parallelism).
"""
from __future__ import annotations

from disttutor.course.puzzle_sets._code import WORLD, waiting
from disttutor.course.puzzles import Puzzle, register


def _z1() -> dict:
    pairs = [(r, r ^ 1) for r in range(WORLD) if r < r ^ 1]
    return {"n": WORLD, "pairs": ", ".join(f"{a} ↔ {b}" for a, b in pairs),
            "answer": list(range(WORLD)), "none": [], "evens": [r for r in range(WORLD) if r % 2 == 0]}


def _z2() -> dict:
    p = 3  # not the chapter's Question 6.3 (4 stages), which this would answer
    return {"p": p, "answer": 1 / p, "idle": 1 - 1 / p, "percent": 100 / p,
            "down": ", ".join(map(str, range(p))), "up": ", ".join(map(str, reversed(range(p))))}


register(
    Puzzle(
        "6.z1", "deadlock",
        "The {n} ranks (gloo) pair up ({pairs}) and swap a tensor with their partner. Which ranks wait "
        "forever? (`[]` if none.)",
        "On gloo `dist.send` is blocking: it returns only once the partner has received the data, and the "
        "partner is itself stuck in its own `send`. Every rank waits: **{answer}**. Fix it by posting both sides first "
        "(`dist.isend` and `dist.irecv`, then `wait()` on both), or by ordering them: even ranks send first, "
        "odd ranks receive first.",
        _z1, "answer",
        code="x, y = torch.ones(1000), torch.empty(1000)\n"
             "peer = rank ^ 1                          # 0 <-> 1, 2 <-> 3\n"
             "dist.send(x, dst=peer)\n"
             "dist.recv(y, src=peer)",
        expr="None", reads=waiting, hangs=True,
        wrong={"none": "A blocking `send` does not drop its data into a mailbox and go on: it waits for the "
                       "matching `recv`, which the partner has not posted yet -- it is in its own `send`.",
               "evens": "The pairs are symmetric: both partners run the same two lines, so both are stuck "
                        "in `send`."}),
    Puzzle(
        "6.z2", "schedule",
        "A model is split over {p} GPUs, an equal share of the layers on each, and one batch at a time goes "
        "forward through GPU {down}, then backward through {up}. What fraction of the time is one GPU "
        "computing? (0 to 1.)",
        "Only one GPU works at any moment: the others wait for its activations (forward) or its gradients "
        "(backward). Each is busy 1/{p} of the time, **{answer:.2f}**, idle {idle:.0%}: the reason for "
        "micro-batches (chapter 7).",
        _z2, "answer",
        # 2 % forgives 1/3 rounded to 0.33, and still rejects 0.3 or 1/4
        rel_tol=0.02,
        wrong={"idle": "That is the fraction each GPU is *idle*; the question asks how long it computes."}),
)
