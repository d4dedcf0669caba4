"""The planner: memory per GPU, step time (compute / exposed communication / bubble), tokens/s/GPU
and MFU of a Transformer on a cluster, for one layout or all sensible ones.

Introduced in chapter 13 (at scale). **The entry point is** :func:`predict` ``(shape, layout,
hardware, seq, global_batch)`` -> :class:`Prediction`; :func:`rank_layouts` calls it for every
layout that fits and sorts them; :func:`rules` computes the two communication-bound rules.

Ranks are placed in the order [TP, CP, PP, DP] from the innermost (Llama 3 paper §3.3.2): a group
stays inside a node (NVLink) when its stride times its size is at most ``gpus_per_node``, else it
uses the network. Per step, with ``m = global_batch / (dp * microbatch)`` micro-batches per pipeline:

* compute ``= tokens * flops_per_token / n / (peak * efficiency)`` (x 4/3 with full activation
  checkpointing: the forward runs twice); ``efficiency`` is the **one** calibration factor;
* bubble ``= compute * (pp - 1) / (v * m)`` (v: virtual stages per rank, interleaved 1F1B);
* TP: 4 all-reduces of one micro-batch's activations per layer and micro-batch, not overlapped;
* CP: an all-gather of K and V per layer and micro-batch forward, a reduce-scatter backward;
* PP: ``2 (pp - 1)`` activation hand-offs on the fill/drain chain (the steady state overlaps them);
* DP/FSDP over ``dp * cp`` ranks, bf16: ZeRO-0 all-reduce of the gradients; ZeRO-1/2 reduce-scatter
  + all-gather; ZeRO-3 two all-gathers (forward, backward) + a reduce-scatter; overlapped with
  compute, only the excess is exposed.

Memory uses chapter 1's calculator (:mod:`disttutor.sharding.memory`), extended: ZeRO shards over
``dp * cp``; activations of ``seq / cp`` tokens per micro-batch, for the micro-batches in flight
(all ``m`` under GPipe, ``min(pp, m)`` under 1F1B); fused attention stores no ``s x s`` scores;
full activation checkpointing keeps one layer's activations plus every layer's input.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from disttutor.sharding.memory import activation_bytes_per_layer, bytes_per_param

from disttutor.scale.costmodel import Link, collective_time
from disttutor.scale.hardware import Hardware
from disttutor.scale.shapes import ModelShape

BF16 = 2


@dataclass(frozen=True)
class Layout:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    zero: int = 1            # ZeRO stage over dp * cp: 0 (DDP), 1, 2, 3 (FSDP full shard)
    microbatch: int = 1      # sequences per micro-batch
    v: int = 1               # virtual pipeline stages per rank (interleaved 1F1B)
    schedule: str = "1f1b"   # or "gpipe" (all micro-batches' activations live at once)
    checkpointing: bool = False
    flash: bool = True       # fused attention: no s x s scores stored
    sp: bool = True          # sequence parallelism with TP: every activation split over tp

    def __post_init__(self):
        for k in ("dp", "tp", "pp", "cp", "microbatch", "v"):
            if int(getattr(self, k)) != getattr(self, k) or getattr(self, k) < 1:
                raise ValueError(f"{k} must be a positive integer, got {getattr(self, k)!r}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero must be 0..3, got {self.zero!r}")
        if self.schedule not in ("1f1b", "gpipe"):
            raise ValueError(f"schedule must be '1f1b' or 'gpipe', got {self.schedule!r}")

    @property
    def n(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def name(self) -> str:
        parts = [f"{k.upper()}{getattr(self, k)}" for k in ("tp", "cp", "pp", "dp") if getattr(self, k) > 1]
        return " x ".join(parts or ["1 GPU"]) + f" ZeRO-{self.zero}" + (" +AC" if self.checkpointing else "")


@dataclass(frozen=True)
class Prediction:
    layout: Layout
    step_s: float
    compute_s: float
    bubble_s: float
    comm_s: dict           # exposed seconds per kind: tp, cp, pp, dp
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float  # model FLOPs (no recomputation) per second per GPU / 1e12
    mfu: float
    memory: dict           # bytes per GPU: weights, gradients, optimizer, activations, total
    fits: bool

    @property
    def exposed_comm_s(self) -> float:
        return sum(self.comm_s.values())

    def row(self) -> dict:
        return {"layout": self.layout.name(), "step_s": self.step_s, "compute_s": self.compute_s,
                "comm_s": self.exposed_comm_s, "bubble_s": self.bubble_s, "tok/s/GPU": self.tokens_per_s_per_gpu,
                "MFU": self.mfu, "GiB/GPU": self.memory["total"] / 2**30, "fits": self.fits}


def _check(shape: ModelShape, lay: Layout, seq: int, global_batch: int) -> int:
    if shape.heads % lay.tp:
        raise ValueError(f"tp={lay.tp} must divide heads ({shape.heads})")
    if lay.pp > shape.layers:
        raise ValueError(f"pp={lay.pp} exceeds the {shape.layers} layers")
    if seq % lay.cp:
        raise ValueError(f"cp={lay.cp} must divide seq ({seq})")
    if global_batch % (lay.dp * lay.microbatch):
        raise ValueError(f"global batch {global_batch} is not a multiple of dp * microbatch = {lay.dp * lay.microbatch}")
    return global_batch // (lay.dp * lay.microbatch)


def memory(shape: ModelShape, lay: Layout, seq: int, global_batch: int, precision: str = "mixed",
           optimizer: str = "adam") -> dict:
    """Bytes per GPU; equal to :func:`disttutor.sharding.memory.per_device` for its cases (cp = 1, GPipe,
    one micro-batch holding the local batch, stored attention scores, no sequence parallelism,
    no checkpointing)."""
    m = _check(shape, lay, seq, global_batch)
    bpp = bytes_per_param(precision, optimizer)
    shard = {part: (lay.dp * lay.cp if lay.zero >= stage else 1)
             for part, stage in (("optimizer", 1), ("gradients", 2), ("weights", 3))}
    out = {p: shape.params() * bpp[p] / (lay.tp * lay.pp) / shard[p] for p in ("weights", "gradients", "optimizer")}
    e = 4 if precision == "fp32" else 2
    s = seq // lay.cp
    per_layer = activation_bytes_per_layer(s, lay.microbatch, shape.hidden, shape.heads, e, lay.tp)
    if lay.flash:  # the a*s*s*b*(2e+1)/t term: scores and softmax, never stored by fused attention
        per_layer -= shape.heads * s * s * lay.microbatch * (2 * e + 1) / lay.tp
    if lay.sp and lay.tp > 1:  # Korthikanti et al. sec. 4.2.2: the rest (norms, dropout) is split over tp too
        sbh = s * lay.microbatch * shape.hidden
        per_layer -= sbh * (4 * e + 2) * (1 - 1 / lay.tp)
    layers = shape.layers // lay.pp
    in_flight = m if lay.schedule == "gpipe" else min(lay.pp, m)
    if lay.checkpointing:  # each layer's input (sequence-parallel: split over tp) + one layer's full set
        out["activations"] = in_flight * layers * s * lay.microbatch * shape.hidden * e / lay.tp + per_layer
    else:
        out["activations"] = in_flight * layers * per_layer
    out["total"] = sum(out[p] for p in ("weights", "gradients", "optimizer", "activations"))
    return out


def _link(hw: Hardware, stride: int, size: int) -> Link:
    inside = stride * size <= hw.gpus_per_node
    return (Link(hw.intra_alpha.value, hw.intra_bw.value) if inside
            else Link(hw.inter_alpha.value, hw.inter_bw.value))


def predict(shape: ModelShape, layout: Layout, hardware: Hardware, seq: int, global_batch: int,
            efficiency: float = 1.0) -> Prediction:
    """Predicted step of ``global_batch`` sequences of ``seq`` tokens (see the module docstring)."""
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency is a fraction of peak in (0, 1], got {efficiency}")
    lay, hw = layout, hardware
    m = _check(shape, lay, seq, global_batch)
    peak = hw.peak_flops.value
    tokens = global_batch * seq
    model_flops = tokens * shape.flops_per_token(seq) / lay.n        # per GPU
    compute = model_flops * (4 / 3 if lay.checkpointing else 1.0) / (peak * efficiency)
    bubble = compute * (lay.pp - 1) / (lay.v * m)
    layers = shape.layers / lay.pp
    act = lay.microbatch * (seq // lay.cp) * shape.hidden * BF16      # one micro-batch's activations
    tp_link = _link(hw, 1, lay.tp)
    cp_link = _link(hw, lay.tp, lay.cp)
    pp_link = _link(hw, lay.tp * lay.cp, lay.pp)
    dp_link = _link(hw, lay.tp, lay.cp * lay.dp) if lay.dp > 1 else cp_link
    kv = 2 * lay.microbatch * seq * shape.kv * shape.head_dim * BF16 / lay.tp  # K and V, gathered over cp
    comm = {"tp": 4 * layers * m * collective_time("all_reduce", act, lay.tp, tp_link),
            "cp": layers * m * (collective_time("all_gather", kv, lay.cp, cp_link)
                                + collective_time("reduce_scatter", kv, lay.cp, cp_link)),
            "pp": 2 * (lay.pp - 1) * collective_time("send_recv", act / lay.tp, 2, pp_link) if lay.pp > 1 else 0.0}
    g, shard_bytes = lay.dp * lay.cp, shape.params() * BF16 / (lay.tp * lay.pp)
    if lay.zero == 0:
        t_dp = collective_time("all_reduce", shard_bytes, g, dp_link)
    else:
        gathers = 2 if lay.zero == 3 else 1
        t_dp = (gathers * collective_time("all_gather", shard_bytes, g, dp_link)
                + collective_time("reduce_scatter", shard_bytes, g, dp_link))
    comm["dp"] = max(0.0, t_dp - compute)                              # hidden under compute, up to it
    step = compute + bubble + sum(comm.values())
    mem = memory(shape, lay, seq, global_batch)
    return Prediction(lay, step, compute, bubble, comm, tokens / step / lay.n, model_flops / step / 1e12,
                      model_flops / step / peak, mem, mem["total"] <= hw.memory_bytes.value)


def rules(shape: ModelShape, hardware: Hardware) -> dict:
    """The two communication-bound rules, for this model on this hardware (all *derived*):

    * data parallel / FSDP hides its traffic under compute when each data-parallel replica
      processes more than ``C / W_net`` tokens per step (C peak FLOP/s, W_net bytes/s per GPU);
    * tensor parallelism over NVLink stays compute-bound up to a degree of about ``F * W_nvlink / C``.
    """
    c = hardware.peak_flops.value
    return {"fsdp_min_tokens_per_replica": c / hardware.inter_bw.value,
            "tp_max_degree": shape.ff * hardware.intra_bw.value / c}


def layouts(shape: ModelShape, n_gpus: int, seq: int, global_batch: int, gpus_per_node: int = 8) -> list[Layout]:
    """Every power-of-two TP (within a node), CP, PP with a data-parallel remainder that divides the batch."""
    out = []
    p2 = [1 << i for i in range(15)]
    for tp in (t for t in p2 if t <= gpus_per_node and shape.heads % t == 0):
        # CP only to cut a long sequence down to 8K-token chunks per GPU (as Llama 3 did at 128K): at
        # shorter chunks the model's lack of a kernel-efficiency-vs-size term would flatter it.
        for cp in (c for c in p2 if c <= 16 and seq % c == 0 and (c == 1 or seq // c >= 8192)):
            for pp in (p for p in p2 if p <= min(32, shape.layers)):
                if n_gpus % (tp * cp * pp):
                    continue
                dp = n_gpus // (tp * cp * pp)
                if global_batch % dp:
                    continue
                for zero in (1, 3):
                    for ac in (False, True):
                        out.append(Layout(dp=dp, tp=tp, pp=pp, cp=cp, zero=zero, v=1 if pp == 1 else 2,
                                          checkpointing=ac))
    return out


def rank_layouts(shape: ModelShape, n_gpus: int, hardware: Hardware, seq: int, global_batch: int,
                 efficiency: float = 1.0, top: int = 8) -> list[Prediction]:
    """The ``top`` parallel layouts that fit in memory, fastest (tokens/s/GPU) first, each with its best
    ZeRO stage and checkpointing choice."""
    preds = [predict(shape, lay, hardware, seq, global_batch, efficiency)
             for lay in layouts(shape, n_gpus, seq, global_batch, hardware.gpus_per_node)]
    # Fastest first; on a tie (e.g. ZeRO-1 and FSDP when both hide their traffic) the smaller memory.
    fitting = sorted((p for p in preds if p.fits), key=lambda p: (-round(p.tokens_per_s_per_gpu, 6), p.memory["total"]))
    seen, out = set(), []
    for p in fitting:  # one row per parallel layout: the ZeRO stage and checkpointing that suit it best
        key = (p.layout.dp, p.layout.tp, p.layout.pp, p.layout.cp)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out[:top]


def as_dict(p: Prediction) -> dict:
    return {**p.row(), "layout_fields": asdict(p.layout), "comm_by_kind": p.comm_s, "memory": p.memory}


def explain(p: Prediction) -> str:
    """Where the step goes, in one line: the shares of compute, bubble and each exposed communication."""
    parts = {"compute": p.compute_s, "bubble": p.bubble_s, **{f"{k.upper()} comm": v for k, v in p.comm_s.items()}}
    shares = ", ".join(f"{k} {v / p.step_s:.0%}" for k, v in parts.items() if v / p.step_s >= 0.005)
    return f"{shares}; {p.memory['total'] / 2**30:.0f} GiB/GPU"
