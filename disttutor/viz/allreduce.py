"""All-reduce timing: sweep, α–β fit, plots and a widget (chapter 2).

Everything the widget draws comes from plain functions, so tests and
headless runs use the same code:

* :func:`sweep` launches :mod:`disttutor.programs.allreduce_bench` (once per
  world size) and returns rows of measurements;
* :func:`fit_alpha_beta` fits the latency–bandwidth model
  ``t(N) = α + N/B`` (α: fixed cost per call, s; B: bandwidth, bytes/s -- the course's one notation);
* :func:`plot_sweep` draws time and bus bandwidth against message size;
* :func:`widget` wraps :func:`measure_and_plot` in ipywidgets.

Bandwidth follows the nccl-tests convention: ``algbw = N / t`` and
``busbw = algbw · 2(n−1)/n`` -- the traffic each rank's link must carry in a
bandwidth-optimal all-reduce, so numbers for different ``n`` compare.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

ALGOS = ("builtin", "naive", "tree", "ring")
COLORS = {"builtin": "tab:blue", "naive": "tab:red", "tree": "tab:orange", "ring": "tab:green"}


def bus_bandwidth(nbytes: float, time_s: float, n: int) -> float:
    """nccl-tests bus bandwidth in bytes/s: ``(N / t) · 2(n−1)/n``."""
    return nbytes / time_s * 2 * (n - 1) / n


def default_sizes(lo: int = 4 << 10, hi: int = 1 << 20, points: int = 3) -> list[int]:
    """``points`` message sizes spaced evenly on a log scale from ``lo`` to ``hi`` bytes (multiples of 4)."""
    if not (4 <= lo <= hi) or points < 1:
        raise ValueError(f"need 4 <= lo <= hi and points >= 1, got lo={lo}, hi={hi}, points={points}")
    raw = np.geomspace(lo, hi, points) if points > 1 else np.array([lo])
    return sorted({int(round(s / 4)) * 4 for s in raw})


def sweep(algos: Sequence[str] = ALGOS, nprocs: Sequence[int] = (2,), sizes: Sequence[int] | None = None,
          iters: int = 3, warmup: int = 1, timeout: float = 300.0, stream: bool = True) -> list[dict[str, Any]]:
    """Measure every algorithm at every size on each world size; one launch per world size.

    Returns rows ``{"algo", "nproc", "bytes", "time_s", "algbw", "busbw"}`` (bandwidths in
    bytes/s). Raises :class:`ValueError` if any algorithm failed its correctness check.
    """
    from disttutor.launcher.launch import launch

    sizes = list(sizes or default_sizes())
    bad = [a for a in algos if a not in ALGOS]
    if bad or not algos:
        raise ValueError(f"unknown algorithm(s) {bad or list(algos)}; choose from {', '.join(ALGOS)}")
    if not nprocs or any(not isinstance(n, int) or n < 2 for n in nprocs):
        raise ValueError(f"nprocs must be world sizes >= 2 (one rank has nothing to reduce), got {nprocs!r}")
    rows: list[dict[str, Any]] = []
    for n in nprocs:
        res = launch("allreduce_bench", n, {"sizes": sizes, "algos": list(algos), "iters": iters,
                                             "warmup": warmup}, timeout=timeout, stream=stream,
                     collective_timeout=min(120.0, timeout))
        wrong = sorted({a for r in res.results for a, ok in r.get("correct", {}).items() if not ok})
        if wrong:
            raise ValueError(f"{', '.join(wrong)} gave a wrong sum on {n} ranks: not timing a broken algorithm")
        for row in res.results[0]["rows"]:
            t = row["time_s"]
            rows.append({"algo": row["algo"], "nproc": n, "bytes": row["bytes"], "time_s": t,
                         "algbw": row["bytes"] / t, "busbw": bus_bandwidth(row["bytes"], t, n)})
    return rows


@dataclass(frozen=True)
class AlphaBeta:
    """``t(N) = alpha + N / B``: alpha in s; the fit's slope ``per_byte = 1/B`` in s/byte (0: B infinite)."""

    alpha: float
    per_byte: float

    @property
    def bandwidth(self) -> float:
        """B in bytes/s: the rate large messages approach."""
        return float("inf") if self.per_byte == 0 else 1.0 / self.per_byte

    def predict(self, sizes: Sequence[float]) -> np.ndarray:
        return self.alpha + self.per_byte * np.asarray(sizes, dtype=float)


