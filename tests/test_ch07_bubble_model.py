"""Chapter 7's "theory + measured overhead" model (disttutor.pipeline.bubble_model): exact on synthetic
timelines whose costs are known, and on a real run closer to the measured bubble than the formula."""
from __future__ import annotations

import pytest

from disttutor import launch
from disttutor.pipeline.bubble_model import RankCosts, explain, explain_run, rank_costs, replay
from disttutor.pipeline.schedules import PipeSpec, bubble_stats, formula, simulate

TOL = 1e-9  # sums of a few dozen floats of size ~1: only rounding


@pytest.mark.parametrize("schedule,p,m", [("gpipe", 4, 4), ("1f1b", 4, 8), ("gpipe", 2, 1), ("1f1b", 3, 16)])
def test_replay_without_overhead_is_the_simulator(schedule, p, m):
    spec = PipeSpec(schedule, p, m)
    costs = [RankCosts(1.0, 2.0, 0.0, 0.0)] * p
    slots = replay(spec, costs)
    assert abs(bubble_stats(slots, p)["bubble"] - formula(spec)) < TOL
    assert sorted((s.rank, s.kind, s.mb, s.start, s.end) for s in slots) == \
        sorted((s.rank, s.kind, s.mb, s.start, s.end) for s in simulate(spec).slots)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_costs_measured_back_from_a_known_timeline(schedule):
    # Draw a timeline with known per-rank slot times and gaps, then measure them back from it:
    # the model must recover them, and so predict the drawn bubble exactly.
    spec = PipeSpec(schedule, 4, 8)
    truth = [RankCosts(1.0 + 0.1 * r, 2.0 + 0.2 * r, 0.3, 0.5 + 0.1 * r) for r in range(4)]
    slots = replay(spec, truth)
    got = rank_costs(spec, slots)
    for a, b in zip(got, truth):
        assert abs(a.forward - b.forward) < TOL and abs(a.backward - b.backward) < TOL
        assert abs(a.gap_local - b.gap_local) < TOL and abs(a.gap_handoff - b.gap_handoff) < TOL
    e = explain(spec, slots)
    assert abs(e["rel_error"]) < TOL
    assert e["measured"] > e["slot_times_only"] > 0  # the gaps add bubble on top of the slot times
    assert 0 < e["compute_fraction"] < 1


def test_model_input_errors_are_clear():
    spec = PipeSpec("gpipe", 2, 2)
    with pytest.raises(ValueError, match="one RankCosts per rank"):
        replay(spec, [RankCosts(1, 2, 0, 0)])
    only_forwards = [s for s in simulate(spec).slots if s.kind == "F"]
    with pytest.raises(ValueError, match="no measured forward or backward"):
        rank_costs(spec, only_forwards)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_model_explains_a_real_run(no_leftovers):
    res = launch("pipeline", nproc=4, args={"schedule": "1f1b", "microbatches": 8, "batch": 256, "width": 384,
                                            "layers_per_stage": 4, "steps": 2, "no_reference": True},
                 timeout=150, collective_timeout=60, stream=False)
    e = explain_run(res.results, PipeSpec("1f1b", 4, 8))
    assert e["measured"] > e["theory"]  # real overhead only ever adds idle time
    # The model is far closer than the formula (seen: error 2-5 % vs the formula's 60-190 %). 25 %:
    # a shared, loaded 2-core machine moves single runs a lot; chapter 7 reports the 10 % check.
    assert abs(e["rel_error"]) < 0.25, e
    assert abs(e["model"] - e["measured"]) < abs(e["theory"] - e["measured"])
    assert e["stretch"] > 0.5 and e["cpu_overhead_ms"] > 0


def test_sweep_config_is_validated():
    from disttutor.programs.pipeline_sweep import SweepConfig

    with pytest.raises(ValueError, match="gpipe and/or 1f1b"):
        SweepConfig(schedules=("interleaved",))
    with pytest.raises(ValueError, match="microbatches"):
        SweepConfig(microbatches=(4, 0))
