"""Programs that back a chapter's sentence with a run: skipping new_group (chapter 2) and the cost of
find_unused_parameters (chapter 4)."""
from __future__ import annotations

import pytest

from disttutor import launch

pytestmark = pytest.mark.slow


@pytest.mark.timeout(200)
def test_skip_new_group_deadlocks_across_two_calls_and_ends(no_leftovers):
    res = launch("skip_new_group", nproc=2, args={"skip_rank": 1}, stream=False, check=False, timeout=150,
                 collective_timeout=10)
    assert res.outcome == "finished" and not res.ok  # bounded: the collective timeout ended it
    logs = {r.rank: [ln for ln in r.log if ln.startswith(("entering", "left", "skipping"))] for r in res.ranks}
    assert logs[0] == ["entering new_group([0, 1])"]  # waits inside new_group for the rank that skipped it
    assert logs[1] == ["skipping new_group on purpose", "entering all_reduce over the world"]
    assert res.ranks[1].status == "error" and "waited more than 10s" in res.ranks[1].error


@pytest.mark.timeout(200)
def test_skip_new_group_nobody_skips_works(no_leftovers):
    res = launch("skip_new_group", nproc=2, stream=False, timeout=150, collective_timeout=30)
    assert [r["world_sum"] for r in res.results] == [2.0, 2.0]


@pytest.mark.timeout(200)
def test_unused_cost_reports_paired_times(no_leftovers):
    res = launch("ddp_unused_cost", nproc=2, args={"repeats": 2, "steps": 2, "layers": 4}, stream=False,
                 timeout=150, collective_timeout=60)
    for key in ("pairs_s", "forward_pairs_s"):
        pairs = res.results[0][key]
        assert len(pairs) == 2 and all(len(p) == 2 and min(p) > 0 for p in pairs)
    # every rank reports the same (all-reduced MAX) block times
    assert res.results[0]["pairs_s"] == res.results[1]["pairs_s"]


def test_unused_cost_config_is_validated():
    from disttutor.programs.ddp_unused_cost import UnusedCostConfig

    with pytest.raises(ValueError, match="repeats"):
        UnusedCostConfig(repeats=0)


def test_bench_effects_ends_with_one_json_object(capsys, monkeypatch, tmp_path):
    # The parts that launch ranks are replaced here (the chapters prove them under nbval); what is
    # checked is the contract of issue 23: one JSON object on the last line, with cores and load, and
    # the emulated link's keys merged in without overwriting ours (its cores/load become link_*).
    import json
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    import bench_effects

    monkeypatch.setattr(bench_effects, "ddp", lambda cores, rounds: {
        "ddp_speedup": 1.8, "ranks": 2, "ddp_per_rank_batch": 512, "ddp_overhead_ms": 10.0, "ddp_compute_ms": 90.0})
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "effects_link.py").write_text(
        "def measure_link():\n    return {'emulated_alpha_err': 0.01, 'emulated_beta_err': 0.02, "
        "'overlap_hidden': 0.7, 'compression_speedup': 1.5, 'cores': -1, 'load_before': 9.0}\n")
    monkeypatch.setattr(bench_effects, "ROOT", str(tmp_path))
    assert bench_effects.main(["--json", "--skip", "bubble"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["ddp_speedup"] == 1.8 and out["ranks"] == 2 and out["cores"] >= 1
    assert out["overlap_hidden"] == 0.7 and out["compression_speedup"] == 1.5 and out["link_cores"] == -1
    assert out["link_load_before"] == 9.0 and set(out["load"]) == {"start", "after_ddp", "after_link", "end"}
