"""Chapter 9's schematic: a hang drawn from the stuck job's parameters, and the claim the run then checks.

The figure: the waiting ranks sit in the collective from 0 to the timeout, the skipping rank is elsewhere,
the dump line falls inside the wait. The claim: a hang is reported no sooner than the timeout. Launches nothing.
"""
from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from disttutor.checks.claims import ch09  # noqa: E402
from disttutor.viz import hang_schematic as hs  # noqa: E402

STUCK = {"world": 2, "skip_rank": 1, "timeout_s": 12, "dump_after_s": 2}  # the chapter's stuck job


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("world,skip", [(2, 1), (4, 2), (3, 0)])
def test_every_other_rank_waits_in_the_skipped_call_until_the_timeout(world, skip):
    spans = hs.hang_spans(world, skip, 12.0, op="all_reduce", seq=3)
    assert [r for r, *_ in spans] == list(range(world))
    for r, kind, label, s, e in spans:
        assert (s, e) == (0.0, 12.0)
        assert kind == ("elsewhere" if r == skip else "wait")
        assert "all_reduce #3" in label and (r == skip or f"rank {skip}" in label)


def test_the_figure_draws_the_stuck_jobs_parameters():
    fig = hs.plot_hang(**STUCK)
    ax, = fig.axes
    bars = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bars) == STUCK["world"]
    for c in bars:  # each rank's bar spans 0 .. the timeout, in seconds
        xs = c.get_paths()[0].vertices[:, 0]
        assert (xs.min(), xs.max()) == pytest.approx((0.0, STUCK["timeout_s"]))
    vlines = sorted(line.get_xdata()[0] for line in ax.lines if len(set(line.get_xdata())) == 1
                    and line.get_linestyle() in ("-", "--") and len(line.get_xdata()) == 2)
    assert vlines == [STUCK["dump_after_s"], STUCK["timeout_s"]]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1"]
    assert "seconds" in ax.get_xlabel() and "rank 1 skips all_reduce #0" in ax.get_title()
    texts = " ".join(t.get_text() for t in ax.texts)
    assert "collective timeout: 12 s" in texts and "stacks dumped: 2 s" in texts
    with pytest.raises(ValueError, match="dump_after_s"):
        hs.plot_hang(2, 1, 12, dump_after_s=13)  # a dump after the timeout finds nothing hung


def _run(wall_s: float, blame: str = "wait", error: str = "Timed out waiting 12000ms for recv operation"):
    rank0 = SimpleNamespace(status="error", blame=blame, raw_error=error, error=error)
    rank1 = SimpleNamespace(status="stopped", blame=None, raw_error=None, error="stopped by torchrun")
    return SimpleNamespace(ranks=[rank0, rank1], wall_s=wall_s)


def test_the_timeout_bound_claim_accepts_a_late_report_and_rejects_an_early_one():
    assert "after 12 s" in ch09.check_timeout_bound(_run(14.6), timeout_s=12, waiting=0)
    with pytest.raises(AssertionError, match="ended before"):
        ch09.check_timeout_bound(_run(9.0), timeout_s=12, waiting=0)
    with pytest.raises(AssertionError, match="name the 12 s timeout"):
        ch09.check_timeout_bound(_run(14.6, error="Timed out waiting 3000ms"), timeout_s=12, waiting=0)
    with pytest.raises(AssertionError, match="time out waiting"):
        ch09.check_timeout_bound(_run(14.6, blame="self"), timeout_s=12, waiting=0)
