"""DDP figures: the order of gradient and bucket events, and step times per wrapper (chapter 4).

:func:`plot_trace` draws the event traces that ``disttutor.programs.ddp_scratch
--trace`` records (torch's DDP and the from-scratch wrappers);
:func:`plot_step_times` draws the timings of ``ddp_scratch --time`` for
1, 2, 4 ranks. Plain functions returning a matplotlib figure, no torch.
"""
from __future__ import annotations

import matplotlib.pyplot as plt

from disttutor.contract.machine import usable_cores


def plot_trace(traces: dict[str, list], ax=None):
    """One row per wrapper: gradient-ready events (dots) and bucket launches (bars), in event order.

    ``traces`` maps a label to a list of ``("grad", parameter name)`` / ``("launch", bucket index)``
    events. Draws on ``ax`` if given, else on a new figure; returns the figure.
    """
    ax = ax or plt.subplots(figsize=(9, 1.2 + 0.7 * len(traces)))[1]
    for row, (label, trace) in enumerate(traces.items()):
        for i, (kind, what) in enumerate(trace):
            if kind == "grad":
                ax.plot(i, row, "o", color="tab:blue")
                ax.annotate(what, (i, row), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7)
            elif kind == "launch":
                ax.barh(row, 0.8, left=i - 0.4, height=0.5, color="tab:orange", alpha=0.7)
                ax.annotate(f"b{what}", (i, row), ha="center", va="center", fontsize=8)
    ax.set_yticks(range(len(traces)), list(traces))
    ax.set_ylim(-0.6, len(traces) - 0.3)
    ax.set_xlabel("order of events during one backward (blue: gradient ready, orange: bucket all-reduce starts)")
    return ax.figure


def plot_step_times(timings: dict[int, dict[str, float]], per_rank: int, backend: str = "gloo",
                    device: str = "cpu"):
    """Left: step time per wrapper and world size. Right: samples/s (weak scaling) vs the ideal.

    ``timings[n][wrapper]`` is the median ms per step on ``n`` ranks (the ideal line scales the
    ``"torch"`` wrapper's 1-rank throughput); ``per_rank`` is the per-rank batch. Returns the figure.
    """
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.4))
    ranks = sorted(timings)
    wrappers = list(timings[ranks[0]])
    w = 0.8 / len(wrappers)
    for j, kind in enumerate(wrappers):
        a1.bar([i + j * w for i in range(len(ranks))], [timings[n][kind] for n in ranks], w, label=kind)
        a2.plot(ranks, [per_rank * n / timings[n][kind] * 1e3 for n in ranks], "o-", label=kind)
    base = per_rank / timings[ranks[0]]["torch"] * 1e3
    a2.plot(ranks, [base * n for n in ranks], "k--", label="ideal (linear)")
    a1.set_xticks([i + w for i in range(len(ranks))], [f"{n} rank(s)" for n in ranks])
    a2.set_xticks(ranks)
    a1.set_ylabel("ms per step")
    a2.set_xlabel("ranks")
    a2.set_ylabel("samples / s")
    a1.legend()
    a2.legend()
    # The title names what the ranks really used (passed from the run), not what the build machine had.
    where = f"{device}/{backend}" + (f" on {usable_cores()} CPU cores" if device.startswith("cpu") else "")
    fig.suptitle(f"{where} — measured in this run; other machines and backends differ")
    fig.tight_layout()
    return fig
