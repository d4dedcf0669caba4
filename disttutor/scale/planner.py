"""The planner: memory per GPU, step time (compute / exposed communication / bubble), tokens/s/GPU,
MFU and HFU of a Transformer on a cluster, for one layout or all sensible ones.

Introduced in chapter 13 (at scale). **The entry point is** :func:`predict` ``(shape, layout,
hardware, seq, global_batch)`` -> :class:`Prediction`; :func:`rank_layouts` calls it for every
layout that fits and sorts them; :func:`rules` computes the two communication-bound rules.

Ranks are placed in the order [TP, CP, PP, DP] from the innermost (Llama 3 paper §3.3.2): a group
stays inside a node (NVLink) when its stride times its size is at most ``gpus_per_node``, else it
uses the network. Per step, with ``m = global_batch / (dp * microbatch)`` micro-batches per pipeline:

* compute ``= hardware FLOPs / n / (peak * efficiency)``: the model's FLOPs, plus the recomputed
  forward -- ``"selective"``: attention's scores and values (a third of ``12 L h s`` a token, Korthikanti
  et al. §5), ``"full"``: the whole forward (x 4/3); ``efficiency`` is the hardware's calibrated
  fraction of peak (``hardware.efficiency``, :mod:`disttutor.scale.calibration`) unless one is passed;
* bubble ``= compute * (pp - 1) / (v * m)`` (v: virtual stages per rank, interleaved 1F1B);
* TP: 4 all-reduces of one micro-batch's activations per layer and micro-batch (6 when the forward
  is recomputed), not overlapped;
* CP: an all-gather of K and V per layer and micro-batch forward, a reduce-scatter backward;
* PP: ``2 (pp - 1)`` activation hand-offs on the fill/drain chain (the steady state overlaps them);
* DP/FSDP over ``dp * cp`` ranks, bf16: ZeRO-0 all-reduce of the gradients; ZeRO-1/2 reduce-scatter
  + all-gather; ZeRO-3 two all-gathers (forward, backward) + a reduce-scatter **per micro-batch**
  (with a pipeline, once per step: the stage stays gathered); overlapped with compute, only the excess
  is exposed.

MFU counts the model's FLOPs, HFU the FLOPs the hardware ran (recomputation included); both over
the peak. Memory: :mod:`disttutor.scale.memory`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from disttutor.scale.costmodel import Link, collective_time
from disttutor.scale.hardware import Hardware
from disttutor.scale.layout import Layout, check
from disttutor.scale.memory import memory
from disttutor.scale.shapes import ModelShape

BF16 = 2
__all__ = ["Layout", "Prediction", "memory", "predict", "rank_layouts", "rules", "layouts", "explain"]


@dataclass(frozen=True)
class Prediction:
    layout: Layout
    step_s: float
    compute_s: float
    bubble_s: float
    comm_s: dict           # exposed seconds per kind: tp, cp, pp, dp
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float  # model FLOPs (no recomputation) per second per GPU / 1e12
    mfu: float             # model FLOPs / step / peak
    memory: dict           # bytes per GPU: weights, gradients, optimizer, activations, transients, total
    fits: bool
    hfu: float = 0.0       # hardware FLOPs (recomputation included) / step / peak
    efficiency: float = 1.0  # the fraction of peak used for compute

    @property
    def exposed_comm_s(self) -> float:
        return sum(self.comm_s.values())

    def metric(self, name: str) -> float:
        """One of ``tokens/s/GPU``, ``TFLOPs/GPU`` (model FLOPs), ``MFU``, ``HFU``, ``step_s``."""
        table = {"tokens/s/GPU": self.tokens_per_s_per_gpu, "TFLOPs/GPU": self.tflops_per_gpu, "MFU": self.mfu,
                 "HFU": self.hfu, "step_s": self.step_s}
        if name not in table:
            raise ValueError(f"metric must be one of {list(table)}, got {name!r}")
        return table[name]

    def row(self) -> dict:
        return {"layout": self.layout.name(), "step_s": self.step_s, "compute_s": self.compute_s,
                "comm_s": self.exposed_comm_s, "bubble_s": self.bubble_s, "tok/s/GPU": self.tokens_per_s_per_gpu,
                "MFU": self.mfu, "GiB/GPU": self.memory["total"] / 2**30, "fits": self.fits}


def _link(hw: Hardware, stride: int, size: int) -> Link:
    """The link a group of ``size`` ranks, ``stride`` apart, runs its ring on. Inside a node: NVLink.
    Across nodes, NCCL runs one ring per NIC: a group with ``k = gpus_per_node / stride`` members in
    each node drives ``k`` NICs at once, so its bus bandwidth is ``min(NVLink, k x NIC)`` (derived)."""
    if stride * size <= hw.gpus_per_node:
        return Link(hw.intra_alpha.value, hw.intra_bw.value)
    per_node = max(1, hw.gpus_per_node // stride)
    return Link(hw.inter_alpha.value, min(hw.intra_bw.value, per_node * hw.inter_bw.value))


def efficiency_of(hardware: Hardware, efficiency: float | None) -> float:
    """The efficiency passed, else the hardware's calibrated one, else 1 (every matmul at peak)."""
    if efficiency is None:
        efficiency = hardware.efficiency.value if hardware.efficiency is not None else 1.0
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency is a fraction of peak in (0, 1], got {efficiency}")
    return efficiency


