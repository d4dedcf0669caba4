"""Predicting the course's own runs from the fitted constants (chapter 13's first check).

Introduced in chapter 13 (at scale). Three runs of earlier chapters, each predicted from
alpha/beta (per collective) and gamma alone, *before* it is launched:

* :func:`ddp_step` -- ``ddp_scratch --time --wrappers torch`` (chapter 4): the MLP's forward and
  backward, plus one all-reduce per DDP bucket;
* :func:`fsdp_step` -- ``sharding --time`` (chapter 11): FSDP2 on a TinyLM with two units
  (the MLP, and the root holding the tied embedding): all-gather before forward, again before
  backward for the resharded MLP unit, reduce-scatter of the gradients; DDP on the same model;
* :func:`pipeline_step` -- ``pipeline --schedule gpipe`` (chapter 7): ``m + p - 1`` slots of the
  slowest stage's forward + backward, plus the activation / gradient hand-offs on the critical path.

The first model leaves out the optimiser's element-wise work and other memory-bound ops (no FLOP
count describes them), Python and framework overhead per op, and any overlap of communication with
compute. Four measured terms refine it: the compute itself, each run's forward and backward timed alone
(``compute_bench``, :func:`compute_args`, :func:`profiled`) in place of FLOPs / gamma; a pipeline hand-off
sent while its sender computes (``scale_bench --handoff-bytes``, :func:`expected_max`) in place of
alpha + S/B; and in :class:`Overheads`, the update, per parameter element, and a fixed per-step cost fitted
on a width-8 run of the same program (:func:`with_overheads`).
"""
from __future__ import annotations

from dataclasses import dataclass

from disttutor.scale.costmodel import Machine, linear_flops, mlp_step_flops

FP32 = 4


def ddp_buckets(param_bytes_in_order: list[int], cap_bytes: float, first_cap_bytes: float) -> list[int]:
    """DDP's bucket sizes: parameters in *reverse* order (gradients arrive last layer first), each
    added to the open bucket, which closes once it reaches its cap (the first bucket has its own)."""
    buckets, cur, cap = [], 0, first_cap_bytes
    for b in reversed(param_bytes_in_order):
        cur += b
        if cur >= cap:
            buckets.append(cur)
            cur, cap = 0, cap_bytes
    if cur:
        buckets.append(cur)
    return buckets


def mlp_param_bytes(dims: list[int]) -> list[int]:
    out = []
    for a, b in zip(dims[:-1], dims[1:]):
        out += [a * b * FP32, b * FP32]  # weight, bias (registration order)
    return out