def fit_alpha_beta(sizes: Sequence[float], times: Sequence[float]) -> AlphaBeta:
    """Least-squares fit of ``t = α + N/B`` on *relative* error, with α ≥ 0 and B > 0 (possibly infinite).

    Sizes span orders of magnitude: a plain fit would be decided by the
    largest message alone, so each point is weighted by ``1/t`` (every point
    counts by its relative miss, as on the log-log plot).
    """
    n = np.asarray(sizes, dtype=float)
    t = np.asarray(times, dtype=float)
    if n.shape != t.shape or n.size < 2:
        raise ValueError("fit_alpha_beta needs at least two (size, time) pairs of equal length")
    if np.any(t <= 0) or np.any(n <= 0):
        raise ValueError("sizes and times must be positive")
    w = 1.0 / t
    (alpha, per_byte), *_ = np.linalg.lstsq(np.stack([w, n * w], 1), np.ones_like(t), rcond=None)
    if alpha < 0:     # pure bandwidth: refit through the origin
        alpha, per_byte = 0.0, float(np.sum(n * w) / np.sum((n * w) ** 2))
    if per_byte < 0:  # pure latency
        alpha, per_byte = float(np.sum(w) / np.sum(w * w)), 0.0
    return AlphaBeta(float(alpha), float(per_byte))


def _human(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1024 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.3g} {unit}"
        nbytes /= 1024
    return f"{nbytes:.3g} GB"


def _bw_text(m: AlphaBeta) -> str:
    # no slope means the times did not grow with size: noise hid the per-byte cost (measure larger sizes)
    return f"B={m.bandwidth / 1e9:.2g} GB/s" if m.per_byte > 0 else "B unmeasurable (size effect lost in noise)"


def fits(data: Sequence[dict[str, Any]]) -> dict[tuple[str, int], AlphaBeta]:
    """An α–β fit for every (algorithm, world size) with at least two sizes."""
    out = {}
    for key in sorted({(r["algo"], r["nproc"]) for r in data}):
        pts = sorted((r["bytes"], r["time_s"]) for r in data if (r["algo"], r["nproc"]) == key)
        if len(pts) >= 2:
            out[key] = fit_alpha_beta(*zip(*pts))
    return out


def plot_sweep(data: Sequence[dict[str, Any]], fit: bool = True, title: str | None = None):
    """Latency (log-log, with the α–β fit as a line) and bus bandwidth against message size."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    if not data:
        raise ValueError("plot_sweep: no measurements to plot")
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(11, 5.5))
    models = fits(data) if fit else {}
    for key in sorted({(r["algo"], r["nproc"]) for r in data}):
        algo, n = key
        pts = sorted((r["bytes"], r["time_s"], r["busbw"]) for r in data if (r["algo"], r["nproc"]) == key)
        x, t, bw = map(np.array, zip(*pts))
        style = dict(color=COLORS.get(algo), marker="o" if n == 2 else "s", linestyle="none")
        label = f"{algo}, {n} ranks"
        ax_t.plot(x, t * 1e3, **style, label=label)
        ax_b.plot(x, bw / 1e9, **{**style, "linestyle": "-" if n == 2 else "--"}, label=label)
        if key in models:
            m = models[key]
            xs = np.geomspace(x.min(), x.max(), 50)
            ax_t.plot(xs, m.predict(xs) * 1e3, color=COLORS.get(algo), linestyle="-" if n == 2 else "--",
                      alpha=0.6, label=f"  fit: α={m.alpha * 1e6:.0f} µs, {_bw_text(m)}")
    for ax in (ax_t, ax_b):
        ax.set_xscale("log")
        ax.set_xlabel("message size per rank (bytes)")
        ax.grid(True, which="both", alpha=0.3)
    ax_t.set_yscale("log")
    ax_t.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 0.5, 1, 2 instead of 2×10⁰
    ax_t.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))
    ax_t.set_ylabel("time per all-reduce (ms)")
    ax_t.set_title("latency: points measured, lines t = α + N/B")
    ax_b.set_ylabel("bus bandwidth (GB/s)")
    ax_b.set_title("bus bandwidth = N/t · 2(n−1)/n")
    for ax in (ax_t, ax_b):  # below the axes: the points stay visible
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def measure_and_plot(algos: Sequence[str], nprocs: Sequence[int], lo_kb: float, hi_kb: float,
                     points: int = 4, iters: int = 3, stream: bool = True):
    """The widget's callback as plain Python: sweep, then plot. Returns ``(data, figure)``."""
    if not algos:
        raise ValueError("pick at least one algorithm")
    if not nprocs:
        raise ValueError("pick at least one world size")
    sizes = default_sizes(int(lo_kb * 1024), int(hi_kb * 1024), points)
    data = sweep(tuple(algos), tuple(nprocs), sizes, iters=iters, stream=stream)
    return data, plot_sweep(data, title=f"{_human(sizes[0])} .. {_human(sizes[-1])}, {iters} timed calls each")


