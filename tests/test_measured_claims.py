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
