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


#: Holistic Trace Analysis' analyses tried on these CPU traces by :func:`hta_probe` (all made for GPU kernels).
HTA_CALLS = ("get_temporal_breakdown", "get_comm_comp_overlap", "get_idle_time_breakdown",
             "get_gpu_kernel_breakdown", "get_potential_stragglers", "get_profiler_steps")


def hta_probe(run_dir: str) -> list[str] | None:
    """What Holistic Trace Analysis (``pip install HolisticTraceAnalysis``) makes of these traces.

    One line per analysis: what it returned or raised. None if HTA is not installed. HTA is not a
    dependency of the course: on CPU (gloo) traces its analyses find no GPU kernels (chapter 9).
    """
    import contextlib
    import io
    import logging
    import shutil
    import tempfile
    import warnings

    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return None
    with tempfile.TemporaryDirectory(prefix="disttutor-hta-") as d:
        for path in glob.glob(os.path.join(run_dir, "trace_rank*.json")):  # HTA reads every .json it finds
            shutil.copy(path, d)
        quiet = io.StringIO()  # HTA prints a line per parsed file and logs per call: keep only the answers
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            level = logging.root.manager.disable
            logging.disable(logging.CRITICAL)
            try:
                analysis = TraceAnalysis(trace_dir=d)
                lines = [f"parsed ranks {sorted(int(r) for r in analysis.t.get_ranks())}: "
                         f"{len(analysis.t.get_trace(0))} events of rank 0 as a DataFrame"]
                for name in HTA_CALLS:
                    try:
                        out = getattr(analysis, name)(**({"visualize": False} if "breakdown" in name
                                                          or "overlap" in name else {}))
                        lines.append(f"{name}: {_describe(out)}")
                    except Exception as e:  # exactly what a learner would see raised
                        lines.append(f"{name}: raised {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            finally:
                logging.disable(level)
    return lines


def _describe(out) -> str:
    """A one-line description of what an HTA call returned (DataFrames, tuples of them, lists)."""
    if isinstance(out, tuple):
        return "(" + ", ".join(_describe(o) for o in out) + ")"
    if hasattr(out, "empty") and hasattr(out, "columns"):
        if out.empty:
            return "an empty DataFrame"
        return f"a DataFrame {out.shape[0]}x{out.shape[1]}: " + " ".join(out.to_string(index=False).split())[:120]
    return f"{type(out).__name__} {out!r}"[:120]
