"""Chapter 7: the schedule simulator (pure Python, no ranks) and the pipeline figures/widget callbacks."""
from __future__ import annotations

import itertools

import matplotlib
import pytest

matplotlib.use("Agg")

from disttutor.pipeline.schedules import (SCHEDULES, PipeSpec, Slot, bubble_stats, formula, peak_in_flight,  # noqa: E402
                                 rank_orders, simulate, slots_from_events)

# Exact rationals in, float arithmetic out: 1e-12 only absorbs float summation error.
TOL = 1e-12


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_bubble_from_drawing_matches_formula(schedule):
    for p, m, b in itertools.product(range(1, 7), range(1, 17), (1.0, 2.0, 3.0)):
        tl = simulate(PipeSpec(schedule, p, m, 1, b))
        assert abs(tl.bubble_fraction - (p - 1) / (m + p - 1)) < TOL, (schedule, p, m, b)
        # the makespan of the drawing is (m + p - 1) slots of forward+backward
        assert abs(tl.makespan - (m + p - 1) * (1 + b)) < TOL


def test_interleaved_matches_its_formula_and_beats_1f1b():
    for p, k, v, b in itertools.product(range(1, 6), range(1, 4), range(1, 4), (1.0, 2.0)):
        m = k * p
        spec = PipeSpec("interleaved", p, m, v, b)
        drawn = simulate(spec).bubble_fraction
        assert abs(drawn - (p - 1) / (v * m + p - 1)) < TOL, (p, m, v, b)
        assert abs(drawn - formula(spec)) < TOL
        if p > 1 and v > 1:
            assert drawn < simulate(PipeSpec("1f1b", p, m)).bubble_fraction


def test_interleaved_with_one_chunk_times_like_1f1b():
    # torch's interleaved order with v=1 warms up with 2(p-1-r) forwards instead of p-r, so the slots
    # differ -- but the waiting is the same: same makespan, same bubble.
    for p, k in itertools.product(range(1, 5), range(1, 4)):
        a = simulate(PipeSpec("interleaved", p, k * p, 1))
        b = simulate(PipeSpec("1f1b", p, k * p))
        assert abs(a.makespan - b.makespan) < TOL and abs(a.bubble_fraction - b.bubble_fraction) < TOL


def test_peak_in_flight_1f1b_vs_gpipe():
    for p, m in itertools.product(range(1, 7), range(1, 17)):
        assert peak_in_flight(PipeSpec("1f1b", p, m)) == [min(m, p - r) for r in range(p)]
        assert peak_in_flight(PipeSpec("gpipe", p, m)) == [m] * p


def test_orders_run_each_slot_once_in_microbatch_order():
    # The measured timeline relies on this: each stage sees its forwards, and its backwards, in order 0..m-1.
    for spec in [PipeSpec("gpipe", 4, 6), PipeSpec("1f1b", 4, 6), PipeSpec("interleaved", 3, 6, 3)]:
        for r, acts in enumerate(rank_orders(spec)):
            assert {a.stage for a in acts} == set(range(r, spec.n_stages, spec.p))
            for kind, stage in itertools.product("FB", range(r, spec.n_stages, spec.p)):
                assert [a.mb for a in acts if a.kind == kind and a.stage == stage] == list(range(spec.m))


def test_bad_specs_are_clear_errors():
    with pytest.raises(ValueError, match="schedule must be one of"):
        PipeSpec("zero-bubble")
    with pytest.raises(ValueError, match="v must be 1"):
        PipeSpec("gpipe", 4, 8, 2)
    with pytest.raises(ValueError, match="multiple of p"):
        PipeSpec("interleaved", 4, 6, 2)
    with pytest.raises(ValueError, match="m must be a positive integer"):
        PipeSpec("1f1b", 4, 0)


def test_bubble_stats_and_events_by_hand():
    # rank 0 busy 0..1 and 2..3, rank 1 busy 1..2: window 3, busy 3 of 6 -> bubble 1/2
    slots = slots_from_events([[["F", 0, 0, 0.0, 1.0], ["B", 0, 0, 2.0, 3.0]], [["F", 0, 1, 1.0, 2.0]]])
    assert slots[2] == Slot(1, "F", 0, 1, 1.0, 2.0)
    st = bubble_stats(slots, 2)
    assert st["makespan"] == 3.0 and st["busy"] == [2.0, 1.0]
    assert abs(st["bubble"] - 0.5) < TOL and abs(st["per_rank"][1] - 2 / 3) < TOL


def test_figures_and_widget_callbacks():
    import matplotlib.pyplot as plt

    from disttutor.viz.pipeline import bubble_widget, describe, measured_figure, theory_figure

    for s in SCHEDULES:
        spec = PipeSpec(s, 4, 8, 2 if s == "interleaved" else 1)
        info = describe(spec)
        assert abs(info["bubble_drawn"] - info["bubble_formula"]) < TOL
        fig = theory_figure(spec, info)
        assert len(fig.axes) == 2
        plt.close(fig)
    spec = PipeSpec("1f1b", 2, 2)
    measured = slots_from_events([[["F", 0, 0, 0.0, 1e-3], ["F", 1, 0, 1e-3, 2e-3], ["B", 0, 0, 4e-3, 6e-3],
                                   ["B", 1, 0, 8e-3, 1e-2]],
                                  [["F", 0, 1, 1e-3, 2e-3], ["B", 0, 1, 2e-3, 4e-3], ["F", 1, 1, 4e-3, 5e-3],
                                   ["B", 1, 1, 6e-3, 8e-3]]])
    plt.close(measured_figure(spec, measured, note="by hand"))
    ui = bubble_widget(PipeSpec("gpipe", 2, 4))
    sched, v = ui.children[0].children
    p, m = ui.children[1].children
    sched.value, v.value, p.value, m.value = "interleaved", 2, 3, 6  # each change redraws
    m.value = 5  # not a multiple of p: the callback says so instead of raising
    plt.close("all")
