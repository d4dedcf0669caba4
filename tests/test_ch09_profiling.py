"""Chapter 9, §9.1: one trace per rank, the straggler visible in them, and Exercise 9.1's checker
(it passes the solution and rejects the tempting wrong answer and a constant guess)."""
from __future__ import annotations

import os
import tempfile

import pytest

from disttutor import launch
from disttutor.troubleshoot import traces
from disttutor.checks import check
from disttutor.programs.profile_ddp import ProfileConfig

WRONG_BACKWARD = '''def find_straggler(traces):
    # tempting but wrong: the longest backward belongs to a rank that WAITED in the all-reduce
    return max(traces, key=lambda r: sum(e["dur"] for e in traces[r] if e.get("name") == "backward"))
'''
CONSTANT = "def find_straggler(traces):\n    return 0\n"


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="slow_rank must be"):
        ProfileConfig(slow_rank=-3)
    with pytest.raises(ValueError, match="active must be >= 1"):
        ProfileConfig(active=0)


@pytest.mark.timeout(300)
def test_one_trace_per_rank_and_the_straggler_shows(no_leftovers):
    run_dir = tempfile.mkdtemp(prefix="disttutor-run-")
    res = launch("profile_ddp", 2, ProfileConfig(slow_rank=1, slow_ms=40), run_dir=run_dir, stream=False,
                 timeout=240)
    assert sorted(f for f in os.listdir(run_dir) if f.startswith("trace_")) == ["trace_rank0.json",
                                                                                 "trace_rank1.json"]
    tot = {r: traces.totals(ev) for r, ev in traces.load(run_dir).items()}
    # 3 profiled steps x 40 ms of sleep on rank 1; sleep never returns early, so 0.9x is safe
    assert tot[1]["forward"] > tot[0]["forward"] + 3 * 40 * 0.9
    assert tot[0]["backward"] > tot[1]["backward"]  # rank 0 waits for rank 1 inside backward
    assert tot[0]["comm"] > 0 and all(r["peak_bytes"] > 0 and r["top_ops"] for r in res.results)
    # Holistic Trace Analysis (optional, not a dependency): what the chapter says it does on CPU traces
    probe = traces.hta_probe(run_dir)
    try:
        import hta  # noqa: F401
    except ImportError:
        assert probe is None
    else:
        assert probe[0].startswith("parsed ranks [0, 1]:"), probe
        assert "get_gpu_kernel_breakdown: (an empty DataFrame, an empty DataFrame)" in probe, probe
        assert any(ln.startswith("get_idle_time_breakdown: raised ValueError") for ln in probe), probe


@pytest.mark.timeout(600)
def test_9_1_checker_rejects_wrong_answers(no_leftovers):  # the solution passes: tests/test_exercises.py
    r = check("9.1", WRONG_BACKWARD)
    assert not r.passed and "you answered" in r.problems[0] and "wait for it" in r.problems[0]
    r = check("9.1", CONSTANT)
    assert not r.passed and "you answered 0" in r.problems[0]
