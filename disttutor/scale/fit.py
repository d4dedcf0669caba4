"""Fitting alpha and beta (per collective) and gamma from measured times.

Introduced in chapter 13 (at scale). For one collective at a fixed number of ranks ``n``, the model
``t = alpha + factor(n) * S / B`` is a straight line in ``S``: :func:`fit_link` fits it by least
squares on *relative* error (each point weighted by ``1/t``), because the sizes span decades and an
ordinary fit would let the biggest message decide alone. gamma is the median FLOP/s of the largest
matmuls (:func:`fit_gamma`): small ones are dominated by call overhead, which is alpha's business.
Pure Python (no numpy needed for a 2-parameter fit).
"""
from __future__ import annotations

from statistics import median

from disttutor.scale.costmodel import Link, bus_factor


def weighted_line(x: list[float], y: list[float], w: list[float]) -> tuple[float, float]:
    """Intercept and slope minimising ``sum w_i (y_i - a - b x_i)^2``."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError("need at least two (size, time) points of equal length")
    sw = sum(w)
    mx = sum(wi * xi for wi, xi in zip(w, x)) / sw
    my = sum(wi * yi for wi, yi in zip(w, y)) / sw
    sxx = sum(wi * (xi - mx) ** 2 for wi, xi in zip(w, x))
    if sxx == 0:
        raise ValueError("all sizes are equal: cannot separate latency from bandwidth")
    slope = sum(wi * (xi - mx) * (yi - my) for wi, xi, yi in zip(w, x, y)) / sxx
    return my - slope * mx, slope


def fit_link(op: str, sizes: list[float], times: list[float], n: int) -> Link:
    """alpha and bus bandwidth of ``op`` from measured ``(bytes, seconds)`` at ``n`` ranks.

    A negative intercept (noise when alpha is tiny next to the transfers) is clipped to 0.
    """
    if any(t <= 0 for t in times):
        raise ValueError("times must be > 0")
    x = [s * bus_factor(op, n) for s in sizes]  # bytes each rank really moves
    w = [1.0 / t**2 for t in times]             # relative error: (y - fit)/y, squared
    alpha, slope = weighted_line(x, times, w)
    if not slope > 0:
        raise ValueError(f"{op}: time does not grow with size in these measurements; measure larger sizes")
    return Link(alpha=max(alpha, 0.0), bandwidth=1.0 / slope)


def fit_gamma(flops: list[float], times: list[float], top: int = 2) -> float:
    """Sustained FLOP/s: the median rate of the ``top`` largest matmuls."""
    if not flops or len(flops) != len(times):
        raise ValueError("need matching, non-empty flops and times")
    pairs = sorted(zip(flops, times))[-top:]
    return median(f / t for f, t in pairs)


def residuals(op: str, link: Link, sizes: list[float], times: list[float], n: int) -> list[float]:
    """Predicted / measured for each point (1.0 = the line goes through it)."""
    from disttutor.scale.costmodel import collective_time

    return [collective_time(op, s, n, link) / t for s, t in zip(sizes, times)]
