"""Chapter 7's named checks (disttutor/checks/claims/ch07.py) on the chapter's own drawings and on sweeps shaped
like its measured one: each returns its verdict when the claim holds and names the problem when it does not."""
from __future__ import annotations

import pytest

from disttutor.checks.claims.ch07 import check_bubble_model, check_schedule_drawings
from disttutor.pipeline.schedules import PipeSpec
from disttutor.viz.pipeline import describe


def _rows():
    rows = []
    for spec in [PipeSpec("gpipe", 4, 8), PipeSpec("1f1b", 4, 8), PipeSpec("interleaved", 4, 8, 2)]:
        d = describe(spec)
        rows.append({"schedule": spec.schedule, "p": spec.p, "m": spec.m, "v": spec.v,
                     "bubble (drawing)": round(d["bubble_drawn"], 4), "formula": round(d["bubble_formula"], 4),
                     "peak activations per rank": d["peak_in_flight"]})
    return rows


def test_the_drawings_match_their_formulas_and_a_wrong_memory_claim_is_named():
    rows = _rows()
    assert "1F1B holds p - r" in check_schedule_drawings(rows)
    rows[1]["peak activations per rank"] = [8, 8, 8, 8]  # 1F1B drawn as if it kept every micro-batch like GPipe
    with pytest.raises(AssertionError, match="1F1B should keep p - r activations"):
        check_schedule_drawings(rows)


def test_the_bubble_model_is_asserted_only_on_a_quiet_machine():
    good = [{"m": m, "theory": t, "measured": t + 0.04, "model": t + 0.035} for m, t in ((2, 0.33), (4, 0.2), (8, 0.11))]
    assert "asserted" in check_bubble_model(good, 0.03, quiet=True)
    below = [dict(r, measured=r["theory"] - 0.08, model=r["theory"] - 0.08) for r in good]  # a stretched run
    assert "not asserted" in check_bubble_model(below, 0.03, quiet=False)
    with pytest.raises(AssertionError, match="below the formula"):
        check_bubble_model(below, 0.03, quiet=True)
    blind = [dict(r, model=r["theory"]) for r in good]  # a "model" that ignores the measured overhead
    with pytest.raises(AssertionError, match="half the formula's miss"):
        check_bubble_model(blind, 0.03, quiet=True)
