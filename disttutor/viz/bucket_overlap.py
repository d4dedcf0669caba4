"""DDP's overlap, idealised: the backward layer by layer, each bucket's all-reduce on a time axis (chapter 4).

Introduced in chapter 4. A schematic, not a measurement: it draws what the α–B model says one step
of DDP does, from a run's own numbers (its buckets' bytes, its world size, its link, its forward and
backward times), with no noise. The backward produces gradient bytes at an even rate (the last
layers first); bucket ``b`` of ``S_b`` bytes is ready once its bytes are produced; the link carries
one ring all-reduce at a time, each taking ``t_b = 2(n-1) alpha + 2(n-1)/n * S_b / B``. Whatever the
link still carries when the backward ends is *exposed*: at least the last bucket's all-reduce.

:func:`schedule` computes it (plain Python, no plotting); :func:`plot_bucket_overlap` draws it.
Chapter 8's bucket-size schematic (:mod:`disttutor.viz.bucket_size`) reuses :func:`schedule`.
"""
from __future__ import annotations

__all__ = ["all_reduce_s", "schedule", "plot_bucket_overlap"]


def all_reduce_s(nbytes: float, world: int, alpha: float, bandwidth: float) -> float:
    """One ring all-reduce of ``nbytes`` per rank on ``world`` ranks: 2(n-1) alpha + 2(n-1)/n * S / B."""
    if world < 2:
        return 0.0
    steps = 2 * (world - 1)
    return steps * alpha + steps / world * nbytes / bandwidth


def schedule(bucket_bytes, world: int, alpha: float, bandwidth: float, forward_s: float,
             backward_s: float) -> dict:
    """The idealised step: when each bucket is ready and on the link, with overlap and without.

    ``bucket_bytes`` in the order DDP launches them (bucket 0 holds the last layers). Times in
    seconds from the step's start. Returns ``{"buckets": [{"bytes", "ready", "start", "end",
    "deferred_start", "deferred_end"}], "backward_end", "exposed_s", "deferred_exposed_s",
    "comm_s", "last_s"}``: ``exposed_s`` is how long the link runs past the backward with overlap,
    ``deferred_exposed_s`` the same when every bucket waits for the backward to end (= ``comm_s``,
    the sum of all the buckets' all-reduces).
    """
    sizes = [float(b) for b in bucket_bytes]
    if not sizes or min(sizes) <= 0:
        raise ValueError(f"bucket_bytes must be positive sizes, got {list(bucket_bytes)}")
    total, done = sum(sizes), 0.0
    end_bwd = forward_s + backward_s
    link_free, later = 0.0, end_bwd
    rows = []
    for s in sizes:
        done += s
        ready = forward_s + backward_s * done / total    # the backward's gradients arrive at an even rate
        t = all_reduce_s(s, world, alpha, bandwidth)
        start = max(ready, link_free)                    # one all-reduce at a time on the link
        link_free = start + t
        rows.append({"bytes": s, "ready": ready, "start": start, "end": link_free, "t": t,
                     "deferred_start": later, "deferred_end": later + t})
        later += t
    comm = sum(r["t"] for r in rows)
    return {"buckets": rows, "backward_end": end_bwd, "exposed_s": max(link_free - end_bwd, 0.0),
            "deferred_exposed_s": comm, "comm_s": comm, "last_s": rows[-1]["t"]}


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.2f} MiB" if nbytes >= 2**20 / 10 else f"{nbytes / 2**10:.1f} KiB"


def plot_bucket_overlap(bucket_bytes, world: int, link, forward_s: float, backward_s: float, ax=None):
    """The idealised step on a time axis (ms): the rank's forward and backward, one bar per bucket's
    all-reduce on the link with overlap (green hidden, red exposed) and without (all after the backward).

    ``link`` is a :class:`disttutor.links.presets.Link` (its ``alpha`` and ``beta`` constants, its name).
    Returns the figure.
    """
    import matplotlib.pyplot as plt

    alpha, bandwidth = link.alpha.value, link.beta.value
    s = schedule(bucket_bytes, world, alpha, bandwidth, forward_s, backward_s)
    ax = ax or plt.subplots(figsize=(9, 3.4), layout="constrained")[1]
    ms = 1e3
    end = s["backward_end"]
    right = max(end + s["comm_s"], s["buckets"][-1]["end"])
    wide = 0.035 * right        # a bar narrower than this carries no label (the labels would overlap)

    def label(x0: float, x1: float, y: float, text: str) -> None:
        if x1 - x0 >= wide:
            ax.text(ms * (x0 + x1) / 2, y, text, ha="center", va="center", fontsize=8)
    # Row 2 (top): the rank's compute, the backward cut where each bucket's gradients are complete.
    ax.broken_barh([(0, ms * forward_s)], (4.1, 0.8), color="C0")
    ax.text(ms * forward_s / 2, 4.5, "forward", ha="center", va="center", fontsize=8, color="w")
    prev = forward_s
    for k, b in enumerate(s["buckets"]):
        ax.broken_barh([(ms * prev, ms * (b["ready"] - prev))], (4.1, 0.8), color="C9" if k % 2 else "C2",
                       alpha=0.55, edgecolor="w")
        label(prev, b["ready"], 4.5, f"b{k}")
        prev = b["ready"]
    # Row 1: the link with overlap; the part of a bar after the backward's end is exposed.
    for k, b in enumerate(s["buckets"]):
        hidden = max(min(b["end"], end) - b["start"], 0.0)
        ax.broken_barh([(ms * b["start"], ms * hidden)], (2.6, 0.8), color="C2", edgecolor="w")
        if b["end"] > end:
            x0 = max(b["start"], end)
            ax.broken_barh([(ms * x0, ms * (b["end"] - x0))], (2.6, 0.8), color="C3", edgecolor="w")
        label(b["start"], b["end"], 3.0, f"b{k}")
    # Row 0: the link without overlap: every bucket after the backward, one after another.
    for k, b in enumerate(s["buckets"]):
        ax.broken_barh([(ms * b["deferred_start"], ms * b["t"])], (1.1, 0.8), color="C3", edgecolor="w")
        label(b["deferred_start"], b["deferred_end"], 1.5, f"b{k}")
    ax.axvline(ms * end, color="k", ls="--", lw=1)
    ax.text(ms * end, 5.25, " backward ends", fontsize=8, va="bottom")
    last = s["buckets"][-1]
    ax.annotate(f"exposed {ms * s['exposed_s']:.1f} ms (last bucket's all-reduce: {ms * s['last_s']:.1f} ms)",
                (ms * max(last["end"], end), 3.0), xytext=(6, 0), textcoords="offset points", fontsize=8, va="center")
    ax.annotate(f"exposed {ms * s['deferred_exposed_s']:.1f} ms (every bucket)",
                (ms * (end + s["comm_s"]), 1.5), xytext=(6, 0), textcoords="offset points", fontsize=8, va="center")
    ax.set_yticks([4.5, 3.0, 1.5], ["rank: compute", "link: overlap", "link: no overlap"], fontsize=9)
    ax.set_ylim(0.6, 5.9)
    ax.set_xlim(0, ms * right * 1.45)
    ax.set_xlabel("ms from the step's start (idealised: gradients at an even rate, no noise; bN: bucket N)")
    sizes = sorted({_mib(b) for b in bucket_bytes})
    ax.set_title(f"DDP's buckets, drawn from the α–B model: {world} ranks, {len(s['buckets'])} buckets of "
                 f"{' / '.join(sizes[:3])}, {link.name} (α = {alpha * 1e6:.3g} µs, B = {bandwidth / 1e9:.4g} GB/s)",
                 fontsize=9)
    return ax.figure
