"""Calibrating each hardware preset's efficiency on named published runs, and every run's residual.

Introduced in chapter 13 (at scale). A run's **ratio** compares speeds: published / predicted for a
rate (tokens/s/GPU, TFLOPs/GPU, MFU, HFU), predicted / published for a step time; above 1 the run was
faster than predicted. A preset's efficiency is the geometric mean of the ratios at peak
(``efficiency = 1``) over its calibration rows (:func:`calibrate`, *derived*); the **residual** of a row
is its ratio at the calibrated efficiency (:func:`residuals`). The presets carry the values
(``hardware.PRESETS[k].efficiency``); ``tests/test_scale_published.py`` recomputes them from the rows.
"""
from __future__ import annotations

import math

from disttutor.scale import hardware
from disttutor.scale.planner import Prediction, predict
from disttutor.scale.published import RUNS, Run


def run_predict(run: Run, efficiency: float | None = None) -> Prediction:
    """The planner's prediction of a published run (the preset's efficiency unless one is passed)."""
    return predict(run.shape, run.layout, hardware.PRESETS[run.hardware], run.seq, run.global_batch, efficiency)


def ratio(run: Run, p: Prediction) -> float:
    """Published speed / predicted speed (for a step time: predicted / published)."""
    got = p.metric(run.metric)
    return got / run.published if run.metric == "step_s" else run.published / got


def calibrate(hw: str, runs: list[Run] = RUNS) -> tuple[float, list[str]]:
    """The geometric mean of the ratios at peak over ``hw``'s calibration rows, and their names."""
    rows = [r for r in runs if r.hardware == hw and r.role == "calibration"]
    if not rows:
        raise ValueError(f"no calibration rows for hardware {hw!r}")
    logs = [math.log(ratio(r, run_predict(r, 1.0))) for r in rows]
    return math.exp(sum(logs) / len(logs)), [r.name for r in rows]


def residuals(runs: list[Run] = RUNS) -> list[dict]:
    """One row per run: published, predicted at peak and at the preset's efficiency, the residual."""
    out = []
    for r in runs:
        peak, cal = run_predict(r, 1.0), run_predict(r)
        out.append({"run": r.name, "hardware": r.hardware, "role": r.role, "metric": r.metric,
                    "published": r.published, "predicted at peak": peak.metric(r.metric),
                    "predicted": cal.metric(r.metric), "residual": ratio(r, cal), "MFU": cal.mfu, "HFU": cal.hfu})
    return out


def within(rows: list[dict], rel: float = 0.25) -> float:
    """The share of rows whose residual lies within ``rel`` of 1 (either way: 1/(1+rel) .. 1+rel)."""
    return sum(1 / (1 + rel) <= r["residual"] <= 1 + rel for r in rows) / len(rows)


def memory_rows(runs: list[Run] | None = None) -> list[dict]:
    """Predicted peak memory per GPU next to the published one, with the parts (GiB)."""
    from disttutor.scale.published import MEMORY_RUNS

    out = []
    for r in MEMORY_RUNS if runs is None else runs:
        m = run_predict(r).memory
        gib = {k: v / 2**30 for k, v in m.items() if k != "stage"}
        out.append({"run": r.name, "published GiB": r.published, "predicted GiB": gib["total"],
                    "predicted/published": gib["total"] / r.published, **{k: gib[k] for k in
                    ("weights", "gradients", "optimizer", "activations", "logits", "units", "reserve")}})
    return out
