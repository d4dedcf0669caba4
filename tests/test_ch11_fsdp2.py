"""Chapter 11, FSDP in full: the trace reader on a hand-made trace, FSDP2's bytes on 4 ranks against the
formula, and (optional) Stanford CS336's tests through the adapter.

The notebook already runs ``fsdp2`` on 2 ranks under nbval (every claim asserted there); the launch here
is the other world size, 4, where (n-1)/n is not 1/2. Timeouts are generous: a 4-rank launch of this
program takes ~40 s idle on 2 cores, minutes at load average 10.
"""
from __future__ import annotations

import os
import sys

import pytest

import disttutor
from disttutor.programs.fsdp2 import FSDP2Config
from disttutor.sharding import comm_trace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 600


def test_config_rejects_bad_values():
    for kw, match in (({"blocks": 0}, "blocks"), ({"lr": 0.0}, "lr"), ({"batch": 0}, "batch")):
        with pytest.raises(ValueError, match=match):
            FSDP2Config(**kw)


def _ev(name, ts, dur, tid=1, cat="user_annotation", **args):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "tid": tid, "cat": cat, "args": args}


def test_trace_reader_pairs_issue_and_backend_events_by_order():
    events = [
        _ev("forward", 1000, 100), _ev("backward", 1100, 200),
        _ev("FSDP::pre_forward (blocks.0)", 1000, 10), _ev("FSDP::all_gather (blocks.0)", 1001, 8),
        _ev("c10d::_allgather_base_", 1002, 1, cat="cpu_op", **{"Input Dims": [[8, 4], [16]], "Input type": ["float", "float"]}),
        _ev("FSDP::post_forward (blocks.0)", 1050, 5),
        _ev("FSDP::post_backward_reduce (blocks.0)", 1200, 20),
        _ev("c10d::_reduce_scatter_base_", 1201, 1, cat="cpu_op",
            **{"Input Dims": [[16], [32]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}),
        _ev("gloo:all_gather", 1003, 4, tid=2, **{"Input Dims": [[16]], "Input type": ["float"]}),
        _ev("gloo:all_reduce", 1202, 6, tid=2, **{"Input Dims": [[32]], "Input type": ["c10::BFloat16"]}),
    ]
    got = comm_trace.collectives(events)
    ag, rs = got["calls"]
    assert (ag["op"], ag["unit"], ag["phase"], ag["bytes"], ag["backend_op"]) == ("all_gather", "blocks.0", "forward", 128, "all_gather")
    assert (rs["op"], rs["phase"], rs["bytes"], rs["dtype"], rs["backend_op"]) == ("reduce_scatter", "backward", 64, "BFloat16", "all_reduce")
    assert ag["moved"] == 0.003 and ag["ms"] == 0.004  # microseconds -> ms from the first region's start
    assert got["compute"] == [{"unit": "blocks.0", "phase": "forward", "start": 0.01, "ms": 0.04}]
    assert comm_trace.backend_bytes(events, "all_reduce") == 64
    assert comm_trace.ring_wire_bytes("all_reduce", 400, 4) == 600 and comm_trace.ring_wire_bytes("all_gather", 400, 4) == 300
    with pytest.raises(ValueError, match="record_function"):
        comm_trace.collectives(events[2:])


@pytest.mark.timeout(TIMEOUT)
def test_fsdp2_on_four_ranks_bytes_match_the_formula(no_leftovers):
    run = disttutor.launch("fsdp2", nproc=4, stream=False, timeout=TIMEOUT - 60)
    assert run.ok, run.summary()
    n, P = 4, run.results[0]["n_params"] * 4
    for r in run.results:
        assert max(r["vs_one_process"].values()) < 1e-5  # fp32: the same sums in another order
        calls = r["comm"]["prefetch off"]["calls"]
        assert sum(c["bytes"] for c in calls) == 3 * P and r["ddp_allreduce_bytes"] == P  # exact: counted
        formula = sum(comm_trace.ring_wire_bytes(c["op"], c["bytes"], n) for c in calls)
        assert formula == 1.5 * comm_trace.ring_wire_bytes("all_reduce", P, n)
        if r["ddp_sent_bytes"] is not None:  # Linux: the bytes really sent, gloo's headers on top (< 2%)
            gloo = sum(comm_trace.ring_wire_bytes("all_reduce" if c["op"] == "reduce_scatter" else c["op"],
                                                  c["bytes"], n) for c in calls)
            assert 1.0 <= r["ddp_sent_bytes"] / comm_trace.ring_wire_bytes("all_reduce", P, n) < 1.02, r["ddp_sent_bytes"]
            assert 1.0 <= r["comm"]["prefetch off"]["sent_bytes"] / gloo < 1.02, r["comm"]["prefetch off"]["sent_bytes"]
        t = r["memory"]["reshard_after_forward=True"]
        assert t["Total"] < r["memory"]["reshard_after_forward=False"]["Total"]
        assert r["checkpoint"]["params_equal"] and r["checkpoint"]["optimizer_equal"]
        assert len([f for f in r["checkpoint"]["files"] if f.endswith(".distcp")]) == n


CS336 = os.environ.get("CS336_REPO")  # a checkout (or bare git directory) of stanford-cs336/assignment2-systems


@pytest.mark.timeout(1200)
def test_cs336_sharded_optimizer_and_fsdp_tests_through_the_adapter():
    """Optional (6 spawned 2-rank tests, ~6 min on 2 busy cores): runs only where CS336_REPO names a copy
    of the assignment; skipped otherwise, so CI never needs it. Reproduce:
    CS336_REPO=/path/to/assignment2-systems pytest tests/test_ch11_fsdp2.py -k cs336"""
    if not CS336:
        pytest.skip("set CS336_REPO to a copy of stanford-cs336/assignment2-systems to run its tests here")
    sys.path.insert(0, os.path.join(ROOT, "benchmarks", "cs336"))
    import run as cs336

    if not cs336.available(CS336):
        pytest.skip(f"no copy of stanford-cs336/assignment2-systems at {CS336}")
    pytest.importorskip("einops")  # what cs336_basics.model imports
    pytest.importorskip("einx")
    pytest.importorskip("jaxtyping")
    res = cs336.run(CS336, "solutions")
    outcome = {name.split("::")[-1]: r for name, r in res["results"].items()}
    assert len(outcome) == 6, res["tail"]
    for name, r in outcome.items():
        if name == "test_fsdp_correctness[fp32]":
            # Their demand is bitwise equality with full-batch training; the mean of two half-batch gradients
            # is not bitwise the full-batch one (other summation order): a difference of float32 rounding only.
            assert r["outcome"] == "failed" and "Max diff" in r["why"], r
            assert float(r["why"].rsplit("Max diff:", 1)[1]) < 1e-6, r
        else:
            assert r["outcome"] == "passed", (name, r, res["tail"])
