"""Chapter 1's puzzles: the bytes a model's training state takes, from the chapter's memory table.

The bytes per parameter come from :func:`disttutor.sharding.memory.bytes_per_param` (the chapter's
calculator); the tests check them against the table written out by hand.
"""
from __future__ import annotations

import math

from disttutor.course.puzzles import Puzzle, register
from disttutor.sharding.memory import bytes_per_param


def _z1() -> dict:
    params = 7e9
    b = bytes_per_param("mixed", "adam")
    per = sum(b.values())
    return {"params_b": params / 1e9, "w": b["weights"], "g": b["gradients"], "o": b["optimizer"], "per": per,
            "answer": round(per * params / 1e9), "weights_only": round(b["weights"] * params / 1e9),
            "no_master": round((per - 4) * params / 1e9)}  # without the fp32 master copy (4 bytes)


def _z2() -> dict:
    params, gpu_gb = 13e9, 80
    per = sum(bytes_per_param("mixed", "adam").values())
    need = per * params / 1e9
    return {"params_b": params / 1e9, "per": per, "need": need, "gpu_gb": gpu_gb, "ratio": need / gpu_gb,
            "answer": math.ceil(need / gpu_gb), "floor": math.floor(need / gpu_gb)}


register(
    Puzzle(
        "1.z1", "memory",
        "A {params_b:g}B-parameter model trains in mixed precision with Adam. How many GB do its weights, "
        "gradients and optimizer states take together (no activations; 1 GB = 10⁹ bytes)?",
        "Per parameter: {w} bytes of bf16 weights + {g} of bf16 gradients + {o} of fp32 optimizer state "
        "(a master copy of the weights, Adam's two moments) = {per} bytes. {params_b:g}e9 × {per} = "
        "**{answer} GB**: more than one 80 GB GPU holds, before a single activation.",
        _z1, "answer",
        wrong={"weights_only": "That is the bf16 weights alone. Training also keeps their gradients and "
                               "Adam's state: 3 fp32 numbers per parameter.",
               "no_master": "Close: you left out the fp32 master copy of the weights that mixed precision "
                            "keeps for the optimizer (4 bytes a parameter)."}),
    Puzzle(
        "1.z2", "memory",
        "Fully sharded (ZeRO-3 / FSDP), the training state of a {params_b:g}B-parameter model (mixed "
        "precision, Adam) is split evenly over the GPUs. How many {gpu_gb} GB GPUs does it take at least "
        "to hold it (no activations)?",
        "{per} bytes × {params_b:g}e9 = {need:.0f} GB, and {need:.0f} / {gpu_gb} = {ratio:.2f}: round *up*, "
        "**{answer} GPUs** (and some room is still needed for activations).",
        _z2, "answer",
        wrong={"floor": "{ratio:.2f} GPUs rounds up, not down: {floor} GPUs hold only {floor} × {gpu_gb} GB."}),
)
