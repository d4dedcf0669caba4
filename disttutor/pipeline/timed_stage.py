"""A ``PipelineStage`` that timestamps every action its schedule asks of it: F, B, or B's halves I and W.

Introduced in chapter 7 (zero bubble and stage balance). Every schedule of
``torch.distributed.pipelining`` drives a stage through three methods:
``forward_one_chunk`` (F), ``backward_one_chunk`` -- a full backward (B), or,
with ``full_backward=False``, only the gradient of the stage's *input* (I) --
and ``backward_weight_one_chunk``, the gradient of its *weights* (W) that an
I left for later. Timing those three methods gives the measured timeline of
any schedule, zero-bubble ones included, without touching the model; the
sends and receives happen between them (the schedule waits for them), so
they count as idle, as in :func:`disttutor.pipeline.schedules.bubble_stats`.

Rank side; the rows it reports are ``[kind, mb, stage, t0, t1]``, what
:func:`disttutor.pipeline.schedules.slots_from_events` reads, and beside them
each slot's CPU seconds: a slot's wall time includes waiting for a core when
the ranks share the machine with other work, its CPU time does not.
"""
from __future__ import annotations

import contextlib
import time
from typing import Iterator

from torch.distributed.pipelining import PipelineStage


class ActionLog:
    """Spans ``(kind, mb, stage, t0, t1)`` of one step, relative to a zero every rank shares."""

    def __init__(self) -> None:
        self.t_zero: float | None = None
        self.rows: list[list] = []
        self.cpu: list[float] = []  # CPU seconds of each row of the last :meth:`stop`, same order

    def start(self, t_zero: float) -> None:
        self.t_zero, self.rows = t_zero, []

    @contextlib.contextmanager
    def slot(self, kind: str, mb: int, stage: int) -> Iterator[None]:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            if self.t_zero is not None:
                self.rows.append([kind, int(mb), stage, round(t0 - self.t_zero, 6),
                                  round(time.perf_counter() - self.t_zero, 6), round(time.process_time() - c0, 6)])

    def stop(self) -> list[list]:
        """The step's rows in time order (``[kind, mb, stage, t0, t1]``); their CPU seconds go to ``cpu``."""
        self.t_zero = None
        rows = sorted(self.rows, key=lambda e: e[3])
        self.cpu = [e[5] for e in rows]
        return [e[:5] for e in rows]


class TimedPipelineStage(PipelineStage):
    """``PipelineStage`` plus a timestamp around each F, B, I and W; numerically the same stage."""

    def __init__(self, submodule, stage_index: int, num_stages: int, device, log: ActionLog, group=None):
        super().__init__(submodule, stage_index, num_stages, device, group=group)
        self.log = log

    # [teach actions]
    def forward_one_chunk(self, fwd_chunk_id, *args, **kwargs):
        with self.log.slot("F", fwd_chunk_id, self.stage_index):
            return super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)

    def backward_one_chunk(self, bwd_chunk_id, loss=None, full_backward=True, last_backward=False):
        # 1F1B asks for the full backward (B). A zero-bubble schedule passes full_backward=False: only the
        # gradient of the stage's input (I), which the previous stage is waiting for, is computed now ...
        with self.log.slot("B" if full_backward else "I", bwd_chunk_id, self.stage_index):
            return super().backward_one_chunk(bwd_chunk_id, loss=loss, full_backward=full_backward,
                                              last_backward=last_backward)

    def backward_weight_one_chunk(self, bwd_chunk_id, last_backward=False):
        # ... and the gradient of the weights (W), which only the optimizer step needs, runs later,
        # in a slot where 1F1B would sit idle.
        with self.log.slot("W", bwd_chunk_id, self.stage_index):
            return super().backward_weight_one_chunk(bwd_chunk_id, last_backward=last_backward)
    # [/teach actions]
