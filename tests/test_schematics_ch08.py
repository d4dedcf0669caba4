"""Chapter 8's schematic: the bucket-size trade-off drawn from the α–B model (disttutor.viz.bucket_size).

Draws with the Agg backend from the chapter's emulated-link overlap configuration (8 MiB of fp32
gradients, 2 ranks, the 1 GbE preset) and checks the curves against the derivation: the latency paid
is k · 2(n-1)α with k = ceil(S / S_b), the bandwidth part does not depend on the bucket size, and the
exposed time is large at both ends and smallest in between. Launches nothing.
"""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from disttutor.links.presets import preset  # noqa: E402
from disttutor.viz.bucket_size import plot_bucket_size, split, tradeoff  # noqa: E402

LINK = preset("1GbE")
TOTAL = (512 * 512 + 512) * 4 * 8           # the overlap model's gradients: 8 x Linear(512, 512), fp32
A, B = LINK.alpha.value, LINK.beta.value


def test_split_keeps_every_byte_and_puts_the_remainder_last():
    parts = split(TOTAL, 1 << 20)
    assert sum(parts) == pytest.approx(TOTAL) and len(parts) == math.ceil(TOTAL / (1 << 20))
    assert all(p == 1 << 20 for p in parts[:-1]) and 0 < parts[-1] <= 1 << 20


def test_latency_is_paid_once_a_bucket_and_bandwidth_once_a_byte():
    rows = tradeoff(TOTAL, 2, LINK, forward_s=0.03, backward_s=0.08, sizes=[4 << 10, 64 << 10, 1 << 20, TOTAL])
    for r in rows:
        k = math.ceil(TOTAL / r["bucket_bytes"])
        assert r["buckets"] == k and r["alpha_s"] == pytest.approx(k * 2 * A)
        assert r["comm_s"] - r["alpha_s"] == pytest.approx(TOTAL / B)     # n = 2: 2(n-1)/n = 1


def test_exposed_time_is_large_at_both_ends_and_least_in_between():
    sizes = [2 ** (12 + i / 4) for i in range(4 * 12)] + [TOTAL]
    rows = tradeoff(TOTAL, 2, LINK, forward_s=0.03, backward_s=0.08, sizes=sizes)
    best = min(rows, key=lambda r: r["exposed_s"])
    assert rows[0]["exposed_s"] > 5 * best["exposed_s"]                 # tiny buckets: latency swamps the link
    assert rows[-1]["exposed_s"] == pytest.approx(rows[-1]["comm_s"])   # one bucket: nothing hides
    assert rows[0]["bucket_bytes"] < best["bucket_bytes"] < TOTAL


def test_the_figure_has_bytes_and_ms_on_its_axes_and_marks_the_run():
    fig = plot_bucket_size(TOTAL, 2, LINK, forward_s=0.03, backward_s=0.08, run_bucket_bytes=TOTAL / 8)
    ax = fig.axes[0]
    assert "bytes" in ax.get_xlabel() and "ms" in ax.get_ylabel()
    assert any("the run's buckets" in t.get_text() for t in ax.texts)
    assert len(ax.get_lines()) >= 4   # three curves, the best point (and the run's line)
