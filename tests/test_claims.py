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
