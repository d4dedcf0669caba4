"""How big should DDP's buckets be? The α–B model's answer, idealised (chapter 8).

Introduced in chapter 8. Cut a step's ``S`` bytes of gradients into buckets of ``S_b`` bytes
(``k = ceil(S / S_b)`` of them) and run :func:`disttutor.viz.bucket_overlap.schedule` on them: small
buckets pay the latency ``2(n-1) alpha`` ``k`` times, so the link's total time grows; large ones start
late, so less of it hides under the backward and the exposed tail grows. Drawn from a run's numbers
(its gradient bytes, world size, link, forward and backward times), with no noise. An idealisation:
gradients split anywhere (a real bucket holds whole tensors).

:func:`tradeoff` computes it (plain Python); :func:`plot_bucket_size` draws it.
"""
from __future__ import annotations

import math

from disttutor.viz.bucket_overlap import schedule

__all__ = ["split", "tradeoff", "plot_bucket_size"]


def split(total_bytes: float, bucket_bytes: float) -> list[float]:
    """``total_bytes`` cut into buckets of ``bucket_bytes``, the remainder last (the first layers' bucket)."""
    k = max(1, math.ceil(total_bytes / bucket_bytes - 1e-9))
    return [float(bucket_bytes)] * (k - 1) + [total_bytes - bucket_bytes * (k - 1)]


def tradeoff(total_bytes: float, world: int, link, forward_s: float, backward_s: float, sizes) -> list[dict]:
    """For each bucket size: the number of buckets, the latency paid (``k * 2(n-1) alpha``), the link's
    total time and the time exposed after the backward with overlap; seconds."""
    alpha, bandwidth = link.alpha.value, link.beta.value
    rows = []
    for sb in sizes:
        sb = min(float(sb), float(total_bytes))
        s = schedule(split(total_bytes, sb), world, alpha, bandwidth, forward_s, backward_s)
        k = len(s["buckets"])
        rows.append({"bucket_bytes": sb, "buckets": k, "alpha_s": k * 2 * (world - 1) * alpha,
                     "comm_s": s["comm_s"], "exposed_s": s["exposed_s"]})
    return rows


def _size(nbytes: float) -> str:
    for unit, f in (("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= f:
            return f"{nbytes / f:.3g} {unit}"
    return f"{nbytes:.0f} bytes"


def plot_bucket_size(total_bytes: float, world: int, link, forward_s: float, backward_s: float,
                     run_bucket_bytes: float, ax=None):
    """Exposed communication, the link's total time and its latency part against the bucket size (log
    axis, bytes), from 4 KiB to one bucket; the run's bucket size and the best size marked. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    lo, hi = 2**12, float(total_bytes)
    n = 60
    sizes = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    rows = tradeoff(total_bytes, world, link, forward_s, backward_s, sizes)
    ax = ax or plt.subplots(figsize=(8, 3.4), layout="constrained")[1]
    x = [r["bucket_bytes"] for r in rows]
    ms = 1e3
    ax.plot(x, [ms * r["comm_s"] for r in rows], color="C1", label="link busy: all buckets' all-reduces")
    ax.plot(x, [ms * r["alpha_s"] for r in rows], color="C1", ls=":", label="of which latency: k · 2(n−1)α")
    ax.plot(x, [ms * r["exposed_s"] for r in rows], color="C3", lw=2,
            label="exposed after the backward (with overlap)")
    best = min(rows, key=lambda r: r["exposed_s"])
    ax.plot([best["bucket_bytes"]], [ms * best["exposed_s"]], "o", color="C3")
    ax.annotate(f"least exposed: {ms * best['exposed_s']:.1f} ms at {_size(best['bucket_bytes'])}",
                (best["bucket_bytes"], ms * best["exposed_s"]), xytext=(0, 14), textcoords="offset points",
                ha="center", fontsize=8, arrowprops={"arrowstyle": "-", "lw": 0.6})
    run = tradeoff(total_bytes, world, link, forward_s, backward_s, [run_bucket_bytes])[0]
    ax.axvline(run["bucket_bytes"], color="k", ls="--", lw=1)
    top = ms * 2.2 * rows[-1]["comm_s"]   # the one-bucket link time, doubled: room for the left's rise
    ax.annotate(f"the run's buckets:\n{_size(run['bucket_bytes'])}, {ms * run['exposed_s']:.1f} ms exposed",
                (run["bucket_bytes"], 0.62 * top), xytext=(4, 0), textcoords="offset points", fontsize=8, va="top")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _size(v)))
    ax.set_xlabel("bucket size (bytes, log scale); gradients split evenly, idealised")
    ax.set_ylabel("ms per step")
    ax.set_ylim(0, top)
    ax.set_title(f"bucket size, drawn from the α–B model: {_size(total_bytes)} of gradients, {world} ranks, "
                 f"backward {ms * backward_s:.0f} ms,\n{link.name} (α = {link.alpha.value * 1e6:.3g} µs, "
                 f"B = {link.beta.value / 1e9:.4g} GB/s)", fontsize=9)
    ax.legend(fontsize=8, loc="upper right", frameon=False)
    return ax.figure
