"""Reading the per-rank Chrome traces of :mod:`disttutor.programs.profile_ddp` (chapter 9).

A Chrome trace is JSON: ``{"traceEvents": [{"name", "ph", "ts", "dur", ...}]}``,
times in microseconds. Complete events (``ph == "X"``) carry a duration. We keep
our own ``record_function`` regions (forward, backward, optimizer; data in chapter 10) and the
communication the backend recorded (``gloo:all_reduce`` / ``nccl:all_reduce``,
run by the backend's own thread, so it overlaps ``backward``).
"""
from __future__ import annotations

import glob
import json
import os
import re

REGIONS = ("forward", "backward", "optimizer", "data")  # "data": chapter 10's input batches
_COMM = re.compile(r"^(gloo|nccl):")
_RANK = re.compile(r"trace_rank(\d+)\.json$")


def load(run_dir: str) -> dict[int, list[dict]]:
    """``{rank: complete events}`` of every ``trace_rank{r}.json`` in ``run_dir``."""
    out = {}
    for path in glob.glob(os.path.join(run_dir, "trace_rank*.json")):
        m = _RANK.search(path)
        if m:
            events = json.load(open(path)).get("traceEvents", [])
            out[int(m.group(1))] = [e for e in events if e.get("ph") == "X" and "dur" in e]
    if not out:
        raise FileNotFoundError(f"no trace_rank*.json in {run_dir!r}: did the profiled run finish?")
    return dict(sorted(out.items()))


def kind(event: dict) -> str | None:
    """"forward" / "backward" / "optimizer" (our regions), "comm" (the backend's collectives) or None."""
    name = event.get("name", "")
    if name in REGIONS and event.get("cat") == "user_annotation":
        return name
    return "comm" if _COMM.match(name) else None


def segments(events: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """``{kind: [(start_ms, length_ms)]}`` relative to the first region of this rank."""
    mine = [e for e in events if kind(e)]
    t0 = min((e["ts"] for e in mine), default=0.0)
    out: dict[str, list[tuple[float, float]]] = {}
    for e in sorted(mine, key=lambda e: e["ts"]):
        out.setdefault(kind(e), []).append(((e["ts"] - t0) / 1000, e["dur"] / 1000))
    return out


def totals(events: list[dict]) -> dict[str, float]:
    """Milliseconds per kind over the profiled steps."""
    return {k: round(sum(d for _, d in v), 2) for k, v in segments(events).items()}
