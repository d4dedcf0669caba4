"""Zero-bubble pipeline orders on paper: backward split into input-gradient (I) and weight-gradient (W).

Introduced in chapter 7. Pure Python, no torch. A stage's backward does two
different jobs: ``I`` computes the gradient with respect to the stage's
*input* (``grad_out @ W`` for a Linear), which the previous stage is waiting
for, and ``W`` computes the gradient with respect to the stage's *weights*
(``x.T @ grad_out``), which nobody needs until the optimizer step. 1F1B runs
both at once (a full backward ``B = I + W``); the zero-bubble schedules
(Qi et al. 2023, "Zero Bubble Pipeline Parallelism", arXiv:2401.10241) send
``I`` upstream as soon as it is done and push ``W`` later, into the slots
where 1F1B would wait: the drain's bubble fills with weight gradients.

The orders below mirror ``torch.distributed.pipelining``'s
``ScheduleInterleavedZeroBubble`` (ZB1P, looped placement: rank ``r`` holds
stages ``r, r+p, ...``) and ``ScheduleZBVZeroBubble`` (ZB-V, two stages per
rank in a V: rank ``r`` holds stages ``r`` and ``2p-1-r``, so the first and
last stage share rank 0). The tests compare them with torch's own
``pipeline_order``, action for action. Each order is a list of
``(kind, mb, stage)`` with ``kind`` in ``F``, ``I``, ``W``.
"""
from __future__ import annotations

Op = tuple[str, int, int]  # (kind, micro-batch, stage)


def v_stages(p: int, r: int) -> list[int]:
    """ZB-V's placement: the model goes down the ranks (stages 0..p-1) and back up (p..2p-1)."""
    return [r, 2 * p - 1 - r]


def interleaved_zb_order(p: int, m: int, v: int, r: int) -> list[Op]:
    """torch's ScheduleInterleavedZeroBubble for rank ``r`` (its ``_get_1f1b_rank_ops`` with zero bubble)."""
    rounds = max(1, m // p)
    per_round = m // rounds
    if m % rounds:
        raise ValueError(f"zero bubble needs m to be a multiple of the number of rounds ({rounds}), got m={m}")
    warmup = min((v - 1) * per_round + (p - 1 - r), m * v)  # one forward per hop to the last rank
    total = m * v

    def fwd_stage(op: int) -> int:
        return ((op // per_round) % v) * p + r

    def bwd_stage(op: int) -> int:
        return (v - 1 - ((op - warmup) // per_round) % v) * p + r  # backward walks the chunks in reverse

    nxt = {"F": {}, "I": {}, "W": {}}
    out: list[Op] = []

    def emit(kind: str, stage: int) -> None:
        mb = nxt[kind].get(stage, 0)
        nxt[kind][stage] = mb + 1
        out.append((kind, mb, stage))

    backward_ops: list[int] = []
    w_done = 0
    for op in range(total + warmup):
        if op < warmup:
            emit("F", fwd_stage(op))
            continue
        if op < total:  # steady state: one forward, one input-gradient
            emit("F", fwd_stage(op))
        emit("I", bwd_stage(op))
        backward_ops.append(op)
        # Rank r lets r input-gradients go ahead before it starts paying the weight-gradients back:
        # those are the slots where, in 1F1B, it would wait for the gradient from downstream.
        if op - warmup >= r:
            emit("W", bwd_stage(backward_ops[w_done]))
            w_done += 1
    while w_done < len(backward_ops):  # the drain: what is left of W fills the end of the step
        emit("W", bwd_stage(backward_ops[w_done]))
        w_done += 1
    return out


def zbv_order(p: int, m: int, r: int) -> list[Op]:
    """torch's ScheduleZBVZeroBubble for rank ``r`` (two stages per rank, V placement)."""
    n = max(2 * p - 1, m)  # the schedule is written for enough micro-batches; extra ones are dropped at the end
    c0, c1 = v_stages(p, r)
    cnt = {"F0": 0, "F1": 0, "B0": 0, "B1": 0}
    out: list[Op] = []

    def f(chunk: int) -> None:
        out.append(("F", cnt[f"F{chunk}"], (c0, c1)[chunk]))
        cnt[f"F{chunk}"] += 1

    def i_w(chunk: int, weight: bool = True) -> None:
        mb, stage = cnt[f"B{chunk}"], (c0, c1)[chunk]
        out.append(("I", mb, stage))
        if weight:
            out.append(("W", mb, stage))
        cnt[f"B{chunk}"] += 1

    for _ in range(2 * (p - r) - 1):   # warm-up: down the V on chunk 0
        f(0)
    for _ in range(r):
        f(1)
        f(0)
    for _ in range(p - r):             # the bottom of the V: chunk 1 turns around at once
        f(1)
        i_w(1)
    while cnt["F1"] < cnt["F0"] or cnt["F0"] < n:  # steady state
        if cnt["F0"] < n:
            f(0)
        i_w(0)
        f(1)
        i_w(1)
    w0, w1 = cnt["B0"], cnt["B1"]
    for _ in range(r):                 # cool-down: input-gradients first, weights deferred
        i_w(0, weight=False)
        i_w(1, weight=False)
    for _ in range(p - r):
        i_w(0, weight=False)
        out.append(("W", w0, c0))
        w0 += 1
    out += [("W", mb, c1) for mb in range(w1, cnt["B1"])]
    out += [("W", mb, c0) for mb in range(w0, cnt["B0"])]
    return [op for op in out if op[1] < m]
