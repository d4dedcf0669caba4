"""Failures at scale: mean time between failures, the Young-Daly checkpoint interval, and the
training time that is left.

Introduced in chapter 13 (at scale). With failures arriving at random (exponentially, rate
``1/M`` for the whole job), checkpointing every ``tau`` seconds at cost ``delta`` loses, per unit of
time, ``delta / tau`` to saving and, per failure, half an interval of lost work plus the restart ``R``.
To first order (Young 1974, "A first order approximation to the optimum checkpoint interval";
Daly 2006 refines it for ``delta`` not small next to ``M``)::

    tau_opt = sqrt(2 delta M)
    efficiency(tau) ~ 1 - delta/tau - (tau/2 + R)/M

A job of ``n`` GPUs fails ``n`` times as often as one GPU: ``M_job = M_gpu / n``. Pure Python.
"""
from __future__ import annotations

from math import sqrt

HOUR = 3600.0


def mtbf_job(window_s: float, failures: int) -> float:
    """Mean time between failures of a job that saw ``failures`` in ``window_s`` seconds."""
    if failures < 1 or not window_s > 0:
        raise ValueError("need at least one failure in a positive window")
    return window_s / failures


def mtbf_per_gpu(job_mtbf_s: float, n_gpus: int) -> float:
    """Each of ``n`` independent GPUs fails ``n`` times less often than the job."""
    return job_mtbf_s * n_gpus


def mtbf_for(n_gpus: int, gpu_mtbf_s: float) -> float:
    return gpu_mtbf_s / n_gpus


def young_daly(checkpoint_s: float, mtbf_s: float) -> float:
    """Optimal interval between checkpoints, to first order: ``sqrt(2 delta M)`` (delta: ``checkpoint_s``)."""
    if checkpoint_s < 0 or not mtbf_s > 0:
        raise ValueError("need checkpoint cost >= 0 and MTBF > 0")
    return sqrt(2.0 * checkpoint_s * mtbf_s)


def efficiency(interval_s: float, checkpoint_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """Fraction of wall time that is useful training, to first order (clipped at 0)."""
    if not interval_s > 0:
        raise ValueError("interval must be > 0")
    return max(0.0, 1.0 - checkpoint_s / interval_s - (interval_s / 2.0 + restart_s) / mtbf_s)


def plan(n_gpus: int, gpu_mtbf_s: float, checkpoint_s: float, restart_s: float = 0.0) -> dict:
    m = mtbf_for(n_gpus, gpu_mtbf_s)
    tau = young_daly(checkpoint_s, m)
    return {"mtbf_s": m, "interval_s": tau, "efficiency": efficiency(tau, checkpoint_s, m, restart_s)}
