"""Timelines: what each rank measured itself doing, span by span, and what the notebook reads off them.

Introduced in chapter 6 (model parallelism). "Timeline" means one thing in
this package: *measured* spans ``(kind, start_s, end_s)`` on one rank.
:class:`Timeline` records them inside a worker program (rank side); a rank
reports ``timeline.as_rows()`` together with its ``t0``, and
:func:`aligned_spans` / :func:`compute_overlap_s` put every rank's report on one
time axis in the notebook (notebook side). A pipeline schedule *drawn* by
simulation is a different thing: :class:`disttutor.pipeline.schedules.SimulatedSchedule`.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Iterator

__all__ = ["Timeline", "aligned_spans", "compute_overlap_s"]


@dataclass
class Timeline:
    """Intervals ``(kind, start_s, end_s)`` on one rank, relative to a shared start.

    ``kind`` is ``"fwd"``/``"bwd"`` for compute (the rank is busy) and
    ``"send"``/``"recv"`` for communication (the rank waits for a neighbour).
    Whatever is in neither list is idle too (e.g. the optimizer step is ``"opt"``).
    """

    t0: float
    spans: list[tuple[str, float, float]] = field(default_factory=list)

    @contextlib.contextmanager
    def span(self, kind: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.spans.append((kind, start - self.t0, time.perf_counter() - self.t0))

    def total(self, *kinds: str) -> float:
        return sum(e - s for k, s, e in self.spans if k in kinds)

    def as_rows(self) -> list[list]:
        """JSON-able: ``[[kind, start, end], ...]`` in seconds."""
        return [[k, round(s, 6), round(e, 6)] for k, s, e in self.spans]


def aligned_spans(results: list[dict]) -> list[list[tuple[str, float, float]]]:
    """Every rank's reported timeline on one axis (seconds after the earliest rank's start)."""
    start = min(r["t0"] for r in results)
    return [[(k, r["t0"] - start + s, r["t0"] - start + e) for k, s, e in r["timeline"]] for r in results]


def compute_overlap_s(results: list[dict], kinds: tuple[str, ...] = ("fwd", "bwd")) -> float:
    """Seconds during which two different ranks were computing at the same time (summed over pairs)."""
    spans = [[(s, e) for k, s, e in rank if k in kinds] for rank in aligned_spans(results)]
    total = 0.0
    for a in range(len(spans)):
        for b in range(a + 1, len(spans)):
            total += sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in spans[a] for s2, e2 in spans[b])
    return total
