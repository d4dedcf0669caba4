"""Named one-line checks for the claims a chapter makes about its runs (kernel side), one module per chapter.

A chapter cell reads ``check_resumed_bitwise(ref, resumed)`` instead of five ``assert`` lines of plumbing:
each check states one claim, raises an :class:`AssertionError` whose message says what failed and with
which values, and returns a one-line verdict the cell prints. ``claim`` (in ``base``) is the one primitive.
Chapters import from their own module, ``disttutor.checks.claims.chNN``; chapters 3 and 10's checks are
also re-exported here, where they first lived.
"""
from disttutor.checks.claims.base import claim
from disttutor.checks.claims.ch03 import check_dp_traffic, check_dp_training, check_same_training
from disttutor.checks.claims.ch10 import (check_article_ladder, check_resumed_bitwise, check_time_split,
                                          check_training_run)

__all__ = ["claim", "check_dp_traffic", "check_dp_training", "check_same_training", "check_article_ladder",
           "check_resumed_bitwise", "check_time_split", "check_training_run"]
