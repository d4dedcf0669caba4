"""Introduced in chapter 7: how big a micro-batch must be for the bubble formula to show.

The formula ``(p-1)/(m+p-1)`` counts slots; a real run also idles in the *gap* between slots
(the schedule's Python, gloo's send/recv, waiting for a core). When a slot is no longer than
the gap, the gap dominates the idle time and the bubble barely moves with ``m`` (chapter 7 once
measured 0.72 at m=4 and 0.70 at m=16: 1.9 ms forward slots against 2.2 ms gaps). So the
chapter measures the gap on an earlier run of its own, the cost of a forward slot per row on
this CPU, and picks the micro-batch size that makes a forward slot ``ratio`` times the gap.
"""
from __future__ import annotations

import time
from statistics import fmean

import torch
from torch import nn

from disttutor.pipeline.bubble_model import rank_costs
from disttutor.pipeline.schedules import PipeSpec, Slot


def mean_gap_ms(spec: PipeSpec, slots: list[Slot]) -> float:
    """The mean gap between slots of a measured run (local and hand-off gaps, all ranks), in ms."""
    costs = rank_costs(spec, slots)
    return 1e3 * fmean(g for c in costs for g in (c.gap_local, c.gap_handoff))


def forward_ms_per_row(width: int, layers: int, rows: int = 64, repeats: int = 3) -> float:
    """Median ms per row of one stage's forward (``layers`` x Linear(width, width) + ReLU), one thread.

    One thread because every CPU rank runs with ``OMP_NUM_THREADS=1``; restored afterwards.
    """
    stage = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())])
    x = torch.randn(rows, width)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            stage(x)  # warm-up
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                stage(x)
                times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return sorted(times)[len(times) // 2] * 1e3 / rows


def choose_mb_size(gap_ms: float, per_row_ms: float, ratio: float = 10.0, budget_ms: float = 40.0,
                   smallest: int = 32) -> int:
    """The smallest power-of-two micro-batch whose forward slot is ``ratio`` x the gap.

    ``budget_ms`` caps a forward slot (a backward is ~2x that; GPipe at m=8 on 2 stages runs
    9 of each a step), so the sweep keeps to the chapter's time budget on a slow machine.
    """
    if not (gap_ms >= 0 and per_row_ms > 0):
        raise ValueError(f"need gap_ms >= 0 and per_row_ms > 0, got {gap_ms}, {per_row_ms}")
    rows = smallest
    while rows * per_row_ms < ratio * gap_ms and 2 * rows * per_row_ms <= budget_ms:
        rows *= 2
    return rows


def fall_ratio(measured: dict[int, float], theory: dict[int, float], m_lo: int, m_hi: int) -> float:
    """How much of the formula's fall from ``m_lo`` to ``m_hi`` micro-batches the measured bubble showed."""
    return (measured[m_lo] - measured[m_hi]) / (theory[m_lo] - theory[m_hi])


def sweep_plan(cores: int) -> tuple[int, tuple[int, ...]]:
    """Stages and micro-batch counts of a bubble sweep on ``cores`` cores: one stage a core (2 stages, or 4
    on 4 cores or more: time-sharing would stretch slots, not show the schedule), and m = p, 2p, 4p --
    torch's ``Schedule1F1B`` refuses fewer micro-batches than stages, and the formula's fall from m = p to
    4p is the same share on 2 stages as on 4."""
    p = 4 if cores >= 4 else 2
    return p, (p, 2 * p, 4 * p)
