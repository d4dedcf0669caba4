"""Reading an emulated-link run: the link's alpha and beta fitted back, and the four headline figures.

Introduced in chapter 8 (performance). Pure Python, so the chapter, the benchmark
(``benchmarks/effects_link.py``) and the tests compute the same numbers from the same report of
:mod:`disttutor.programs.emulated_link`.
"""
from __future__ import annotations

__all__ = ["fit_probe", "summary"]


def fit_probe(rows: list[dict], world: int) -> tuple[float, float]:
    """(alpha, beta) from the probe's ``{"bytes", "time_s"}`` rows: least squares on
    ``t = 2(n-1) alpha + 2(n-1)/n * bytes / beta`` (a ring all-reduce on ``world`` ranks)."""
    xs, ys = [r["bytes"] for r in rows], [r["time_s"] for r in rows]
    if len(xs) < 2 or len(set(xs)) < 2 or world < 2:
        raise ValueError("a fit needs >= 2 distinct sizes on >= 2 ranks")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    steps = 2 * (world - 1)
    return intercept / steps, steps / world / slope


def summary(report: dict) -> dict:
    """The figures ``benchmarks/bench_effects.py`` reports, from rank 0's report of a run with the
    ``probe``, ``overlap`` and ``compression`` parts.

    * ``emulated_alpha_err`` / ``emulated_beta_err`` -- |fitted - set| / set on the probe link;
    * ``overlap_hidden`` -- the share of the emulated communication that bucketing hid:
      (compute alone + communication alone - step with overlap) / communication alone, the same
      "hidden communication" as chapter 8's bucket sweep on loopback (1: all hidden, 0: the step
      took compute + communication, negative: running both at once cost more than one after the other);
    * ``overlap_vs_max`` -- step with overlap / max(compute, communication) (1: the ideal overlap) and
      ``overlap_off_vs_sum`` -- step without overlap / (compute + communication) (1: nothing hidden);
    * ``compression_speedup`` -- step time with the fp32 hook / with the fp16 hook, both on the link.
    """
    out = {}
    if "probe" in report:
        alpha, beta = fit_probe(report["probe"], report["world"])
        set_alpha, set_beta = report["probe_link"]["alpha"], report["probe_link"]["beta"]
        out["emulated_alpha_err"] = abs(alpha - set_alpha) / set_alpha
        out["emulated_beta_err"] = abs(beta - set_beta) / set_beta
    if "overlap" in report:
        o = report["overlap"]
        out["overlap_hidden"] = (o["compute_s"] + o["comm_s"] - o["overlap_s"]) / o["comm_s"]
        out["overlap_vs_max"] = o["overlap_s"] / max(o["compute_s"], o["comm_s"])
        out["overlap_off_vs_sum"] = o["deferred_s"] / (o["compute_s"] + o["comm_s"])
    if "compression" in report:
        c = report["compression"]
        out["compression_speedup"] = c["fp32"]["step_s"] / c["fp16"]["step_s"]
    return out
