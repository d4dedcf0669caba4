"""Chapter 7's puzzles: bubbles and held activations of the pipeline schedules.

``values`` uses the textbook formulas; the tests check each answer on the chapter's simulator
(:func:`disttutor.pipeline.schedules.simulate`: the drawing's idle area, and ``peak_in_flight``).
"""
from __future__ import annotations

from disttutor.course.puzzles import Puzzle, register


def _bubble(p: int, m: int, v: int = 1) -> float:
    return (p - 1) / (v * m + p - 1)


# Not the chapter's drawn and tabulated case (p = 4, m = 8): the answers are not printed above.
def _z1() -> dict:
    p, m = 3, 6
    return {"p": p, "m": m, "pm1": p - 1, "den": m + p - 1, "answer": _bubble(p, m), "per_work": (p - 1) / m,
            "naive": 1 - 1 / p}


def _z2() -> dict:
    p, m = 3, 6
    return {"p": p, "m": m, "answer": m, "stages": p, "one": 1}


def _z3() -> dict:
    p, m, v = 3, 6, 2
    return {"p": p, "m": m, "v": v, "pm1": p - 1, "den": v * m + p - 1, "answer": _bubble(p, m, v),
            "plain": _bubble(p, m)}


def _z4() -> dict:
    p, target = 4, 0.05
    m = 1
    while _bubble(p, m) > target:
        m += 1
    per_work = 1
    while (p - 1) / per_work > target:
        per_work += 1
    return {"p": p, "pct": f"{target:.0%}", "t": target, "k": round((1 - target) / target), "answer": m,
            "prev": _bubble(p, m - 1), "at": _bubble(p, m),
            "per_work": per_work}


register(
    Puzzle(
        "7.z1", "schedule",
        "GPipe on {p} stages with {m} micro-batches (equal stages, free communication). What fraction of "
        "the schedule's area is bubble (idle)? A number between 0 and 1.",
        "The last micro-batch's forward leaves stage 0 after {m} slots and needs {pm1} more to reach the "
        "end, and the backward mirrors it: each stage idles $p-1$ of $m+p-1$ slots, "
        "(p-1)/(m+p-1) = {pm1}/{den} = **{answer:.3f}**.",
        _z1, "answer",
        # 2/8 = 0.25 exactly; 2 % takes a rounded 0.25x, while 2/6 or 2/3 are far off
        rel_tol=0.02,
        wrong={"per_work": "That is (p-1)/m: the bubble *relative to the useful work*. As a fraction of the "
                           "whole schedule it is (p-1)/(m+p-1).",
               "naive": "That is naive model parallelism (one batch, no micro-batches): micro-batches let "
                        "the stages overlap."}),
    Puzzle(
        "7.z2", "schedule",
        "GPipe on {p} stages with {m} micro-batches. At its peak, how many micro-batches' activations does "
        "stage 0 hold at once?",
        "GPipe runs every forward before the first backward, and a micro-batch's activations are freed only "
        "by its backward: stage 0 holds all **{answer}** at once, so its activation memory grows with m. "
        "That is what 1F1B was designed to bound.",
        _z2, "answer",
        wrong={"stages": "That would need backwards to start while forwards are still running; GPipe runs "
                         "*all* {m} forwards first and frees nothing until then.",
               "one": "A micro-batch's activations stay until its backward, and GPipe's first backward comes "
                      "after the last forward."}),
    Puzzle(
        "7.z3", "schedule",
        "Interleaved 1F1B on {p} ranks, {v} stages per rank, {m} micro-batches. What fraction of the "
        "schedule is bubble?",
        "Each rank's work is cut into {v} chunks that cost 1/{v} each, so the ramp of p-1 slots is {v} "
        "times shorter relative to the work: (p-1)/(v·m+p-1) = {pm1}/{den} = **{answer:.3f}**, against "
        "{plain:.3f} for plain 1F1B, for more messages.",
        _z3, "answer",
        # 2/14 = 0.1429: two-digit rounding (0.14) is 2.0 % low, so 2.5 %; plain 1F1B's 0.25 is not close
        rel_tol=0.025,
        wrong={"plain": "That is plain 1F1B. With {v} stages per rank each slot is {v} times shorter and the "
                        "ramp shrinks with it: (p-1)/(v·m+p-1)."}),
    Puzzle(
        "7.z4", "schedule",
        "1F1B on {p} stages. What is the fewest micro-batches that keep the bubble at or below {pct} of the "
        "schedule?",
        "(p-1)/(m+p-1) ≤ {t:g} means m ≥ {k}(p-1): **{answer}** micro-batches ({at:.3f}; one fewer gives "
        "{prev:.4f}).",
        _z4, "answer",
        wrong={"per_work": "That solves (p-1)/m ≤ {t:g}, the bubble relative to the work; as a fraction of the "
                           "schedule the denominator is m+p-1."}),
)