def widget(max_kb_log2: int = 15):
    """Pick algorithms, world sizes and a size range, then press *measure* (progress bar while it runs)."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    algos = w.SelectMultiple(options=ALGOS, value=("builtin", "ring"), description="algorithms", rows=4)
    ranks = w.SelectMultiple(options=(2, 3, 4), value=(2,), description="ranks", rows=3)
    span = w.IntRangeSlider(value=(2, 10), min=0, max=max_kb_log2, description="log2(KB)",
                            continuous_update=False)
    points = w.IntSlider(value=4, min=2, max=8, description="sizes")
    iters = w.IntSlider(value=3, min=1, max=20, description="timed calls")
    button, out = w.Button(description="measure", button_style="primary"), w.Output()

    def on_click(_):
        out.clear_output()
        with out:
            button.disabled = True
            try:
                _, fig = measure_and_plot(algos.value, ranks.value, 2 ** span.value[0], 2 ** span.value[1],
                                          points.value, iters.value)
                display(fig)
                plt.close(fig)
            except (ValueError, RuntimeError) as e:  # LaunchError is a RuntimeError
                print(f"could not measure: {e}")
            finally:
                button.disabled = False

    button.on_click(on_click)
    return w.VBox([w.HBox([algos, ranks]), span, points, iters, button, out])


def ring_schedule(n: int) -> list[dict[str, Any]]:
    """Simulate the ring's bookkeeping (no communication): who holds whose data, step by step.

    Uses the same indices as :func:`disttutor.scratch.allreduce.ring_all_reduce`.
    Each entry: ``{"phase", "step", "sends": [(src, dst, chunk)], "count": n×n list}``
    where ``count[r][c]`` is how many ranks' contributions rank ``r``'s chunk
    ``c`` contains after the step (``n`` everywhere at the end).
    """
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"a ring needs n >= 2 ranks, got {n!r}")
    have = [[{r} for _ in range(n)] for r in range(n)]
    out = [{"phase": "start", "step": 0, "sends": [], "count": [[len(s) for s in row] for row in have]}]
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(n - 1):
            shift = 0 if phase == "reduce-scatter" else 1
            sends = [(r, (r + 1) % n, (r - step + shift) % n) for r in range(n)]
            snapshot = [[set(s) for s in row] for row in have]  # everybody sends at the same time
            for src, dst, c in sends:
                have[dst][c] = (have[dst][c] | snapshot[src][c]) if phase == "reduce-scatter" else set(snapshot[src][c])
            out.append({"phase": phase, "step": step + 1, "sends": sends,
                        "count": [[len(s) for s in row] for row in have]})
    return out


def plot_ring_schedule(n: int = 4):
    """One panel per step: rows are ranks, columns chunks; the number is how many ranks' data
    that chunk already sums; outlined cells are the chunks just received."""
    import matplotlib.pyplot as plt

    steps = ring_schedule(n)
    fig, axes = plt.subplots(1, len(steps), figsize=(2.0 * len(steps), 2.4))
    for ax, st in zip(axes, steps):
        ax.imshow(np.array(st["count"]), cmap="Greens", vmin=0, vmax=n)
        for r in range(n):
            for c in range(n):
                k = st["count"][r][c]
                ax.text(c, r, k, ha="center", va="center", fontsize=8, color="white" if k > n / 2 else "black")
        for _src, dst, c in st["sends"]:
            ax.add_patch(plt.Rectangle((c - 0.5, dst - 0.5), 1, 1, fill=False, edgecolor="black", lw=2))
        ax.set_title(f"{st['phase']}\nstep {st['step']}" if st["step"] else "start", fontsize=8)
        ax.set_xticks(range(n), [f"c{c}" for c in range(n)], fontsize=7)
        ax.set_yticks(range(n), [f"r{r}" for r in range(n)], fontsize=7)
    fig.suptitle(f"ring all-reduce on {n} ranks: contributions per chunk (rows: ranks, columns: chunks)",
                 fontsize=9)
    fig.tight_layout()
    return fig
