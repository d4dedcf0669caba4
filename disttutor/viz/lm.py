"""Chapter 10's figures: the training curves, and an interrupted run against an uninterrupted one."""
from __future__ import annotations

import matplotlib.pyplot as plt


def plot_training(history: dict, ax=None, title: str = "training (mean over ranks) and validation loss"):
    """Train loss per step and validation loss at the steps it was measured."""
    ax = ax or plt.subplots(figsize=(6.5, 3))[1]
    ax.plot(range(len(history["loss"])), history["loss"], lw=1, label="train loss (per step)")
    val = sorted((int(k), v) for k, v in history["val"].items())
    ax.plot([s for s, _ in val], [v for _, v in val], "o-", label="validation loss")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("cross-entropy (nats/char)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return ax


def plot_fault(reference: list[float], rows: list[dict], killed_at: int, resumed_from: int, ax=None):
    """The uninterrupted run, each attempt of the interrupted one, the kill and the restart marked.

    ``rows``: the interrupted job's ``history.jsonl`` (``{"attempt", "step", "loss"}`` per step).
    """
    ax = ax or plt.subplots(figsize=(6.5, 3))[1]
    ax.plot(range(len(reference)), reference, color="k", lw=4, alpha=0.25, label="uninterrupted run")
    for a in sorted({r["attempt"] for r in rows}):
        pts = [(r["step"], r["loss"]) for r in rows if r["attempt"] == a]
        ax.plot([s for s, _ in pts], [v for _, v in pts], "o-" if a else "s--", ms=3,
                label=f"attempt {a + 1}" + (" (restarted by torchrun)" if a else ""))
    ax.axvline(killed_at, color="C3", ls=":", label=f"rank killed at step {killed_at}")
    ax.axvline(resumed_from, color="C2", ls="--", label=f"resumed from checkpoint (step {resumed_from})")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("train loss")
    ax.set_title("a killed rank, an elastic restart, the same curve", fontsize=10)
    ax.legend(fontsize=7)
    return ax
