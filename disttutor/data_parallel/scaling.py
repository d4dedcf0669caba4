"""Introduced in chapter 4: size a weak-scaling experiment from the machine it runs on.

Data parallelism pays when a step's compute is large against what every step costs on top of
it (the gradient all-reduce, Python, the barrier). Weak scaling keeps the per-rank batch ``B``
fixed, so with a per-sample compute cost ``c`` and a per-step overhead ``o_n`` on ``n`` ranks::

    speed-up(n) = n * (o_1 + c*B) / (o_n + c*B)  ->  n   when c*B >> o_n

A run sized by hand on one machine teaches the opposite lesson on another (chapter 4 once
showed 0.56x on 2 cores: 4 ranks time-sharing 2 cores, a step of a few milliseconds). So the
chapter and ``benchmarks/bench_effects.py`` *measure* ``o_n`` (a step at a tiny batch, where
compute is negligible) and ``c`` (one rank's forward + backward + step at a real batch, one
thread, as a rank runs) and pick ``B`` from them with :func:`choose_batch`.
"""
from __future__ import annotations

import time

import torch

from disttutor.data_parallel.train import TrainConfig, build_model, make_optimizer, train_step

# 3 x Linear(1024, 1024): enough FLOPs per sample that a few hundred samples dwarf the all-reduce
# of its 12 MiB of gradients over loopback (issue 23's quick check: 1.71-1.74x at 512-1024 a rank).
MODEL = {"d_in": 1024, "hidden": (1024, 1024), "d_out": 1024}
# Compute per step over overhead per step that the sizing aims for: 12 predicts 2 * 12/13 = 1.85x on
# 2 ranks if the overhead stays as measured; the margin above the 1.7x target absorbs what it does not.
RATIO = 12.0


def ranks_for_speed(cores: int, most: int = 4) -> list[int]:
    """World sizes for a timed sweep: 1, then 2, 4, ... while each rank can have a core of its own.

    On one core the sweep still runs 1 and 2 ranks, so the learner sees what time-sharing costs.
    """
    out = [1]
    while out[-1] * 2 <= min(max(cores, 2), most):
        out.append(out[-1] * 2)
    return out


def compute_ms_per_sample(model_kw: dict | None = None, batch: int = 128, repeats: int = 3) -> float:
    """Median ms per sample of one training step of the model, in this process, on one thread.

    One thread because every CPU rank runs with ``OMP_NUM_THREADS=1`` (``disttutor.launch``);
    the caller's thread count is restored afterwards.
    """
    cfg = TrainConfig(**(model_kw or MODEL), samples=batch, batch=batch)
    model = build_model(cfg)
    opt = make_optimizer(cfg, model.parameters())
    x, y = torch.randn(batch, cfg.d_in), torch.randn(batch, cfg.d_out)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_step(model, opt, x, y)  # warm-up: first-call allocations and kernel choice
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            train_step(model, opt, x, y)
            times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return sorted(times)[len(times) // 2] * 1e3 / batch


def choose_batch(overhead_ms: float, per_sample_ms: float, ratio: float = RATIO, budget_ms: float = 400.0,
                 smallest: int = 64) -> int:
    """The smallest power-of-two per-rank batch whose compute is ``ratio`` x the per-step overhead.

    ``ratio = 12`` predicts ``n * 12/13 ~ 0.92 n`` (1.85x on 2 ranks) when the overhead stays what it
    was measured; ``budget_ms`` caps one rank's compute per step (the chapter's time budget), and
    wins over ``ratio`` on a machine too slow for both (the verdict then says so).
    """
    if not (overhead_ms >= 0 and per_sample_ms > 0):
        raise ValueError(f"need overhead_ms >= 0 and per_sample_ms > 0, got {overhead_ms}, {per_sample_ms}")
    batch = smallest
    while batch * per_sample_ms < ratio * overhead_ms and 2 * batch * per_sample_ms <= budget_ms:
        batch *= 2
    return batch


def speedup(step_ms: dict[int, float], n: int) -> float:
    """Weak-scaling samples/s on ``n`` ranks over 1 rank, from median step times at a fixed per-rank batch."""
    return n * step_ms[1] / step_ms[n]


def verdict(s: float, n: int, target: float, overhead_ms: float, compute_ms: float, load: float,
            cores: int) -> str:
    """One sentence about this run's speed-up, computed from its numbers."""
    head = f"torch DDP on {n} ranks vs 1 rank: {s:.2f}x samples/s (ideal {n}x, target {target:.2f}x)"
    busy = load > 0.5 * cores
    if s > 1.1 * n:  # more than linear is not parallelism: one of the two runs was slowed by other work
        return (f"{head}: above the ideal, so this run is noise (load average {load:.1f} on {cores} cores): "
                "run it again on a quieter machine.")
    if s >= target:
        return (f"{head}: reached. Each rank computed {compute_ms:.0f} ms a step against {overhead_ms:.0f} ms of "
                f"all-reduce and overhead, so adding ranks added throughput"
                + (f" (on a busy machine, load average {load:.1f}: one noisy sample)." if busy else "."))
    why = []
    if n > cores:
        why.append(f"{n} ranks time-share {cores} core(s)")
    if busy:
        why.append(f"the machine was busy (load average {load:.1f} on {cores} cores)")
    if compute_ms < RATIO * overhead_ms:
        why.append(f"compute ({compute_ms:.0f} ms) was not large against the overhead ({overhead_ms:.0f} ms)")
    return f"{head}: NOT reached on this run — " + ("; ".join(why) if why else "noise on this run: run it again")
