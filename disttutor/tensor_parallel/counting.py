"""Introduced in chapter 12: count the collectives a piece of code really calls, by recording them.

:class:`Recorder` replaces the ``torch.distributed`` functions named in :data:`RECORDED` with
wrappers for the duration of a ``with`` block; each call is appended (its name and the bytes of
the tensor it sends) before the real function runs. The course's own code calls
``dist.all_reduce(...)`` through the module attribute, so it goes through the wrapper; torch's
DTensor does not (it uses functional collectives): for it the chapter uses torch's own
``CommDebugMode``, which records those.
"""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import torch
import torch.distributed as dist

__all__ = ["RECORDED", "Recorder", "recording"]

#: The calls recorded, with which positional argument is the tensor whose bytes are recorded: the
#: WHOLE tensor of a collective (an all-gather's output, a reduce-scatter's input), so an all-reduce
#: of N bytes and a reduce-scatter + all-gather of the same N bytes record N each (and, on a ring,
#: move the same bytes: an all-reduce is a reduce-scatter followed by an all-gather).
RECORDED = {"all_reduce": 0, "all_gather_single": 0, "reduce_scatter_single": 1, "all_to_all_single": 1,
            "send": 0, "recv": 0, "isend": 0, "irecv": 0, "broadcast": 0}


class Recorder:
    """The calls made inside ``with recording() as rec:``: ``rec.calls`` is ``[(name, bytes), ...]``."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []

    def counts(self) -> dict[str, int]:
        return dict(Counter(name for name, _ in self.calls))

    def bytes(self) -> int:
        return sum(b for _, b in self.calls)

    def ring_bytes(self, world: int) -> float:
        """*Derived*: the bytes each rank sends if every collective runs as a ring (gloo's and NCCL's
        large-message algorithm): an all-reduce of N bytes sends 2(n-1)/n N, a reduce-scatter or an
        all-gather (n-1)/n N, a point-to-point send N."""
        share = (world - 1) / world
        factor = {"all_reduce": 2 * share, "all_gather_single": share, "reduce_scatter_single": share,
                  "all_to_all_single": share, "send": 1, "isend": 1, "broadcast": 1}
        return sum(b * factor.get(name, 0) for name, b in self.calls)

    def mark(self) -> int:
        """An index to pass to :meth:`since` (e.g. to split forward from backward)."""
        return len(self.calls)

    def since(self, mark: int) -> dict[str, int]:
        return dict(Counter(name for name, _ in self.calls[mark:]))


@contextmanager
def recording():
    rec = Recorder()
    real = {name: getattr(dist, name) for name in RECORDED}

    def wrap(name, fn, arg):
        def recorded(*args, **kwargs):
            t = args[arg] if len(args) > arg else next(v for v in kwargs.values() if isinstance(v, torch.Tensor))
            rec.calls.append((name, t.numel() * t.element_size()))
            return fn(*args, **kwargs)
        return recorded

    for name, fn in real.items():
        setattr(dist, name, wrap(name, fn, RECORDED[name]))
    try:
        yield rec
    finally:
        for name, fn in real.items():  # always restore, also when the block raised
            setattr(dist, name, fn)
