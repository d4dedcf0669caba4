"""Chapter 10's figures: the training curves (live while training, then static), and an interrupted
run against an uninterrupted one."""
from __future__ import annotations

import io
import time
from typing import Any, Callable

import matplotlib.pyplot as plt
from matplotlib.figure import Figure


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


def _kernel_display() -> Callable[..., Any] | None:
    """IPython's ``display`` when a notebook front end can show it; None in a terminal or a script."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return None
    ip = get_ipython()
    return display if ip is not None and getattr(ip, "kernel", None) is not None else None


class LiveLoss:
    """``launch(..., on_progress=LiveLoss())``: the loss curves redrawn in place while training runs.

    Reads ``lm_train``'s progress records: ``{"step": s, "metrics": {"loss": x}}`` after optimiser
    step ``s - 1``, ``{"step": s, "metrics": {"val": v}}`` for the validation loss after ``s``
    steps -- plotted at the same x as :func:`plot_training`. A restarted attempt overwrites the
    steps it repeats. Redraws at most once every ``every_s`` seconds (drawing costs the kernel
    ~0.1 s of a core the ranks also use), never blocks the ranks (their lines queue up meanwhile).
    Without a notebook front end it only collects. ``close()`` (or leaving a ``with`` block)
    replaces the picture by one line: the static figure drawn after the run is the one that stays.
    """

    def __init__(self, every_s: float = 2.0, title: str = "live: train and validation loss",
                 display: Callable[..., Any] | None = None, clock: Callable[[], float] = time.monotonic):
        if not isinstance(every_s, (int, float)) or isinstance(every_s, bool) or every_s < 0:
            raise ValueError(f"every_s must be a number of seconds >= 0, got {every_s!r}")
        self.every_s, self.title, self.clock = float(every_s), title, clock
        self.display = display if display is not None else _kernel_display()
        self.train: dict[int, float] = {}
        self.val: dict[int, float] = {}
        self.total = 0
        self.draws = 0
        self._last = -float("inf")
        self._handle = None

    def __call__(self, record: dict) -> None:
        step, metrics = int(record["step"]), record.get("metrics") or {}
        self.total = int(record.get("total", self.total))
        if "loss" in metrics:
            self.train[step - 1] = float(metrics["loss"])
        if "val" in metrics:
            self.val[step] = float(metrics["val"])
        now = self.clock()
        if now - self._last >= self.every_s:
            self._last = now
            self.draw()

    def figure(self) -> Figure:
        """The current curves (a bare Figure: not registered with pyplot, so never shown twice)."""
        fig = Figure(figsize=(6.5, 3))
        ax = fig.subplots()
        plot_training({"loss": [self.train[k] for k in sorted(self.train)], "val": self.val}, ax=ax,
                      title=f"{self.title} (step {max(self.train, default=-1) + 1}/{self.total})")
        ax.lines[0].set_xdata(sorted(self.train))  # steps, even if the first ones are missing (resume)
        ax.set_xlim(-0.5, max(self.total, 1) + 0.5)
        fig.tight_layout()
        return fig

    def draw(self) -> None:
        if self.display is None:
            return
        from IPython.display import Image

        buf = io.BytesIO()
        self.figure().savefig(buf, format="png", dpi=72)
        img = Image(data=buf.getvalue(), format="png")
        if self._handle is None:
            self._handle = self.display(img, display_id=True)
        else:
            self._handle.update(img)
        self.draws += 1

    def close(self) -> None:
        if self._handle is not None:
            from IPython.display import Markdown

            self._handle.update(Markdown(f"*(live plot: {len(self.train)} train and {len(self.val)} validation "
                                         f"points, redrawn {self.draws} times; the final figure follows)*"))
            self._handle = None

    def __enter__(self) -> "LiveLoss":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