def ddp_step(m: Machine, d_in: int, hidden: tuple[int, ...], d_out: int, global_batch: int, n: int,
             bucket_cap_elems: int) -> dict:
    """``ddp_scratch --time`` with torch's DDP: compute + the buckets' all-reduces (seconds)."""
    dims = [d_in, *hidden, d_out]
    cap = bucket_cap_elems * FP32  # the program passes bucket_cap_mb = elements * 4 / 2**20
    buckets = ddp_buckets(mlp_param_bytes(dims), cap, cap)  # a user-set cap is also the first bucket's
    compute = m.compute(mlp_step_flops(global_batch // n, dims))
    comm = sum(m.t("all_reduce", b, n) for b in buckets)
    return {"compute": compute, "comm": comm, "total": compute + comm, "buckets": len(buckets)}


def tinylm_flops(tokens: int, dim: int, ff: int, vocab: int) -> float:
    """Forward + backward matmul FLOPs of :class:`disttutor.sharding.model.TinyLM` (MLP and tied head;
    the embedding is a lookup, not a matmul)."""
    return sum(sum(linear_flops(tokens, a, b)) for a, b in ((dim, ff), (ff, dim), (dim, vocab)))


def tinylm_grad_bytes(dim: int, ff: int, vocab: int) -> list[int]:
    """Gradient bytes of TinyLM's trainable parameters in registration order (the tied embedding
    once; the frozen positional embedding has none): emb, norm w/b, mlp.0 w/b, mlp.2 w/b, head bias."""
    return [b * FP32 for b in (vocab * dim, dim, dim, dim * ff, ff, ff * dim, dim, vocab)]


def fsdp_step(m: Machine, unit_params: dict[str, int], tokens_local: int, dim: int, ff: int, vocab: int,
              n: int) -> dict:
    """``sharding --time``: FSDP2 (two units) and DDP (default buckets) on the same TinyLM."""
    compute = m.compute(tinylm_flops(tokens_local, dim, ff, vocab))
    mlp, root = unit_params["mlp"] * FP32, unit_params["root"] * FP32
    # The MLP unit is resharded after forward: gathered twice. The root is not (FSDP2 keeps the
    # root's parameters after forward: backward needs them at once).
    fsdp_comm = (2 * m.t("all_gather", mlp, n) + m.t("reduce_scatter", mlp, n)
                 + m.t("all_gather", root, n) + m.t("reduce_scatter", root, n))
    # DDP's default: a 1 MiB first bucket, then 25 MiB ones (torch's defaults).
    buckets = ddp_buckets(tinylm_grad_bytes(dim, ff, vocab), 25 * 2**20, 2**20)
    ddp_comm = sum(m.t("all_reduce", b, n) for b in buckets)
    return {"fsdp2": {"compute": compute, "comm": fsdp_comm, "total": compute + fsdp_comm},
            "ddp": {"compute": compute, "comm": ddp_comm, "total": compute + ddp_comm, "buckets": len(buckets)}}


def pipeline_step(m: Machine, d_in: int, width: int, d_out: int, layers_per_stage: int, batch: int,
                  microbatches: int, p: int) -> dict:
    """``pipeline --schedule gpipe`` on ``p`` ranks, one stage each (chapter 7's MLP)."""
    n_linear = p * layers_per_stage
    dims = [d_in] + [width] * (n_linear - 1) + [d_out]
    mb = batch // microbatches
    stage = [mlp_step_flops(mb, dims[s * layers_per_stage:(s + 1) * layers_per_stage + 1]) for s in range(p)]
    slot = m.compute(max(stage))                      # fwd + bwd of one micro-batch on the slowest stage
    compute = microbatches * slot
    bubble = (p - 1) * slot                           # GPipe: (p - 1) idle slots per rank
    handoff = m.t("send_recv", mb * width * FP32, 2)  # one activation (or its gradient) between neighbours
    comm = 2 * (p - 1) * handoff                      # the forward chain and the backward chain
    return {"compute": compute, "bubble": bubble, "comm": comm, "total": compute + bubble + comm}


def tinylm_units(dim: int, ff: int, vocab: int, seq: int) -> dict[str, int]:
    """Parameters of ``sharding --time``'s two FSDP2 units: the MLP, and the root (tied embedding,
    frozen positions, LayerNorm, head bias) -- the program reports the same numbers from the model."""
    return {"mlp": 2 * dim * ff + ff + dim, "root": vocab * dim + seq * dim + 2 * dim + vocab}


@dataclass(frozen=True)
class Overheads:
    """The terms the first model leaves out, each measured on this machine: ``update_s``, seconds per
    parameter element of one optimizer update, by optimizer (``scale_bench``: memory-bound, no FLOP count);
    ``fixed_s``, seconds per step that a run of the same program with every width 8 takes beyond its own
    prediction, by run (Python, hooks, copies, the schedule's actions: what does not grow with the widths)."""

    update_s: dict[str, float]
    fixed_s: dict[str, float]


def fixed_overhead(measured_small: float, predicted_small: dict) -> float:
    """A step's size-independent cost: the width-8 run's measured time less what the model gives it."""
    return max(0.0, measured_small - predicted_small["total"])


def with_overheads(pred: dict, updated_elems: int, optimizer: str, fixed_s: float, update_s: dict[str, float]) -> dict:
    """``pred`` plus the optimizer's update of ``updated_elems`` parameters on the slowest rank and the
    fixed per-step cost (both seconds)."""
    update = updated_elems * update_s[optimizer]
    return {**pred, "update": update, "fixed": fixed_s, "total": pred["total"] + update + fixed_s}


def stage_params(d_in: int, width: int, d_out: int, layers_per_stage: int, p: int) -> list[int]:
    """Parameters (weights and biases) of each of the ``p`` pipeline stages of :func:`pipeline_step`'s MLP."""
    dims = [d_in] + [width] * (p * layers_per_stage - 1) + [d_out]
    return [sum(a * b + b for a, b in zip(dims[s * layers_per_stage:(s + 1) * layers_per_stage],
                                          dims[s * layers_per_stage + 1:(s + 1) * layers_per_stage + 1]))
            for s in range(p)]


VOCAB, SEQ = 64, 8  # TinyLM's vocabulary and sequence length (chapter 11's ``sharding`` program)


def predict_runs(m: Machine, ddp: dict, fsdp: dict, pipe: dict, n: int) -> dict[str, dict]:
    """The first model's seconds per step of the three programs, from their arguments (as chapter 13
    launches them: ``ddp_scratch``'s MLP 16 -> hidden -> 4, ``sharding``'s TinyLM, ``pipeline``'s MLP)."""
    units = tinylm_units(fsdp["time_dim"], fsdp["time_ff"], VOCAB, SEQ)
    shard = fsdp_step(m, units, fsdp["batch"] // n * SEQ, fsdp["time_dim"], fsdp["time_ff"], VOCAB, n)
    return {"DDP (ch 4)": ddp_step(m, 16, ddp["hidden"], 4, ddp["batch"], n, ddp["bucket_cap"]),
            "DDP (ch 11)": shard["ddp"], "FSDP2 (ch 11)": shard["fsdp2"],
            "GPipe (ch 7)": pipeline_step(m, 16, pipe["width"], 4, pipe["layers_per_stage"], pipe["batch"],
                                          pipe["microbatches"], n)}


RUN_MODEL = {"DDP (ch 4)": "mlp", "DDP (ch 11)": "tinylm", "FSDP2 (ch 11)": "tinylm", "GPipe (ch 7)": "stage"}


def compute_args(ddp: dict, fsdp: dict, pipe: dict, n: int) -> dict:
    """``compute_bench``'s arguments for the three runs' compute alone: one rank's rows (the pipeline: its
    micro-batch rows and count), the same layers. DDP and FSDP2 on the TinyLM compute the same thing."""
    return {"models": ("mlp", "tinylm", "stage"),
            "rows": (ddp["batch"] // n, fsdp["batch"] // n, pipe["batch"] // pipe["microbatches"]),
            "hidden": tuple(ddp["hidden"]), "dim": fsdp["time_dim"], "ff": fsdp["time_ff"],
            "width": pipe["width"], "layers_per_stage": pipe["layers_per_stage"],
            "microbatches": pipe["microbatches"]}


def expected_max(samples: list[float], k: int) -> float:
    """The expected largest of ``k`` independent draws from ``samples`` (each equally likely): with the
    samples sorted, the i-th (1-based) is the largest with probability ``(i/N)**k - ((i-1)/N)**k``."""
    xs, n = sorted(samples), len(samples)
    if not n or k < 1:
        raise ValueError(f"expected_max needs samples and k >= 1, got {n} samples, k = {k}")
    return sum(x * (((i + 1) / n) ** k - (i / n) ** k) for i, x in enumerate(xs))


def profiled(pred: dict[str, dict], alone: dict[str, float], microbatches: int, p: int,
             handoffs: list[float] | None = None) -> dict[str, dict]:
    """The first model with its compute replaced by the measured one (``alone``: seconds by model, as
    ``compute_bench`` reports them): DDP and FSDP2 add their communication to it; the pipeline's slowest
    rank computes its ``m`` micro-batches in ``alone`` and idles ``p - 1`` slots of ``alone / m`` (the bubble).
    ``handoffs``: measured times of a hand-off sent while its sender computes (``scale_bench``); each of the
    pipeline's ``2 (p - 1)`` fill and drain phases then waits for the slowest of its ``m`` hand-offs."""
    out = {}
    for run, parts in pred.items():
        t_c = alone[RUN_MODEL[run]]
        new = {**parts, "compute": t_c}
        if "bubble" in parts:
            new["bubble"] = t_c * (p - 1) / microbatches
            if handoffs is not None:
                new["comm"] = 2 * (p - 1) * expected_max(handoffs, microbatches)
        new["total"] = t_c + new.get("bubble", 0.0) + new["comm"]
        out[run] = new
    return out


def updated_params(ddp: dict, fsdp: dict, pipe: dict, n: int) -> dict[str, tuple[int, str]]:
    """``(elements, optimizer)`` the slowest rank updates a step, by run: every parameter under DDP, a
    1/n shard under FSDP2, the largest stage's under PP. SGD in chapters 4 and 7, AdamW in chapter 11."""
    mlp = sum(mlp_param_bytes([16, *ddp["hidden"], 4])) // FP32
    tiny = sum(tinylm_grad_bytes(fsdp["time_dim"], fsdp["time_ff"], VOCAB)) // FP32
    stage = max(stage_params(16, pipe["width"], 4, pipe["layers_per_stage"], n))
    return {"DDP (ch 4)": (mlp, "sgd"), "DDP (ch 11)": (tiny, "adamw"), "FSDP2 (ch 11)": (-(-tiny // n), "adamw"),
            "GPipe (ch 7)": (stage, "sgd")}
