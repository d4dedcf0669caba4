"""The named checks chapters call (disttutor/checks/claims.py) reject what they claim against, in words."""
from __future__ import annotations

import pytest

from disttutor.checks.claims import check_article_ladder, claim
from disttutor.lm.article_ddp import FIXES


def _ladder(errors_by_attempt):
    return [[{"error": e, "saved_keys": ["module.embedding.weight"]} for _ in range(2)] for e in errors_by_attempt]


def test_claim_raises_its_sentence():
    with pytest.raises(AssertionError, match="^the sentence$"):
        claim(False, "the sentence")
    claim(True, "never raised")


def test_article_ladder_accepts_the_expected_failures_and_rejects_a_skipped_one():
    good = _ladder([f"X: ... {f.expect} ..." for f in FIXES] + [None])
    assert "finished" in check_article_ladder(good, FIXES)
    wrong = _ladder([f"X: ... {f.expect} ..." for f in FIXES] + [None])
    wrong[3] = [{"error": "NameError: something else", "saved_keys": []}] * 2
    with pytest.raises(AssertionError, match="attempt 3, rank 0: expected the failure fix 4 addresses"):
        check_article_ladder(wrong, FIXES)
    unfinished = _ladder([f"X: {f.expect}" for f in FIXES] + ["still failing"])
    with pytest.raises(AssertionError, match="should finish"):
        check_article_ladder(unfinished, FIXES)


def test_time_split_allows_an_edge_per_step_but_not_a_collective_outside_every_region():
    from disttutor.checks.claims import check_time_split

    def split(outside_ms):  # shaped like disttutor.lm.timesplit.summarize's per-rank dict
        s = {"communication_ms": 10.7, "data_ms": 1.7, "compute_ms": 188.3, "other_ms": 1.2, "steps": 3,
             "comm_outside_regions_ms": outside_ms}
        s["window_ms"] = sum(s[p + "_ms"] for p in ("communication", "data", "compute", "other"))
        s.update({f"{p}_share": s[p + "_ms"] / s["window_ms"] for p in ("communication", "data", "compute", "other")})
        return s

    parts = ("communication", "data", "compute", "other")
    assert "every collective ran inside a region" in check_time_split({1: split(1.25)}, parts, on_cpu=True)
    with pytest.raises(AssertionError, match="rank 1: collectives outside any region"):
        check_time_split({1: split(3.0)}, parts, on_cpu=True)  # a whole collective outside: 3 ms > 0.54 + 1.5
