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


# --- The sweep's sizing (disttutor.pipeline.slot_size) ------------------------------------------

@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_mean_gap_is_measured_back_from_a_known_timeline(schedule):
    from disttutor.pipeline.slot_size import mean_gap_ms

    spec = PipeSpec(schedule, 2, 4)
    slots = replay(spec, [RankCosts(1.0, 2.0, 0.25, 0.75)] * 2)  # seconds: local 0.25, hand-off 0.75
    assert abs(mean_gap_ms(spec, slots) - 500.0) < 1e-6  # the mean of the two, in ms (rounding only)


def test_micro_batch_is_sized_from_the_gap_and_the_budget():
    from disttutor.pipeline.slot_size import choose_mb_size

    rows = choose_mb_size(2.2, 0.1, ratio=10, budget_ms=1000)  # 22 ms of forward needed at 0.1 ms a row
    assert rows == 256 and rows * 0.1 >= 22 > (rows // 2) * 0.1
    assert choose_mb_size(2.2, 0.1, ratio=10, budget_ms=10) * 0.1 <= 10  # the budget caps the slot
    with pytest.raises(ValueError, match="per_row_ms"):
        choose_mb_size(1.0, 0.0)


def test_fall_ratio_is_one_on_the_formula_and_zero_on_a_flat_bubble():
    from disttutor.pipeline.slot_size import fall_ratio

    theory = {m: formula(PipeSpec("gpipe", 2, m)) for m in (2, 4, 8)}
    assert abs(fall_ratio(theory, theory, 2, 8) - 1.0) < TOL
    # chapter 7's old sweep: a bubble stuck near 0.7 whatever m shows none of the formula's fall
    assert abs(fall_ratio({2: 0.7, 8: 0.7}, theory, 2, 8)) < TOL
    # a drawn run with gaps: slots 10x the gap keep most of the fall
    drawn = {m: bubble_stats(replay(PipeSpec("gpipe", 2, m), [RankCosts(1.0, 2.0, 0.1, 0.1)] * 2), 2)["bubble"]
             for m in (2, 8)}
    assert fall_ratio(drawn, theory, 2, 8) > 0.5


@pytest.mark.parametrize("cores", [1, 2, 3, 4, 8, 16])
def test_the_bubble_sweep_fits_any_core_count(cores):
    """A rank per core, and m >= p at every m: with DISTTUTOR_CORES=8 the old fixed m = 2, 4, 8 on 4 stages made
    torch's Schedule1F1B refuse the sweep ("Number of microbatches (2) must be greater than or equal to ...")."""
    from disttutor.pipeline.slot_size import sweep_plan

    p, ms = sweep_plan(cores)
    assert p == (4 if cores >= 4 else 2) and min(ms) >= p and list(ms) == sorted(set(ms))
    assert formula(PipeSpec("gpipe", p, ms[0])) - formula(PipeSpec("gpipe", p, ms[-1])) > 0.2  # a visible fall
