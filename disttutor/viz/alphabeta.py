"""The α–β cost model of chapter 2's three all-reduces (naive, tree, ring), drawn without ranks, and its widget.

Introduced in chapter 2. One notation for the course: a message of ``b`` bytes takes ``α + b/B``
(α: latency in s, B: bandwidth in bytes/s). Each rank has one link that sends one message and
receives one at the same time; adding is free. On ``n`` ranks, a tensor of ``N`` bytes per rank:

* naive (rank 0 receives ``n−1`` tensors one after another, adds, sends ``n−1``): ``2(n−1)(α + N/B)``;
* tree (binomial, as :func:`disttutor.scratch.allreduce.tree_all_reduce`): ``⌈log₂n⌉`` rounds up and as
  many down, a whole tensor each: ``2⌈log₂n⌉(α + N/B)``;
* ring (reduce-scatter then all-gather, ``2(n−1)`` steps of ``N/n``, every rank sending while it
  receives): ``2(n−1)α + 2(n−1)/n · N/B``.

So ``t = steps·α + wire·N/B``, where ``wire`` (in tensors) is what the busiest rank sends
(:func:`sent`, the numbers the chapter's ``check_cost_model`` checks) -- twice over for naive and tree,
whose root receives everything before it sends anything; once for the ring, which does both at once.

:func:`model_rows` and :func:`curves` compute; :func:`plot_model` draws them; :func:`cost_widget` only
wires ipywidgets to :func:`model_view`. No numpy or matplotlib at import: the web edition runs the
same functions in the reader's browser (:mod:`disttutor.viz.web`).
"""
from __future__ import annotations

ALGOS = ("naive", "tree", "ring")
COLORS = {"naive": "#d62728", "tree": "#ff7f0e", "ring": "#2ca02c"}  # as in the measured sweep's plot
# The widget's controls: keyword of :func:`model_view` -> the label a learner reads (the web edition's
# live widget finds its controls in a notebook's saved widget state by these labels).
CONTROLS = {"n": "ranks", "alpha_us": "α (µs)", "gb_s": "B (GB/s)"}
RANKS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
ALPHAS_US = (1, 2, 5, 10, 20, 50, 100)
BANDWIDTHS = (0.125, 1.25, 12.5, 50, 450)  # GB/s: 1 GbE, 10 GbE, 100 Gb/s InfiniBand, 400 Gb/s, NVLink 4
SIZES = tuple(1 << k for k in range(10, 31))  # the x axis: 1 KiB .. 1 GiB per rank
TABLE_SIZES = (4 << 10, 4 << 20, 1 << 30)      # the table's columns: 4 KiB, 4 MiB, 1 GiB
XLABEL = "message size N per rank (bytes)"
YLABEL = "predicted time per all-reduce"


def _check(algo: str, n: int) -> None:
    if algo not in ALGOS:
        raise ValueError(f"unknown algorithm {algo!r}; choose from {', '.join(ALGOS)}")
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"an all-reduce needs n >= 2 ranks, got {n!r}")


def rounds(n: int) -> int:
    """⌈log₂ n⌉: the binomial tree's depth (``n`` need not be a power of two)."""
    return (n - 1).bit_length()


def steps(algo: str, n: int) -> int:
    """Messages one after another on the slowest path: each pays α once."""
    _check(algo, n)
    return {"naive": 2 * (n - 1), "tree": 2 * rounds(n), "ring": 2 * (n - 1)}[algo]


def sent(algo: str, n: int) -> float:
    """Bytes the busiest rank sends, in units of the tensor ``N``: naive n−1, tree ⌈log₂n⌉, ring 2(n−1)/n."""
    _check(algo, n)
    return {"naive": float(n - 1), "tree": float(rounds(n)), "ring": 2 * (n - 1) / n}[algo]


def wire(algo: str, n: int) -> float:
    """Tensors' worth of link time on the slowest path: the busiest rank's receives and sends one after
    another (naive, tree: twice what it sends), or at the same time (ring: what it sends)."""
    return sent(algo, n) * (1 if algo == "ring" else 2)


def time_s(algo: str, n: int, nbytes: float, alpha: float, bandwidth: float) -> float:
    """Predicted seconds: ``steps·α + wire·N/B`` (α in s, B in bytes/s)."""
    if alpha < 0 or not bandwidth > 0:
        raise ValueError(f"need α >= 0 and B > 0, got α={alpha}, B={bandwidth}")
    return steps(algo, n) * alpha + wire(algo, n) * nbytes / bandwidth


# The bytes the busiest rank sends, as the chapter's ``check_cost_model`` reads them: model[algo](n).
SENT = {a: (lambda n, a=a: sent(a, n)) for a in ALGOS}


