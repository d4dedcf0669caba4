"""Chapter 10's throughput and time split, from chapter 9's profiler traces (:mod:`disttutor.troubleshoot.traces`).

``lm_train --profile-steps N`` records N steps on every rank with ``torch.profiler``; each rank's
main thread runs ``data`` / ``forward`` / ``backward`` / ``optimizer`` regions one after another,
while the backend's collectives (``gloo:all_reduce``, ``gloo:broadcast``) run in gloo's own
threads -- *during* those regions (DDP's all-reduce inside ``backward``, its buffer broadcast
inside ``forward``, the logged loss's all-reduce inside ``optimizer``).

So the split is a partition of the profiled window (the profiler's ``ProfilerStep#`` spans) by
precedence: an instant in which a collective is in flight is **communication** (the main thread
waits for it, or computes alongside it); otherwise it is **data** or **compute** if the main thread
is in that region; what is left is **other** (Python between regions, progress lines). The four
add up to the window by construction; what is measured is how the window divides.
"""
from __future__ import annotations

from disttutor.troubleshoot import traces

COMPUTE = ("forward", "backward", "optimizer")
PARTS = ("communication", "data", "compute", "other")


def _spans(events: list[dict], keep) -> list[tuple[float, float]]:
    return [(e["ts"], e["ts"] + e["dur"]) for e in events if keep(e)]


def _covered(spans: list[tuple[float, float]], a: float, b: float) -> bool:
    return any(s <= a and b <= e for s, e in spans)


def split(events: list[dict]) -> dict[str, float]:
    """One rank's profiled window: ``{"window_ms", "steps", "communication_ms", "data_ms",
    "compute_ms", "other_ms", "comm_outside_regions_ms"}``."""
    steps = _spans(events, lambda e: e.get("name", "").startswith("ProfilerStep#"))
    if not steps:
        raise ValueError("no ProfilerStep# spans in this trace: was it recorded with a profiler schedule?")
    w0, w1 = min(s for s, _ in steps), max(e for _, e in steps)
    clip = lambda spans: [(max(s, w0), min(e, w1)) for s, e in spans if e > w0 and s < w1]  # noqa: E731
    comm = clip(_spans(events, lambda e: traces.kind(e) == "comm"))
    data = clip(_spans(events, lambda e: traces.kind(e) == "data"))
    comp = clip(_spans(events, lambda e: traces.kind(e) in COMPUTE))
    regions = data + comp
    out = {p: 0.0 for p in PARTS}
    outside = 0.0
    cuts = sorted({w0, w1, *(t for sp in (comm, data, comp) for s, e in sp for t in (s, e))})
    for a, b in zip(cuts, cuts[1:]):  # elementary pieces: each lies wholly inside or outside every span
        part = ("communication" if _covered(comm, a, b) else "data" if _covered(data, a, b)
                else "compute" if _covered(comp, a, b) else "other")
        out[part] += b - a
        if part == "communication" and not _covered(regions, a, b):
            outside += b - a
    res = {f"{p}_ms": v / 1000 for p, v in out.items()}
    res.update(window_ms=(w1 - w0) / 1000, steps=len(steps), comm_outside_regions_ms=outside / 1000)
    return res


def summarize(run_dir: str, tokens_per_step: int) -> dict[int, dict[str, float]]:
    """Per rank: the split, each part's share of the window, and tokens/s over the profiled steps."""
    out = {}
    for rank, events in traces.load(run_dir).items():
        s = split(events)
        s.update({f"{p}_share": s[f"{p}_ms"] / s["window_ms"] for p in PARTS})
        s["tokens_per_s"] = tokens_per_step * s["steps"] / (s["window_ms"] / 1000)
        out[rank] = s
    return out
