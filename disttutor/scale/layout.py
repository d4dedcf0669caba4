"""A parallel layout of one training run: TP, CP, PP (with interleaving), DP with a ZeRO stage, the
micro-batch, the pipeline schedule and activation recomputation, each checked when it is made.

Introduced in chapter 13 (at scale). :class:`Layout` is what :func:`disttutor.scale.planner.predict`
and :func:`disttutor.scale.memory.memory` take; :func:`check` tests a layout against a model and a
batch and returns the number of micro-batches per pipeline. A bad value is a ``ValueError`` that
names the field.
"""
from __future__ import annotations

from dataclasses import dataclass

from disttutor.scale.shapes import ModelShape

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Layout:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    zero: int = 1            # ZeRO stage over dp * cp: 0 (DDP), 1, 2, 3 (FSDP full shard)
    microbatch: int = 1      # sequences per micro-batch (per data-parallel rank)
    v: int = 1               # virtual pipeline stages per rank (interleaved 1F1B)
    schedule: str = "1f1b"   # or "gpipe" (all micro-batches' activations live at once)
    checkpointing: str = "none"  # activation recomputation: "none", "selective" or "full" (True/False: full/none)
    flash: bool = True       # fused attention: no s x s scores stored
    sp: bool = True          # sequence parallelism with TP: every activation split over tp

    def __post_init__(self):
        for k in ("dp", "tp", "pp", "cp", "microbatch", "v"):
            val = getattr(self, k)
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ValueError(f"Layout.{k} must be a positive integer, got {val!r}")
        if isinstance(self.zero, bool) or self.zero not in (0, 1, 2, 3):
            raise ValueError(f"Layout.zero must be a ZeRO stage 0..3, got {self.zero!r}")
        if self.schedule not in ("1f1b", "gpipe"):
            raise ValueError(f"Layout.schedule must be '1f1b' or 'gpipe', got {self.schedule!r}")
        if self.v > 1 and (self.pp == 1 or self.schedule != "1f1b"):
            raise ValueError(f"Layout.v = {self.v} (interleaving) needs pp > 1 and the 1f1b schedule, "
                             f"got pp={self.pp}, schedule={self.schedule!r}")
        ck = self.checkpointing
        if isinstance(ck, bool):  # the older spelling: True = full recomputation, False = none
            object.__setattr__(self, "checkpointing", "full" if ck else "none")
        elif ck not in RECOMPUTE:
            raise ValueError(f"Layout.checkpointing must be one of {RECOMPUTE} (or True/False), got {ck!r}")
        for k in ("flash", "sp"):
            if not isinstance(getattr(self, k), bool):
                raise ValueError(f"Layout.{k} must be True or False, got {getattr(self, k)!r}")

    @property
    def n(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def name(self) -> str:
        parts = [f"{k.upper()}{getattr(self, k)}" for k in ("tp", "cp", "pp", "dp") if getattr(self, k) > 1]
        ac = {"none": "", "selective": " +SAC", "full": " +AC"}[self.checkpointing]
        return " x ".join(parts or ["1 GPU"]) + (f" v{self.v}" if self.v > 1 else "") + f" ZeRO-{self.zero}" + ac


def check(shape: ModelShape, lay: Layout, seq: int, global_batch: int) -> int:
    """Micro-batches per pipeline, ``global_batch / (dp * microbatch)``; a ``ValueError`` naming the field
    when the layout does not fit the model or the batch."""
    for k, val in (("seq", seq), ("global_batch", global_batch)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"{k} must be a positive integer, got {val!r}")
    if shape.heads % lay.tp:
        raise ValueError(f"Layout.tp={lay.tp} must divide the model's heads ({shape.heads})")
    if lay.pp * lay.v > shape.layers:
        raise ValueError(f"Layout.pp * v = {lay.pp * lay.v} exceeds the model's {shape.layers} layers")
    if seq % lay.cp:
        raise ValueError(f"Layout.cp={lay.cp} must divide seq ({seq})")
    if global_batch % (lay.dp * lay.microbatch):
        raise ValueError(f"global_batch {global_batch} is not a multiple of dp * microbatch "
                         f"(Layout.dp={lay.dp}, Layout.microbatch={lay.microbatch})")
    return global_batch // (lay.dp * lay.microbatch)
