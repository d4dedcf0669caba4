"""Why a measured pipeline bubble is not the formula's: theory + measured overhead (chapter 7).

The simulator (:mod:`disttutor.pipeline.schedules`) draws a schedule with equal slots
and free communication. A real run differs in three measurable ways, and this
module measures each from the run's own timeline and puts them back into the
same simulator:

1. **slot times**: each rank's mean forward and backward (wall time). They are
   not 1 and 2: the first stage copies its input, the last computes the loss,
   and a slot stretches when its rank waits for a CPU core (ranks time-share
   the cores when there are more ranks than cores);
2. **local gap**: on one rank, the time from the end of a slot to the start of
   the next one when nothing had to arrive -- Python in the schedule, posting
   sends and receives, the loss, waiting for a core;
3. **hand-off gap**: from the end of a neighbour's slot that produced this
   slot's input to this slot's start -- the send/receive over gloo, the
   receiver waking up (and, again, waiting for a core).

:func:`replay` plays the schedule's rank orders with those per-rank means
(four numbers per rank; no individual slot is replayed) and
:func:`explain` compares its bubble with the measured one. CPU time per slot
and per step (reported by :mod:`disttutor.programs.pipeline`) split the
overhead further: how much of it was the process working, how much waiting.
"""
from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean

from disttutor.pipeline.schedules import (Action, PipeSpec, Slot, bubble_stats, formula, inputs, rank_orders,
                                 slots_from_events)


@dataclass(frozen=True)
class RankCosts:
    """One rank's measured means, in seconds."""

    forward: float
    backward: float
    gap_local: float    # previous slot on this rank -> next slot, when no input had to arrive
    gap_handoff: float  # a neighbour's producing slot -> this slot, when this rank was waiting for it


def _gaps(spec: PipeSpec, slots: list[Slot], rounds: int = 4) -> tuple[list[list[float]], list[list[float]]]:
    """Per rank: the local gaps and the hand-off gaps of a measured timeline (see the module doc).

    Which constraint held a slot back is not written on it: it is the later of "my previous slot
    ended + local gap" and "my input arrived + hand-off gap", and the gaps are what we measure.
    So classify by end times first, then re-classify with the means found, a few rounds (it
    settles at once on real runs; on a drawn timeline it recovers the drawn gaps exactly).
    """
    by_key = {(s.kind, s.stage, s.mb): s for s in slots}
    waits = []  # (rank, start, latest local end or None, latest remote end or None)
    for r in range(spec.p):
        prev_end = None
        for s in sorted((s for s in slots if s.rank == r), key=lambda s: s.start):
            producers = [by_key[k] for k in inputs(Action(s.kind, s.mb, s.stage), spec.n_stages) if k in by_key]
            here = [x.end for x in producers if x.rank == r] + ([prev_end] if prev_end is not None else [])
            there = [x.end for x in producers if x.rank != r]
            waits.append((r, s.start, max(here) if here else None, max(there) if there else None))
            prev_end = s.end
    gl, gh = [0.0] * spec.p, [0.0] * spec.p
    for _ in range(rounds):
        local: list[list[float]] = [[] for _ in range(spec.p)]
        handoff: list[list[float]] = [[] for _ in range(spec.p)]
        for r, start, here, there in waits:
            if there is not None and (here is None or there + gh[r] > here + gl[r]):
                handoff[r].append(start - there)  # it was waiting for the neighbour
            elif here is not None:
                local[r].append(start - here)
        gl = [fmean(g) if g else gl[r] for r, g in enumerate(local)]
        gh = [fmean(g) if g else gh[r] for r, g in enumerate(handoff)]
    return local, handoff


def rank_costs(spec: PipeSpec, slots: list[Slot]) -> list[RankCosts]:
    """Each rank's mean forward, backward, local gap and hand-off gap, measured on ``slots``."""
    local, handoff = _gaps(spec, slots)
    everyone = [g for gs in local + handoff for g in gs] or [0.0]
    out = []
    for r in range(spec.p):
        mine = [s for s in slots if s.rank == r]
        f = [s.end - s.start for s in mine if s.kind == "F"]
        b = [s.end - s.start for s in mine if s.kind == "B"]
        if not f or not b:
            raise ValueError(f"rank {r} has no measured forward or backward slot: not a full pipeline step")
        # A rank may never see one kind of gap (rank 0 of GPipe only waits for hand-offs in the drain):
        # then the mean over all ranks stands in, it is never used on that rank's own path anyway.
        out.append(RankCosts(fmean(f), fmean(b), fmean(local[r]) if local[r] else fmean(everyone),
                             fmean(handoff[r]) if handoff[r] else fmean(everyone)))
    return out


