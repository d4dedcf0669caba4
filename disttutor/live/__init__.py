"""Live ranks: persistent distributed workers a learner drives from notebook cells (chapter 0).

From Python::

    from disttutor.live import Ranks
    with Ranks(4) as ranks:
        print(ranks.run("t = torch.full((2,), float(rank)); dist.all_reduce(t); t"))
        sums = ranks.pull("t")          # [tensor, tensor, tensor, tensor], rank order

From a notebook: ``%load_ext disttutor``, then ``%ranks start -n 4`` and
``%%ranks`` cells (see :mod:`disttutor.live.magics`).
"""
from __future__ import annotations

from disttutor.live.cells import LiveError
from disttutor.live.pool import PoolConfig, Ranks
from disttutor.live.report import CellResult

__all__ = ["Ranks", "PoolConfig", "CellResult", "LiveError", "current", "last_result"]


def current() -> Ranks | None:
    """The pool the ``%ranks`` magics use (None before ``%ranks start``)."""
    from disttutor.live import magics

    return magics.STATE.pool


def last_result() -> CellResult | None:
    """The result of the last ``%%ranks`` cell (so a notebook can assert on it)."""
    from disttutor.live import magics

    return magics.STATE.last
