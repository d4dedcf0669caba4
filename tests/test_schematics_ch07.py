"""Chapter 7's activation-memory schematic: the drawn curves reach the derived bytes, and free them all.

Draws with the Agg backend from the chapter's own sizes (4 ranks, 8 micro-batches, 2 blocks of
Linear(256, 256) + ReLU, 16 rows a micro-batch in fp32); launches nothing.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from disttutor.pipeline.schedules import PipeSpec, peak_in_flight  # noqa: E402
from disttutor.viz.activation_memory import (KIB, derived_peaks, held_over_time, peaks_figure,  # noqa: E402
                                             schematic, stage_activation_bytes)

P, M, ROWS, WIDTH, LAYERS = 4, 8, 16, 256, 2
A = stage_activation_bytes(ROWS, WIDTH, LAYERS)
TARGET = ROWS * WIDTH * 4


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_a_micro_batch_leaves_each_linears_input_and_the_stage_output():
    assert A == (LAYERS + 1) * ROWS * WIDTH * 4 == 49152


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_the_drawn_curves_peak_at_the_derived_bytes_and_end_empty(schedule):
    curves = held_over_time(PipeSpec(schedule, P, M), A, TARGET)
    peaks = [max(bs) for _, bs in curves]
    assert peaks == derived_peaks(schedule, P, M, A, TARGET)
    assert all(bs[-1] == 0 for _, bs in curves)  # every backward freed its micro-batch
    # the same peaks as the simulator's count of micro-batches in flight, times the bytes of one
    per_mb = [A] * (P - 1) + [A + TARGET]
    assert peaks == [k * b for k, b in zip(peak_in_flight(PipeSpec(schedule, P, M)), per_mb)]


def test_gpipe_holds_m_and_1f1b_p_minus_r_micro_batches():
    assert derived_peaks("gpipe", P, M, A) == [M * A] * P
    assert derived_peaks("1f1b", P, M, A) == [(P - r) * A for r in range(P)]
    assert derived_peaks("1f1b", P, 2, A) == [2 * A, 2 * A, 2 * A, A]  # m < p - r: only m exist
    with pytest.raises(ValueError, match="schedule"):
        derived_peaks("interleaved", P, M, A)


def test_the_schematic_draws_one_line_per_rank_in_kib():
    fig = schematic(P, M, A, TARGET)
    gpipe, one = fig.axes
    for ax, schedule in ((gpipe, "gpipe"), (one, "1f1b")):
        lines = ax.get_lines()
        assert len(lines) == P
        assert [max(ln.get_ydata()) for ln in lines] == [b / KIB for b in derived_peaks(schedule, P, M, A, TARGET)]
        assert "forward slots" in ax.get_xlabel()
    assert "KiB" in gpipe.get_ylabel() and "GPipe" in gpipe.get_title() and "1F1B" in one.get_title()


def test_the_peaks_figure_puts_measured_bars_beside_derived_ticks():
    derived = {s: derived_peaks(s, P, M, A, TARGET) for s in ("gpipe", "1f1b")}
    fig = peaks_figure(derived, derived)
    ax, = fig.axes
    heights = [round(b.get_height() * KIB) for b in ax.patches]
    assert heights == derived["gpipe"] + derived["1f1b"]
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"rank {r}" for r in range(P)]