def replay(spec: PipeSpec, costs: list[RankCosts], overhead: bool = True) -> list[Slot]:
    """The simulator's schedule with measured slot times and (``overhead=True``) the measured gaps."""
    if len(costs) != spec.p:
        raise ValueError(f"need one RankCosts per rank: {spec.p} ranks, got {len(costs)}")
    orders = rank_orders(spec)
    done: dict[tuple[str, int, int], tuple[int, float]] = {}  # (kind, stage, mb) -> (rank, end)
    free: list[float | None] = [None] * spec.p
    pos = [0] * spec.p
    slots: list[Slot] = []
    while any(pos[r] < len(orders[r]) for r in range(spec.p)):
        progressed = False
        for r, c in enumerate(costs):
            while pos[r] < len(orders[r]):
                a = orders[r][pos[r]]
                need = inputs(a, spec.n_stages)
                if not all(k in done for k in need):
                    break
                gl, gh = (c.gap_local, c.gap_handoff) if overhead else (0.0, 0.0)
                ready = [0.0] + ([free[r] + gl] if free[r] is not None else [])
                ready += [end + (gl if rank == r else gh) for rank, end in (done[k] for k in need)]
                start = max(ready)
                end = start + (c.forward if a.kind == "F" else c.backward)
                slots.append(Slot(r, a.kind, a.mb, a.stage, start, end))
                done[(a.kind, a.stage, a.mb)] = (r, end)
                free[r], pos[r], progressed = end, pos[r] + 1, True
        if not progressed:
            raise RuntimeError("schedule deadlocks")  # rank_orders never does; guards a future schedule
    return slots


def explain(spec: PipeSpec, slots: list[Slot], slot_cpu: list[float] | None = None,
            step_cpu: float | None = None) -> dict:
    """Measured bubble vs theory vs theory + measured overhead, and the overhead's parts.

    ``slot_cpu``: CPU seconds of each slot (same order as ``slots``); ``step_cpu``: CPU seconds of
    all ranks over the step. With them, the result also says how much of the overhead was CPU work
    (Python, send/recv) and how much slots stretched (wall / CPU > 1: waiting for a core).
    """
    costs = rank_costs(spec, slots)
    measured = bubble_stats(slots, spec.p)["bubble"]
    model = bubble_stats(replay(spec, costs), spec.p)["bubble"]
    slot_times_only = bubble_stats(replay(spec, costs, overhead=False), spec.p)["bubble"]
    local, handoff = _gaps(spec, slots)
    gaps = [g for gs in local + handoff for g in gs]
    busy = sum(s.end - s.start for s in slots)
    out = {"schedule": spec.schedule, "p": spec.p, "m": spec.m, "theory": formula(spec),
           "slot_times_only": slot_times_only, "model": model, "measured": measured,
           "rel_error": (model - measured) / measured,
           "forward_ms": 1e3 * fmean(c.forward for c in costs), "backward_ms": 1e3 * fmean(c.backward for c in costs),
           "gap_ms": 1e3 * fmean(gaps) if gaps else 0.0,
           # of the time ranks spend on their slots and the overhead between them, the part computing
           "compute_fraction": busy / (busy + sum(max(g, 0.0) for g in gaps)),
           "costs": costs}
    if slot_cpu is not None and step_cpu is not None:
        out["stretch"] = busy / sum(slot_cpu)  # > 1: a slot's rank was runnable but had no core
        out["cpu_overhead_ms"] = 1e3 * (step_cpu - sum(slot_cpu)) / len(slots)  # Python + send/recv + optimizer
    return out


def explain_run(results: list[dict], spec: PipeSpec) -> dict:
    """:func:`explain` on a :mod:`disttutor.programs.pipeline` run's per-rank reports."""
    slots = slots_from_events([r["events"] for r in results])
    cpu = [c for r in results for c in r.get("slot_cpu", [])]
    has_cpu = len(cpu) == len(slots) and all("step_cpu_s" in r for r in results)
    return explain(spec, slots, cpu if has_cpu else None,
                   sum(r["step_cpu_s"] for r in results) if has_cpu else None)