def recomputed_flops_per_token(shape: ModelShape, seq: int, checkpointing: str) -> float:
    """FLOPs a token's recomputation adds: none; attention's forward; or the whole forward (a third)."""
    if checkpointing == "full":
        return shape.flops_per_token(seq) / 3
    if checkpointing == "selective":
        return shape.attention_flops_per_token(seq) / 3
    return 0.0


def predict(shape: ModelShape, layout: Layout, hardware: Hardware, seq: int, global_batch: int,
            efficiency: float | None = None) -> Prediction:
    """Predicted step of ``global_batch`` sequences of ``seq`` tokens (see the module docstring)."""
    lay, hw = layout, hardware
    eff = efficiency_of(hw, efficiency)
    m = check(shape, lay, seq, global_batch)
    peak = hw.peak_flops.value
    tokens = global_batch * seq
    model_flops = tokens * shape.flops_per_token(seq) / lay.n        # per GPU
    hw_flops = model_flops + tokens * recomputed_flops_per_token(shape, seq, lay.checkpointing) / lay.n
    compute = hw_flops / (peak * eff)
    bubble = compute * (lay.pp - 1) / (lay.v * m)
    layers = shape.layers / lay.pp
    act = lay.microbatch * (seq // lay.cp) * shape.hidden * BF16      # one micro-batch's activations
    tp_link = _link(hw, 1, lay.tp)
    cp_link = _link(hw, lay.tp, lay.cp)
    pp_link = _link(hw, lay.tp * lay.cp, lay.pp)
    dp_link = _link(hw, lay.tp, lay.cp * lay.dp) if lay.dp > 1 else cp_link
    kv = 2 * lay.microbatch * seq * shape.kv * shape.head_dim * BF16 / lay.tp  # K and V, gathered over cp
    tp_calls = 6 if lay.checkpointing == "full" else 4
    comm = {"tp": tp_calls * layers * m * collective_time("all_reduce", act, lay.tp, tp_link),
            "cp": layers * m * (collective_time("all_gather", kv, lay.cp, cp_link)
                                + collective_time("reduce_scatter", kv, lay.cp, cp_link)),
            "pp": 2 * (lay.pp - 1) * collective_time("send_recv", act / lay.tp, 2, pp_link) if lay.pp > 1 else 0.0}
    g, shard_bytes = lay.dp * lay.cp, shape.params() * BF16 / (lay.tp * lay.pp)
    if lay.zero == 0:
        t_dp = collective_time("all_reduce", shard_bytes, g, dp_link)
    elif lay.zero == 3 and lay.pp == 1:  # gathered and resharded around every micro-batch
        t_dp = m * (2 * collective_time("all_gather", shard_bytes, g, dp_link)
                    + collective_time("reduce_scatter", shard_bytes, g, dp_link))
    else:
        t_dp = (collective_time("all_gather", shard_bytes, g, dp_link)
                + collective_time("reduce_scatter", shard_bytes, g, dp_link))
    comm["dp"] = max(0.0, t_dp - compute)                              # hidden under compute, up to it
    step = compute + bubble + sum(comm.values())
    mem = memory(shape, lay, seq, global_batch)
    return Prediction(lay, step, compute, bubble, comm, tokens / step / lay.n, model_flops / step / 1e12,
                      model_flops / step / peak, mem, mem["total"] <= hw.memory_bytes.value,
                      hw_flops / step / peak, eff)


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
                                          checkpointing="full" if ac else "none"))
    return out


def rank_layouts(shape: ModelShape, n_gpus: int, hardware: Hardware, seq: int, global_batch: int,
                 efficiency: float | None = None, top: int = 8) -> list[Prediction]:
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
