"""Memory per GPU of a Transformer at scale: chapter 1's calculator extended to a full layout, plus the
transient terms that set the peak.

Introduced in chapter 13 (at scale). Steady parts (:mod:`disttutor.sharding.memory`): weights,
gradients and optimizer state per ZeRO stage, sharded over ``dp * cp`` and split over ``tp * pp``;
activations of ``seq / cp`` tokens per micro-batch (Korthikanti et al.'s per-layer count, with a
gated or wider MLP and grouped-query K and V), for the micro-batches in flight on a stage. Recomputation:

* ``"none"``: every layer keeps its activations;
* ``"full"``: each layer keeps its input, plus one layer's full set while it is recomputed;
* ``"selective"``: torchtitan's op policy (``selective_ac_option = 'op'``, its Llama 3 8B default):
  the layer input, the attention output and every other matmul output (Q, V, the MLP's first and,
  gated, the down projection) are kept, the rest is recomputed.

Transient terms (``transient=True``):

* **units in flight** under ZeRO-3: the current and the next FSDP unit (one layer; the largest unit
  is the embedding or the output layer) gathered in bf16, and their bf16 gradients in backward. With
  a pipeline, torchtitan does not reshard after forward (it would gather once per micro-batch): the
  stage's weights stay gathered in bf16 and its gradients accumulate unsharded in fp32;
* **logits and loss** on the last stage: ``tokens x vocab / tp x 4`` bytes in fp32, and their gradient;
* an **allocator reserve**: :data:`RESERVE` of the rest (caching and fragmentation), *assumed*.

The peak is the larger of the first stage (most micro-batches in flight) and the last (the logits).
"""
from __future__ import annotations

from disttutor.sharding.memory import activation_bytes_per_layer, bytes_per_param

from disttutor.scale.hardware import Constant
from disttutor.scale.layout import Layout, check
from disttutor.scale.shapes import ModelShape

RESERVE = Constant(0.10, "fraction", "assumed",
                   "the caching allocator's reserved-but-unused share (fragmentation, cached blocks): an order of "
                   "magnitude, no published figure; torchtitan reports the allocator's peak reserved memory")
FP32, BF16 = 4, 2


def layer_bytes(shape: ModelShape, lay: Layout, s: int, e: int) -> float:
    """One layer's activations for one micro-batch of ``s`` tokens per sequence, nothing recomputed."""
    b, h, t = lay.microbatch, shape.hidden, lay.tp
    per_layer = activation_bytes_per_layer(s, b, h, shape.heads, e, t)
    # Korthikanti's MLP is 4h wide and ungated (8eh a token over tp); K and V are h wide each
    per_layer += s * b * ((4 if shape.gated else 2) * e * shape.ff - 8 * e * h) / t
    per_layer -= s * b * 2 * e * (h - shape.kv * shape.head_dim) / t
    if lay.flash:  # the a*s*s*b*(2e+1)/t term: scores and softmax, never stored by fused attention
        per_layer -= shape.heads * s * s * b * (2 * e + 1) / t
    if lay.sp and t > 1:  # Korthikanti et al. sec. 4.2.2: the rest (norms, dropout) is split over tp too
        per_layer -= s * b * h * (4 * e + 2) * (1 - 1 / t)
    return per_layer


def kept_bytes(shape: ModelShape, lay: Layout, s: int, e: int) -> float:
    """What one layer keeps for one micro-batch under recomputation (``"full"`` or ``"selective"``)."""
    split = lay.tp if lay.sp else 1
    kept = shape.hidden / split                                         # the layer's input
    if lay.checkpointing == "selective":
        kept += shape.hidden / lay.tp                                   # attention's output
        kept += sum(w for i, w in enumerate(shape.matmul_outputs()) if i % 2 == 0) / lay.tp
    return s * lay.microbatch * kept * e


def in_flight(lay: Layout, m: int) -> float:
    """Layer-micro-batches whose activations the first stage holds at once, in units of a stage's layers."""
    if lay.schedule == "gpipe":
        return m
    if lay.v == 1:
        return min(lay.pp, m)
    # interleaved 1F1B, rank 0: (v - 1) pp + 2 (pp - 1) warm-up forwards + 1, each of 1/v of the stage
    return min((lay.v - 1) * lay.pp + 2 * (lay.pp - 1) + 1, m * lay.v) / lay.v


def memory(shape: ModelShape, lay: Layout, seq: int, global_batch: int, precision: str = "mixed",
           optimizer: str = "adam", transient: bool = True) -> dict:
    """Bytes per GPU at the peak (see the module docstring). With ``transient=False`` and no recomputation,
    equal to :func:`disttutor.sharding.memory.per_device` for its cases (cp = 1, GPipe, one micro-batch
    holding the local batch, stored attention scores, no sequence parallelism)."""
    m = check(shape, lay, seq, global_batch)
    bpp = bytes_per_param(precision, optimizer)
    shard = {part: (lay.dp * lay.cp if lay.zero >= stage else 1)
             for part, stage in (("optimizer", 1), ("gradients", 2), ("weights", 3))}
    out = {p: shape.params() * bpp[p] / (lay.tp * lay.pp) / shard[p] for p in ("weights", "gradients", "optimizer")}
    e = FP32 if precision == "fp32" else BF16
    s = seq // lay.cp
    full = layer_bytes(shape, lay, s, e)
    layers = shape.layers // lay.pp
    per = full if lay.checkpointing == "none" else kept_bytes(shape, lay, s, e)
    extra = 0.0 if lay.checkpointing == "none" else full  # one layer recomputed in backward
    first = in_flight(lay, m) * layers * per + extra
    last = (m if lay.schedule == "gpipe" else 1) * layers * per + extra if lay.pp > 1 else first
    logits = FP32 * 2 * s * lay.microbatch * shape.vocab / lay.tp if transient else 0.0
    units = 0.0
    if transient and lay.zero == 3 and lay.dp * lay.cp > 1:
        if lay.pp == 1:  # current + next unit, bf16 weights and bf16 gradients
            biggest = max(shape.layer_params(), shape.vocab * shape.hidden)
            units = (biggest + shape.layer_params()) / lay.tp * (BF16 + BF16)
        else:            # the stage stays gathered (bf16) and accumulates unsharded fp32 gradients
            units = shape.params() / (lay.tp * lay.pp) * (BF16 + FP32)
    stages = {"first": (first, 0.0 if lay.pp > 1 else logits), "last": (last, logits)}
    stage = max(stages, key=lambda k: sum(stages[k]))
    out["activations"], out["logits"] = stages[stage]
    out["units"] = units
    steady = sum(out[p] for p in ("weights", "gradients", "optimizer", "activations", "logits", "units"))
    out["reserve"] = RESERVE.value * steady if transient else 0.0
    out["total"] = steady + out["reserve"]
    out["stage"] = stage
    return out
