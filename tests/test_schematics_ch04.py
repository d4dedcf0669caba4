"""Chapter 4's schematic: DDP's bucketed overlap drawn from the α–B model (disttutor.viz.bucket_overlap).

Draws with the Agg backend from the chapter's emulated-link configuration (8 layers 512 wide, one
bucket a layer, 2 ranks, the 1 GbE preset) and checks the schedule against the derivation: each bar's
length is the ring all-reduce time of its bytes, the link carries one bucket at a time, and with a
backward long enough only the last bucket is exposed. Launches nothing.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from disttutor.links.presets import preset  # noqa: E402
from disttutor.viz.bucket_overlap import all_reduce_s, plot_bucket_overlap, schedule  # noqa: E402

LINK = preset("1GbE")
BUCKETS = [(512 * 512 + 512) * 4] * 8       # one Linear(512, 512) a bucket: weight + bias, fp32
A, B = LINK.alpha.value, LINK.beta.value


def test_a_bucket_takes_the_ring_all_reduce_time_of_its_bytes():
    s = schedule(BUCKETS, 2, A, B, forward_s=0.03, backward_s=0.08)
    for b in s["buckets"]:
        assert b["end"] - b["start"] == pytest.approx(2 * A + b["bytes"] / B)   # n = 2: 2(n-1) = 2, 2(n-1)/n = 1
    assert all_reduce_s(1e6, 8, A, B) == pytest.approx(14 * A + 1.75 * 1e6 / B)
    assert s["comm_s"] == pytest.approx(sum(2 * A + b / B for b in BUCKETS))


def test_the_link_carries_one_bucket_at_a_time_and_never_before_it_is_ready():
    s = schedule(BUCKETS, 2, A, B, forward_s=0.01, backward_s=0.02)   # a short backward: the link queues
    rows = s["buckets"]
    assert all(r["start"] >= r["ready"] - 1e-12 for r in rows)
    assert all(b["start"] >= a["end"] - 1e-12 for a, b in zip(rows, rows[1:]))
    assert rows[-1]["ready"] == pytest.approx(s["backward_end"])     # the first layers: ready at the end
    assert s["exposed_s"] > s["last_s"]                               # queued buckets add to the tail


def test_with_a_long_enough_backward_only_the_last_bucket_is_exposed():
    t = all_reduce_s(BUCKETS[0], 2, A, B)
    backward = 1.5 * t * len(BUCKETS)          # each bucket's share of the backward outlasts its all-reduce
    s = schedule(BUCKETS, 2, A, B, forward_s=0.03, backward_s=backward)
    assert s["exposed_s"] == pytest.approx(s["last_s"]) == pytest.approx(t)
    assert s["deferred_exposed_s"] == pytest.approx(len(BUCKETS) * t)
    assert all(r["end"] <= s["backward_end"] + 1e-12 for r in s["buckets"][:-1])


def test_the_figure_draws_every_bucket_on_a_time_axis_in_ms():
    fig = plot_bucket_overlap(BUCKETS, 2, LINK, forward_s=0.03, backward_s=0.08)
    ax = fig.axes[0]
    assert "ms" in ax.get_xlabel()
    labels = [t.get_text() for t in ax.texts]
    assert sum(lbl == "b7" for lbl in labels) == 3          # the last bucket: in the backward and on both link rows
    s = schedule(BUCKETS, 2, A, B, forward_s=0.03, backward_s=0.08)
    assert any(f"exposed {1e3 * s['exposed_s']:.1f} ms" in lbl for lbl in labels)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="positive"):
        schedule([], 2, A, B, 0.0, 0.1)
