"""Chapter 9's figure: a per-rank timeline of compute vs communication from the profiler's traces."""
from __future__ import annotations

import matplotlib.pyplot as plt

from disttutor.troubleshoot.traces import segments

COLORS = {"forward": "tab:blue", "backward": "tab:orange", "optimizer": "tab:green", "comm": "tab:red",
          "data": "tab:gray"}  # chapter 10's input batches


def plot_timeline(traces: dict[int, list[dict]], title: str = "profiled steps, per rank"):
    """One row per rank: forward / backward / optimizer (main thread) and the backend's all-reduces
    (its own thread, drawn in a thinner band: it overlaps backward)."""
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.7 * len(traces)))
    for row, (rank, events) in enumerate(sorted(traces.items())):
        for kind, segs in segments(events).items():
            y, h = (row - 0.35, 0.45) if kind != "comm" else (row + 0.15, 0.25)
            ax.broken_barh(segs, (y, h), color=COLORS[kind], label=kind if row == 0 else None)
    ax.set_yticks(range(len(traces)), [f"rank {r}" for r in sorted(traces)])
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds since the rank's first profiled region")
    ax.set_title(title)
    ax.legend(loc="upper right", ncol=4, fontsize=8)
    fig.tight_layout()
    return fig
