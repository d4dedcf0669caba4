"""Pipeline schedules on paper: who computes what, when, and how much sits idle.

Introduced in chapter 7 (pipeline parallelism). Pure Python, no torch: this is
the *theory* side of the chapter, the part you can draw. A pipeline of ``p``
ranks runs ``m`` micro-batches of one mini-batch through ``p * v`` stages
(``v`` stages per rank for the interleaved schedule). Each rank executes an
ordered list of actions -- ``F`` (forward of one micro-batch through one stage)
and ``B`` (its backward) -- in the order the schedule prescribes, and an
action can only start once its inputs exist:

* ``F(stage s, mb i)`` needs ``F(s-1, i)`` (the activation from upstream);
* ``B(s, i)`` needs ``F(s, i)`` (its saved activations) and ``B(s+1, i)``
  (the gradient from downstream; the last stage starts from the loss).

:func:`simulate` plays the orders out with zero-cost communication and
returns every slot's start and end: the Gantt chart. The bubble fraction is
then *measured on the drawing* (idle area / total area), which is how the
tests check the textbook formulas rather than assume them:

* GPipe and 1F1B:       ``(p - 1) / (m + p - 1)``
* interleaved 1F1B:     ``(p - 1) / (v*m + p - 1)``  (each stage chunk costs ``1/v``)

The zero-bubble schedules (``interleaved_zb``, ``zbv``; their orders are in
:mod:`disttutor.pipeline.zero_bubble`) split each backward ``B`` into ``I``
(gradient of the stage's input, which upstream waits for) and ``W`` (gradient
of its weights, needed only by the optimizer step), half of ``B``'s cost each:

* ``I(s, i)`` needs ``F(s, i)`` and ``I(s+1, i)`` (the input-gradient from downstream);
* ``W(s, i)`` needs ``I(s, i)``; it frees the micro-batch's activations.

They have no closed-form bubble here: it is read off the drawing.

The rank orders mirror ``torch.distributed.pipelining``'s ``ScheduleGPipe``,
``Schedule1F1B``, ``ScheduleInterleaved1F1B``, ``ScheduleInterleavedZeroBubble``
and ``ScheduleZBVZeroBubble``, so the drawing is what the real run in chapter 7
is trying to do.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal, get_args

from disttutor.pipeline.zero_bubble import interleaved_zb_order, v_stages, zbv_order

ScheduleName = Literal["gpipe", "1f1b", "interleaved"]
SCHEDULES = get_args(ScheduleName)
# Backward split into input- and weight-gradients (chapter 7's zero-bubble section). Kept apart from
# SCHEDULES: those three have a textbook formula and the widget draws them.
ZeroBubbleName = Literal["interleaved_zb", "zbv"]
ZB_SCHEDULES = get_args(ZeroBubbleName)
ALL_SCHEDULES = SCHEDULES + ZB_SCHEDULES


@dataclass(frozen=True)
class PipeSpec:
    """One pipeline configuration: schedule, ranks ``p``, micro-batches ``m``, stages per rank ``v``.

    ``backward_cost`` is the time of one backward relative to one forward
    (about 2 for matmul-heavy layers: a gradient for the input *and* one for
    the weights). A forward of a whole rank's layers costs 1; with ``v``
    stages per rank each stage chunk costs ``1/v``.
    """

    schedule: str = "1f1b"
    p: int = 4
    m: int = 8
    v: int = 1
    backward_cost: float = 2.0

    def __post_init__(self):
        if self.schedule not in ALL_SCHEDULES:
            raise ValueError(f"schedule must be one of {ALL_SCHEDULES}, got {self.schedule!r}")
        for name in ("p", "m", "v"):
            val = getattr(self, name)
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ValueError(f"{name} must be a positive integer, got {val!r}")
        if self.schedule in ("gpipe", "1f1b") and self.v != 1:
            raise ValueError(f"{self.schedule!r} puts one stage on each rank: v must be 1 (got {self.v}); "
                             "use schedule='interleaved' for several stages per rank")
        if self.schedule == "zbv" and self.v != 2:
            raise ValueError(f"'zbv' puts exactly two stages on each rank (a V): v must be 2 (got {self.v})")
        if self.schedule in ("interleaved", "interleaved_zb") and self.m % self.p:
            # torch accepts some other m, but the schedule then degenerates and the textbook
            # formula no longer describes it; keep the widget to the case the formula is about.
            raise ValueError(f"interleaved 1F1B here needs m to be a multiple of p (m={self.m}, p={self.p})")
        if not self.backward_cost > 0:
            raise ValueError(f"backward_cost must be > 0, got {self.backward_cost!r}")

    @property
    def n_stages(self) -> int:
        return self.p * self.v


    def stages_of(self, rank: int) -> list[int]:
        """The stages rank ``rank`` holds: looped (r, r+p, ...) or, for ZB-V, the V (r, 2p-1-r)."""
        return v_stages(self.p, rank) if self.schedule == "zbv" else list(range(rank, self.n_stages, self.p))


@dataclass(frozen=True)
class Action:
    kind: str   # "F", "B" (full backward), or its two halves "I" (input-gradient) and "W" (weight-gradient)
    mb: int     # micro-batch index
    stage: int  # global stage index (rank r holds stages r, r+p, r+2p, ...)


@dataclass(frozen=True)
class Slot:
    rank: int
    kind: str
    mb: int
    stage: int
    start: float
    end: float


@dataclass
class SimulatedSchedule:
    """A drawn schedule: every slot, per rank, with what can be read off it.

    Simulated, not measured: a measured run is a :class:`disttutor.pipeline.timeline.Timeline` per rank
    (chapter 6) or, for chapter 7's pipeline, its reported events read by :func:`slots_from_events`.
    """

    spec: PipeSpec
    slots: list[Slot]
    peak_in_flight: list[float] = field(default_factory=list)  # per rank, in whole-micro-batch units

    @property
    def makespan(self) -> float:
        return bubble_stats(self.slots, self.spec.p)["makespan"]

    def rank_bubble(self, rank: int) -> float:
        return bubble_stats(self.slots, self.spec.p)["per_rank"][rank]

    @property
    def bubble_fraction(self) -> float:
        """Idle area / total area of the drawing (all ranks, start of first slot to end of last)."""
        return bubble_stats(self.slots, self.spec.p)["bubble"]


def bubble_stats(slots: list[Slot], p: int) -> dict:
    """Bubble of a drawn *or measured* timeline, one definition for both.

    The window is the first slot's start to the last slot's end over all
    ranks; a rank's bubble is the part of that window it spends not computing
    (waiting for a neighbour, or -- measured -- sending and receiving).
    """
    t0, t1 = min(s.start for s in slots), max(s.end for s in slots)
    span = t1 - t0
    busy = [sum(s.end - s.start for s in slots if s.rank == r) for r in range(p)]
    return {"makespan": span, "busy": busy, "per_rank": [1.0 - b / span for b in busy],
            "bubble": 1.0 - sum(busy) / (p * span)}


def slots_from_events(timelines: list[list[list]]) -> list[Slot]:
    """A measured run's report -> slots: ``timelines[rank]`` is a list of ``[kind, mb, stage, t0, t1]``
    (what :mod:`disttutor.programs.pipeline` reports)."""
    return [Slot(r, k, int(mb), int(st), float(a), float(b))
            for r, evs in enumerate(timelines) for k, mb, st, a, b in evs]


def formula(spec: PipeSpec) -> float:
    """The textbook bubble fraction (what the drawing should show)."""
    if spec.schedule in ZB_SCHEDULES:
        raise ValueError(f"{spec.schedule!r} has no closed-form bubble here: simulate(spec).bubble_fraction")
    p, m, v = spec.p, spec.m, spec.v
    return float(Fraction(p - 1, v * m + p - 1))


def formula_text(spec: PipeSpec) -> str:
    if spec.schedule == "interleaved":
        return f"(p-1)/(v*m+p-1) = {spec.p - 1}/({spec.v}*{spec.m}+{spec.p - 1}) = {formula(spec):.3f}"
    return f"(p-1)/(m+p-1) = {spec.p - 1}/({spec.m}+{spec.p - 1}) = {formula(spec):.3f}"


def rank_orders(spec: PipeSpec) -> list[list[Action]]:
    """The ordered actions of each rank, as torch's schedule classes issue them."""
    p, m = spec.p, spec.m
    orders: list[list[Action]] = []
    for r in range(p):
        if spec.schedule == "gpipe":
            # All forwards, then all backwards: every micro-batch's activations are alive at once.
            acts = [Action("F", i, r) for i in range(m)] + [Action("B", i, r) for i in range(m)]
        elif spec.schedule == "1f1b":
            # torch's Schedule1F1B: p - r forwards to fill the pipe, then "one backward, one forward".
            warm = min(m, p - r)
            acts = [Action("F", i, r) for i in range(warm)]
            f, b = warm, 0
            while b < m:
                acts.append(Action("B", b, r))
                b += 1
                if f < m:
                    acts.append(Action("F", f, r))
                    f += 1
        elif spec.schedule == "interleaved":
            acts = _interleaved_order(spec, r)
        elif spec.schedule == "interleaved_zb":
            acts = [Action(*op) for op in interleaved_zb_order(p, m, spec.v, r)]
        else:
            acts = [Action(*op) for op in zbv_order(p, m, r)]
        orders.append(acts)
    return orders


def _interleaved_order(spec: PipeSpec, r: int) -> list[Action]:
    """torch's ScheduleInterleaved1F1B order (Megatron-LM's interleaved schedule, depth first)."""
    p, m, v = spec.p, spec.m, spec.v
    per_round = m // max(1, m // p)  # micro-batches per round (= p when m is a multiple of p)
    warmup = min((v - 1) * per_round + 2 * (p - 1 - r), m * v)
    total = m * v
    next_f = [0] * v
    next_b = [0] * v

    def fwd(op: int) -> Action:
        local = (op // per_round) % v
        next_f[local] += 1
        return Action("F", next_f[local] - 1, local * p + r)

    def bwd(op: int) -> Action:
        local = v - 1 - ((op - warmup) // per_round) % v  # backward walks the chunks in reverse
        next_b[local] += 1
        return Action("B", next_b[local] - 1, local * p + r)

    acts = [fwd(op) for op in range(warmup)]
    for op in range(warmup, total):
        acts += [fwd(op), bwd(op)]
    acts += [bwd(op) for op in range(total, total + warmup)]
    return acts


def inputs(a: Action, n_stages: int) -> list[tuple[str, int, int]]:
    """The ``(kind, stage, mb)`` slots whose results ``a`` needs before it can start."""
    if a.kind == "F":
        return [("F", a.stage - 1, a.mb)] if a.stage > 0 else []
    if a.kind == "W":
        return [("I", a.stage, a.mb)]  # the weight-gradient reuses what the input-gradient computed
    need = [("F", a.stage, a.mb)]
    if a.stage < n_stages - 1:
        # The gradient from downstream: its B, or -- a zero-bubble schedule splits every backward -- its I.
        need.append((a.kind, a.stage + 1, a.mb))
    return need


def simulate(spec: PipeSpec) -> SimulatedSchedule:
    """Play the rank orders out: each action starts when its rank is free and its inputs exist."""
    p, v, n_stages = spec.p, spec.v, spec.n_stages
    # I and W share B's cost half and half (for a Linear both are one matmul of the same size).
    cost = {"F": 1.0 / v, "B": spec.backward_cost / v, "I": spec.backward_cost / (2 * v),
            "W": spec.backward_cost / (2 * v)}
    orders = rank_orders(spec)
    done: dict[tuple[str, int, int], float] = {}  # (kind, stage, mb) -> end time
    free = [0.0] * p
    pos = [0] * p
    slots: list[Slot] = []

    def deps(a: Action) -> list[tuple[str, int, int]]:
        return inputs(a, n_stages)

    while any(pos[r] < len(orders[r]) for r in range(p)):
        progressed = False
        for r in range(p):
            while pos[r] < len(orders[r]):
                a = orders[r][pos[r]]
                need = deps(a)
                if not all(d in done for d in need):
                    break
                start = max([free[r], *(done[d] for d in need)])
                end = start + cost[a.kind]
                slots.append(Slot(r, a.kind, a.mb, a.stage, start, end))
                done[(a.kind, a.stage, a.mb)] = end
                free[r] = end
                pos[r] += 1
                progressed = True
        if not progressed:  # an order that waits on itself: a schedule bug, not a long wait
            stuck = {r: orders[r][pos[r]] for r in range(p) if pos[r] < len(orders[r])}
            raise RuntimeError(f"schedule deadlocks: each rank waits on another ({stuck})")
    return SimulatedSchedule(spec, slots, peak_in_flight(spec, orders))


def peak_in_flight(spec: PipeSpec, orders: list[list[Action]] | None = None) -> list[float]:
    """Per rank, the most micro-batches whose activations are held at once (forward done, backward not yet).

    This is the activation memory a schedule needs. With ``v`` stages per rank
    a stage chunk holds ``1/v`` of the rank's activations, hence the units.
    """
    orders = orders or rank_orders(spec)
    peaks = []
    for acts in orders:
        live = peak = 0
        for a in acts:
            live += {"F": 1, "B": -1, "I": 0, "W": -1}[a.kind]  # activations live until B, or until W
            peak = max(peak, live)
        peaks.append(peak / spec.v)
    return peaks
