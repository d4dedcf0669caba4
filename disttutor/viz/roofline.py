"""The roofline: attainable FLOP/s against arithmetic intensity, for one or more machines.

Introduced in chapter 13 (at scale). A kernel that does ``F`` FLOPs while moving ``Q`` bytes to and
from memory has an arithmetic intensity ``I = F / Q`` (FLOP per byte). It can run no faster than
the machine's peak ``C`` (FLOP/s) and no faster than its memory feeds it, ``I * B_mem`` (``B_mem`` the
memory bandwidth, bytes/s): attainable ``= min(C, I * B_mem)``. The two lines meet at the ridge
``I* = C / B_mem``:
below it a kernel is memory-bound, above it compute-bound. Plain functions from numbers to a figure.
"""
from __future__ import annotations

COLORS = ("#4C72B0", "#C44E52", "#55A868", "#8172B2")


def attainable(intensity: float, peak_flops: float, mem_bw: float) -> float:
    """``min(C, I * B_mem)``: the roofline's FLOP/s at arithmetic intensity ``intensity`` (FLOP/byte)."""
    if not (peak_flops > 0 and mem_bw > 0 and intensity > 0):
        raise ValueError(f"need positive peak, bandwidth and intensity, got {peak_flops}, {mem_bw}, {intensity}")
    return min(peak_flops, intensity * mem_bw)


def ridge(peak_flops: float, mem_bw: float) -> float:
    """The intensity (FLOP/byte) where memory stops limiting: ``C / B_mem``."""
    return peak_flops / mem_bw


def plot_roofline(machines: list[tuple[str, float, float]], kernels: list[tuple[str, float]] = ()):
    """One roof per machine ``(label, peak FLOP/s, memory bytes/s)``, log-log, with its ridge marked;
    each kernel ``(label, FLOP per byte)`` is a vertical dotted line."""
    import matplotlib.pyplot as plt

    if not machines:
        raise ValueError("give at least one machine (label, peak FLOP/s, memory bytes/s)")
    lo, hi = 1 / 64, 4096.0
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for (label, peak, bw), color in zip(machines, COLORS):
        ax.plot(grid, [attainable(i, peak, bw) for i in grid], "-", color=color, label=label)
        r = ridge(peak, bw)
        ax.plot([r], [peak], "o", color=color)
        ax.annotate(f"ridge {r:.3g} FLOP/B", (r, peak), textcoords="offset points", xytext=(6, -12),
                    fontsize=8, color=color)
    for label, intensity in kernels:
        ax.axvline(intensity, color="#777777", linestyle=":", linewidth=1)
        ax.text(intensity, 0.04, f" {label}", transform=ax.get_xaxis_transform(), fontsize=8, rotation=90,
                color="#555555", ha="right", va="bottom")  # x in FLOP/B, y a fraction of the axes
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP per byte of memory traffic)",
           ylabel="attainable FLOP/s", title="min(peak, intensity x memory bandwidth)")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig
