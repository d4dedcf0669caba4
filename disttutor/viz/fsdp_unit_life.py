"""Chapter 11's idealised picture of an FSDP unit's life, without and with prefetching, on a time axis.

Introduced in chapter 11. Each block unit all-gathers its weights, runs forward, frees them; in
backward it all-gathers them again, runs backward, and reduce-scatters its gradient. The picture
lays that out for every block of the chapter's run as if on a GPU: one link that carries one
collective at a time, one compute stream, and every block the same (the run's median durations, so
no noise). *Without prefetching* each all-gather is issued when its block is about to run, and the
compute waits for it; *with prefetching* the next block's all-gather is issued as the current block
starts computing, so it can hide under that compute. Kernel side; matplotlib only inside the drawing.
"""
from __future__ import annotations

import statistics

KINDS = {"all_gather": ("AG", "#4C72B0"), "reduce_scatter": ("RS", "#C44E52"),
         "forward": ("fwd", "#8c8c8c"), "backward": ("bwd", "#5f5f5f")}


def median_times(results: list[dict], cond: str = "prefetch off") -> dict[str, float]:
    """One block's ms for each kind: a collective's duration is its *shortest* over the ranks (the rank
    that arrived last did not wait for the others), a compute's is as measured; then the median over
    the blocks (and ranks), so one slow call does not set the picture."""
    out = {}
    for op in ("all_gather", "reduce_scatter"):
        per_rank = [[c["ms"] for c in r["comm"][cond]["calls"] if c["op"] == op and c["unit"] != "root"]
                    for r in results]
        out[op] = statistics.median(min(call) for call in zip(*per_rank))
    for phase in ("forward", "backward"):
        out[phase] = statistics.median(c["ms"] for r in results for c in r["comm"][cond]["compute"]
                                       if c["phase"] == phase)
    return out


def schedule(n_blocks: int, t: dict[str, float], prefetch: bool) -> list[dict]:
    """Spans ``{kind, block, start, ms, lane}`` of one step (lane: 'link' or 'compute'); a list-scheduling
    of the rules in the module's docstring, the link carrying one collective at a time, in issue order."""
    spans, link, comp = [], 0.0, 0.0

    def put(kind, block, ready, lane_free):
        start = max(ready, lane_free)
        spans.append({"kind": kind, "block": block, "start": start, "ms": t[kind],
                      "lane": "compute" if kind in ("forward", "backward") else "link"})
        return start + t[kind]

    gathered = {}
    order = list(range(n_blocks))
    for phase, blocks in (("forward", order), ("backward", order[::-1])):
        for k, b in enumerate(blocks):
            if b not in gathered:          # not prefetched: issued when the block is about to run
                gathered[b] = link = put("all_gather", b, comp, link)
            start = max(gathered.pop(b), comp)
            if prefetch and k + 1 < len(blocks):   # the next block's all-gather, issued as this one starts
                gathered[blocks[k + 1]] = link = put("all_gather", blocks[k + 1], start, link)
            comp = put(phase, b, start, comp)
            if phase == "backward":
                link = put("reduce_scatter", b, comp, link)
        gathered.clear()
    return spans


def step_ms(spans: list[dict]) -> float:
    return max(s["start"] + s["ms"] for s in spans)


def held_intervals(spans: list[dict], n_blocks: int) -> dict[int, list[tuple[float, float]]]:
    """When each block's full weights are in memory: from its all-gather's start to the end of the
    compute that uses them (forward, then backward)."""
    out = {b: [] for b in range(n_blocks)}
    pending = {}
    for s in sorted(spans, key=lambda s: s["start"]):
        if s["kind"] == "all_gather":
            pending[s["block"]] = s["start"]
        elif s["lane"] == "compute":
            out[s["block"]].append((pending.pop(s["block"]), s["start"] + s["ms"]))
    return out


def n_blocks(results: list[dict]) -> int:
    """The run's block units (the root unit aside)."""
    return sum(1 for c in results[0]["comm"]["prefetch off"]["compute"] if c["phase"] == "forward")


def idealised_steps(results: list[dict]) -> tuple[float, float]:
    """The idealised step's ms (without, with prefetching), from the run's median durations."""
    t = median_times(results)
    return step_ms(schedule(n_blocks(results), t, False)), step_ms(schedule(n_blocks(results), t, True))


def unit_life_figure(results: list[dict]):
    """Two panels (without, with prefetching): the link, the compute stream, and each block's full weights."""
    import matplotlib.pyplot as plt

    blocks = n_blocks(results)
    t = median_times(results)
    plans = {"without prefetching": schedule(blocks, t, False), "with prefetching": schedule(blocks, t, True)}
    fig, axes = plt.subplots(2, 1, figsize=(11, 2 * (2 + blocks) * 0.42 + 1.6), sharex=True)
    lanes = ["link: collectives", "compute"] + [f"block {b}: full weights held" for b in range(blocks)]
    span = max(step_ms(p) for p in plans.values())
    char_ms = span / 9.5 * (8 / 72) * 0.62          # one label character's width, in ms, at fontsize 8
    for ax, (title, spans) in zip(axes, plans.items()):
        for s in spans:
            short, color = KINDS[s["kind"]]
            y = len(lanes) - 1 - (0 if s["lane"] == "link" else 1)
            ax.broken_barh([(s["start"], s["ms"])], (y - 0.4, 0.8), color=color, edgecolor="white")
            label = f"{short} {s['block']}"
            if s["ms"] > (len(label) + 1) * char_ms:   # inside the bar when it fits, else just after it
                ax.text(s["start"] + s["ms"] / 2, y, label, ha="center", va="center", fontsize=8, color="white")
            else:
                ax.text(s["start"] + s["ms"] + char_ms / 2, y, label, ha="left", va="center", fontsize=8)
        for b, spans_b in held_intervals(spans, blocks).items():
            ax.broken_barh([(a, z - a) for a, z in spans_b], (len(lanes) - 3 - b - 0.3, 0.6), color="#b5cde8")
        ax.set_yticks(range(len(lanes)), lanes[::-1], fontsize=8)
        ax.set_title(f"{title}: one step {step_ms(spans):.1f} ms", fontsize=10, loc="left")
    axes[-1].set_xlabel(f"ms from the step's start (idealised: every block's durations = the run's medians, "
                        f"{len(results)} ranks)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=KINDS[k][1]) for k in KINDS] + [
        plt.Rectangle((0, 0), 1, 1, color="#b5cde8")]
    fig.legend(handles, ["AG = all-gather", "RS = reduce-scatter", "forward", "backward", "full weights in memory"],
               loc="upper right", ncol=5, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig
