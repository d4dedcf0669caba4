"""FSDP's communication read from a rank's profiler trace: which collective, for which unit, when, how many bytes.

Introduced in chapter 11 (FSDP in full). ``torch.profiler`` records three things this module joins
(chapter 9 reads the same Chrome traces, :mod:`disttutor.troubleshoot.traces`):

* FSDP2's own ``record_function`` regions on the training thread: ``FSDP::all_gather (blocks.0)``,
  ``FSDP::post_backward_reduce (blocks.0)``, ``FSDP::forward_prefetch for blocks.1`` ... (the unit's
  name in brackets; the root unit has none);
* the c10d operator each one issues on the training thread (``c10d::_allgather_base_``,
  ``c10d::_reduce_scatter_base_``, with their tensors' shapes and dtypes when ``record_shapes=True``):
  the **payload** FSDP asks for;
* the backend running it on its own thread (``gloo:all_gather`` ...): **when the bytes really move**.
  Gloo has no native reduce-scatter: it runs one as an all-reduce of the whole tensor
  (``gloo:all_reduce``), a fact the trace shows.

The c10d operators and the backend's events are paired in order (one process group runs its
collectives in the order they were issued). Times are milliseconds from the step's start.
"""
from __future__ import annotations

import re

_ISSUE = {"c10d::_allgather_base_": "all_gather", "c10d::_reduce_scatter_base_": "reduce_scatter",
          "c10d::allreduce_": "all_reduce"}
_BACKEND = re.compile(r"^(gloo|nccl):(\w+)")
_UNIT = re.compile(r"^FSDP::(all_gather|post_backward_reduce)(?: \((.*)\))?$")
_SIZES = {"float": 4, "c10::BFloat16": 2, "c10::Half": 2, "double": 8, "BFloat16": 2, "Half": 2}
_HOOK = re.compile(r"^FSDP::(pre_forward|post_forward|pre_backward|post_backward_accumulate)(?: \((.*)\))?$")
PHASES = ("forward", "backward", "optimizer")


def _inside(e: dict, spans: list[dict]) -> dict | None:
    """The innermost span of ``spans`` (same thread) that contains event ``e``."""
    best = None
    for s in spans:
        if s["tid"] == e["tid"] and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]:
            if best is None or s["dur"] < best["dur"]:
                best = s
    return best


def _payload(e: dict) -> tuple[int, str]:
    """(bytes, dtype) of the collective's full tensor: an all-gather's output, a reduce-scatter's input."""
    dims, types = e["args"]["Input Dims"], e["args"]["Input type"]
    i = 1 if e["name"] == "c10d::_reduce_scatter_base_" else 0
    n = 1
    for d in dims[i]:
        n *= d
    return n * _SIZES.get(types[i], 4), types[i].replace("c10::", "")


def collectives(events: list[dict]) -> dict:
    """``{"calls": [...], "regions": {...}}`` of one profiled step (``events``: a Chrome trace's
    ``traceEvents``). Each call: op, unit, phase, bytes, dtype, issued (ms), moved (ms, on the backend's
    thread), ms (how long the backend took)."""
    done = [e for e in events if e.get("ph") == "X" and "dur" in e]
    regions = [e for e in done if e["name"] in PHASES and e.get("cat") == "user_annotation"]
    if not regions:
        raise ValueError("no forward/backward regions in the trace: wrap the step in record_function")
    t0 = min(e["ts"] for e in regions)
    fsdp = [e for e in done if _UNIT.match(e["name"])]
    issued = sorted((e for e in done if e["name"] in _ISSUE), key=lambda e: e["ts"])
    backend = sorted((e for e in done if _BACKEND.match(e["name"])), key=lambda e: e["ts"])
    ms = lambda t: round((t - t0) / 1000, 3)  # noqa: E731 (trace times are microseconds)
    calls = []
    for k, e in enumerate(issued):
        owner = _inside(e, fsdp)
        unit = (_UNIT.match(owner["name"]).group(2) or "root") if owner else None
        phase = _inside(e, regions)
        nbytes, dtype = _payload(e)
        ran = backend[k] if k < len(backend) else None
        calls.append({"op": _ISSUE[e["name"]], "unit": unit, "phase": phase["name"] if phase else None,
                      "bytes": nbytes, "dtype": dtype, "issued": ms(e["ts"]),
                      "backend_op": _BACKEND.match(ran["name"]).group(2) if ran else None,
                      "moved": ms(ran["ts"]) if ran else None, "ms": round(ran["dur"] / 1000, 3) if ran else None})
    spans = {p: [(ms(e["ts"]), round(e["dur"] / 1000, 3)) for e in regions if e["name"] == p] for p in PHASES}
    return {"calls": calls, "regions": spans, "compute": unit_compute(done, ms)}


def unit_compute(done: list[dict], ms) -> list[dict]:
    """Each unit's own compute: forward from the end of its ``pre_forward`` hook to the start of its
    ``post_forward``; backward from the end of ``pre_backward`` to ``post_backward_accumulate``."""
    marks: dict[tuple[str, str], dict] = {}
    for e in sorted(done, key=lambda e: e["ts"]):
        m = _HOOK.match(e["name"])
        if m:
            marks.setdefault((m.group(1), m.group(2) or "root"), e)
    out = []
    for (hook, unit), e in marks.items():
        if hook in ("pre_forward", "pre_backward") and unit != "root":  # the root's hooks enclose every block
            end = marks.get(("post_forward" if hook == "pre_forward" else "post_backward_accumulate", unit))
            if end is not None and end["ts"] >= e["ts"] + e["dur"]:
                start = e["ts"] + e["dur"]
                out.append({"unit": unit, "phase": "forward" if hook == "pre_forward" else "backward",
                            "start": ms(start), "ms": round((end["ts"] - start) / 1000, 3)})
    return sorted(out, key=lambda c: c["start"])


def backend_bytes(events: list[dict], op: str = "all_reduce") -> int:
    """Bytes of the backend's ``op`` events (``gloo:all_reduce`` ...): DDP's bucketed all-reduces
    are issued from C++ (no c10d operator on the training thread), so they are counted here."""
    total = 0
    for e in events:
        m = _BACKEND.match(e.get("name", ""))
        if e.get("ph") == "X" and m and m.group(2) == op:
            n = 1
            for d in e["args"]["Input Dims"][0]:
                n *= d
            total += n * _SIZES.get(e["args"]["Input type"][0], 4)
    return total


def ring_wire_bytes(op: str, payload: int, world: int) -> float:
    """What one rank sends for a collective of ``payload`` bytes in the ring algorithm (the formula):
    all-gather and reduce-scatter ``(n-1)/n`` of it, all-reduce twice that (a reduce-scatter, then an
    all-gather)."""
    share = (world - 1) / world * payload
    return 2 * share if op == "all_reduce" else share
