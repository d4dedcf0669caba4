"""Timeline of plain model parallelism: who computes when (chapter 6).

:func:`plot_timeline` draws the spans (forward, backward, optimizer, send,
recv) that every rank of a ``disttutor.programs.model_parallel`` launch
reported, on one time axis (:func:`~disttutor.pipeline.timeline.aligned_spans`).
A plain function returning a matplotlib figure; it needs no launch, only the
report dicts.
"""
from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from disttutor.pipeline.timeline import aligned_spans

COLORS = {"fwd": "tab:blue", "bwd": "tab:orange", "opt": "tab:green", "recv": "0.85", "send": "0.6"}


def plot_timeline(results: Sequence[dict], title: str = "plain model parallelism: who computes when", ax=None):
    """Gantt chart of every rank's timed steps (ms); blank and grey = waiting.

    ``results[r]`` is rank ``r``'s report: ``t0`` (its start on the shared monotonic clock, s) and
    ``timeline``, a list of ``(kind, start_s, end_s)`` with ``kind`` a key of :data:`COLORS`.
    Draws on ``ax`` if given, else on a new figure; returns the figure.
    """
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 0.6 * len(results) + 1.2))
        own = True
    else:
        fig, own = ax.figure, False
    for r, spans in enumerate(aligned_spans(results)):
        for kind, s, e in spans:
            ax.broken_barh([(1e3 * s, 1e3 * (e - s))], (r - 0.4, 0.8), color=COLORS[kind])
    ax.set_yticks(range(len(results)), [f"rank {r}" for r in range(len(results))])
    ax.invert_yaxis()
    ax.set_xlabel("time since the first rank started (ms)")
    ax.set_title(title)
    ax.legend(handles=[Patch(color=c, label=k) for k, c in COLORS.items()], ncol=5, loc="upper center",
              bbox_to_anchor=(0.5, -0.35), frameon=False)
    if own:
        fig.tight_layout()
    return fig