def crossover(n: int, alpha: float, bandwidth: float) -> float | None:
    """The message size above which the ring beats the tree (None: the ring is never slower)."""
    more_steps = steps("ring", n) - steps("tree", n)
    less_wire = wire("tree", n) - wire("ring", n)
    return alpha * bandwidth * more_steps / less_wire if more_steps > 0 and less_wire > 0 else None


def human_bytes(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if nbytes < 1024:
            return f"{nbytes:.3g} {unit}"
        nbytes /= 1024
    return f"{nbytes:.3g} GiB"


def human_time(t: float) -> str:
    return f"{t * 1e6:.3g} µs" if t < 1e-3 else f"{t * 1e3:.3g} ms" if t < 1 else f"{t:.3g} s" if t < 1000 else f"{t:.0f} s"


def _args(n, alpha_us, gb_s) -> tuple[int, float, float]:
    """The controls' values as numbers (the web page passes an option's label: "0.125" for 0.125)."""
    return int(n), float(alpha_us) * 1e-6, float(gb_s) * 1e9


def title(n, alpha_us, gb_s) -> str:
    n, alpha, bandwidth = _args(n, alpha_us, gb_s)
    x = crossover(n, alpha, bandwidth)
    where = f"ring beats tree above {human_bytes(x)}" if x is not None else "ring never slower than tree"
    return f"{n} ranks, α = {alpha * 1e6:g} µs, B = {bandwidth / 1e9:g} GB/s: {where}"


def curves(n, alpha_us, gb_s) -> list[tuple[str, str, list[float]]]:
    """One line per algorithm: ``(name, colour, seconds at each of SIZES)``."""
    n, alpha, bandwidth = _args(n, alpha_us, gb_s)
    return [(a, COLORS[a], [time_s(a, n, s, alpha, bandwidth) for s in SIZES]) for a in ALGOS]


def end_labels(n, alpha_us, gb_s) -> list[str]:
    """The note at each line's right end: its time for the largest message."""
    return [f"{a}: {human_time(ts[-1])}" for a, _, ts in curves(n, alpha_us, gb_s)]


def model_rows(n, alpha_us, gb_s) -> list[dict]:
    """The widget's table: per algorithm its steps, what the busiest rank sends, and three predicted times."""
    n, alpha, bandwidth = _args(n, alpha_us, gb_s)
    return [{"algorithm": a, "steps": steps(a, n), "sent_xN": round(sent(a, n), 3),
             **{f"t({human_bytes(s).replace(' ', '')})": human_time(time_s(a, n, s, alpha, bandwidth)).replace(" ", "")
                for s in TABLE_SIZES}} for a in ALGOS]


def plot_model(n=8, alpha_us=20, gb_s=0.125, ax=None):
    """Predicted time against message size, log-log, one line per algorithm; returns the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2)) if ax is None else (ax.figure, ax)
    for (name, color, ts), note in zip(curves(n, alpha_us, gb_s), end_labels(n, alpha_us, gb_s)):
        ax.plot(SIZES, ts, color=color, label=name)
        ax.text(SIZES[-1] * 1.3, ts[-1], note, color=color, va="center", fontsize=8)
    ax.set(xscale="log", yscale="log", xlabel=XLABEL, ylabel=f"{YLABEL} (s)", title=title(n, alpha_us, gb_s),
           xlim=(SIZES[0], SIZES[-1] * 30))
    ax.set_xticks([1 << 10, 1 << 20, 1 << 30], ["1 KiB", "1 MiB", "1 GiB"])
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def model_view(n=8, alpha_us=20, gb_s=0.125):
    """What the widget shows for one choice of its controls: ``(rows, fig)``."""
    return model_rows(n, alpha_us, gb_s), plot_model(n, alpha_us, gb_s)


def cost_widget(n=8, alpha_us=20, gb_s=0.125):
    """The ipywidgets cost model: ranks, latency α and bandwidth B; redraws the three predicted all-reduces."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from disttutor.launcher.results import format_table

    controls = dict(
        n=w.SelectionSlider(options=RANKS, value=n, description=CONTROLS["n"]),
        alpha_us=w.SelectionSlider(options=ALPHAS_US, value=alpha_us, description=CONTROLS["alpha_us"]),
        gb_s=w.SelectionSlider(options=BANDWIDTHS, value=gb_s, description=CONTROLS["gb_s"]),
    )
    out, table = w.Output(), w.Output()
    box = w.VBox([w.HBox([controls["n"], controls["alpha_us"]]), controls["gb_s"], out, table])

    def redraw(_=None):
        box.rows = None  # set first: a failed draw leaves no stale numbers behind
        rows, fig = model_view(**{k: c.value for k, c in controls.items()})
        with out:
            out.clear_output(wait=True)
            display(fig)
            plt.close(fig)
        box.rows = rows
        with table:
            table.clear_output(wait=True)
            print(format_table(rows))

    for c in controls.values():
        c.observe(redraw, names="value")
    redraw()
    return box
