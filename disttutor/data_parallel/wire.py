"""Communication that counts its bytes: the patterns of ``nn.DataParallel`` and DDP on real ranks.

Introduced in chapter 3 (data parallelism). :class:`Wire` wraps real gloo
point-to-point and scatter/gather calls and adds up the bytes of every tensor
it hands over, per phase; the functions below are the patterns chapter 3
compares, written on top of it: a star (rank 0 talks to everyone, as
DataParallel's device 0 does), a chain (piece by piece down a line) and a ring
all-reduce (DDP). This module is only the communication; the training step that
uses it is :mod:`disttutor.programs.dp_traffic` -- the same split as
:mod:`disttutor.pipeline.p2p` (chapter 6's sends) and :mod:`disttutor.programs.model_parallel`.

The ring here is :func:`counted_ring_all_reduce`, not ``ring_all_reduce``: that
name belongs to the from-scratch algorithm learners write in chapter 2
(:mod:`disttutor.scratch.allreduce`), which takes only a tensor.
"""
from __future__ import annotations

from collections import defaultdict

import torch
import torch.distributed as dist

__all__ = ["Wire", "star_broadcast", "star_reduce", "chain_broadcast", "chain_reduce", "counted_ring_all_reduce"]


class Wire:
    """Real gloo point-to-point and scatter/gather calls that count the bytes they move, per phase."""

    def __init__(self, rank: int, world: int, group=None):
        # The groups used here are ranks 0..world-1, so a rank's global number is also its number in
        # the group: dst/src below can be passed as they are.
        self.rank, self.world, self.group = rank, world, group
        self.out: dict[str, int] = defaultdict(int)  # bytes sent, per phase
        self.inn: dict[str, int] = defaultdict(int)  # bytes received, per phase
        self._sends: list = []

    def send(self, t: torch.Tensor, dst: int, phase: str) -> None:
        self.out[phase] += t.numel() * t.element_size()
        self._sends.append((dist.isend(t, dst, group=self.group), t))  # keep t alive until the send completes

    def recv(self, t: torch.Tensor, src: int, phase: str) -> None:
        self.inn[phase] += t.numel() * t.element_size()
        dist.irecv(t, src, group=self.group).wait()

    def flush(self) -> None:
        for work, _ in self._sends:
            work.wait()
        self._sends.clear()

    def scatter(self, out: torch.Tensor, full: torch.Tensor | None, phase: str) -> None:
        """Rank 0 sends shard r of ``full`` to rank r (its own shard stays local: no bytes)."""
        chunks = list(full.chunk(self.world)) if self.rank == 0 else None
        dist.scatter(out, chunks, src=0, group=self.group)
        n = out.numel() * out.element_size()
        if self.rank == 0:
            self.out[phase] += n * (self.world - 1)
        else:
            self.inn[phase] += n

    def gather(self, t: torch.Tensor, phase: str) -> torch.Tensor | None:
        """Every rank's ``t`` lands on rank 0, concatenated along dim 0 (None elsewhere)."""
        bufs = [torch.empty_like(t) for _ in range(self.world)] if self.rank == 0 else None
        dist.gather(t, bufs, dst=0, group=self.group)
        n = t.numel() * t.element_size()
        if self.rank == 0:
            self.inn[phase] += n * (self.world - 1)
            return torch.cat(bufs)
        self.out[phase] += n
        return None


def star_broadcast(w: Wire, flat: torch.Tensor, phase: str) -> None:
    """Rank 0 copies ``flat`` to every other rank in turn: (N-1)*S leave rank 0."""
    if w.rank == 0:
        for r in range(1, w.world):
            w.send(flat, r, phase)
    else:
        w.recv(flat, 0, phase)
    w.flush()


def star_reduce(w: Wire, flat: torch.Tensor, phase: str) -> None:
    """Every rank copies ``flat`` to rank 0, which sums them in place: (N-1)*S arrive at rank 0."""
    if w.rank == 0:
        buf = torch.empty_like(flat)
        for r in range(1, w.world):
            w.recv(buf, r, phase)
            flat.add_(buf)
    else:
        w.send(flat, 0, phase)
    w.flush()


def chain_broadcast(w: Wire, flat: torch.Tensor, phase: str, pieces: int) -> None:
    """0 -> 1 -> ... -> N-1, piece by piece: each rank forwards piece i while receiving piece i+1."""
    for part in flat.tensor_split(pieces):
        if w.rank > 0:
            w.recv(part, w.rank - 1, phase)
        if w.rank < w.world - 1:
            w.send(part, w.rank + 1, phase)
    w.flush()


def chain_reduce(w: Wire, flat: torch.Tensor, phase: str, pieces: int) -> None:
    """N-1 -> ... -> 0, piece by piece, each rank adding its own part: the sum arrives at rank 0."""
    buf = torch.empty_like(flat)
    for part, b in zip(flat.tensor_split(pieces), buf.tensor_split(pieces)):
        if w.rank < w.world - 1:
            w.recv(b, w.rank + 1, phase)
            part.add_(b)
        if w.rank > 0:
            w.send(part, w.rank - 1, phase)  # part is never written again: safe to send async
    w.flush()


def counted_ring_all_reduce(w: Wire, flat: torch.Tensor) -> None:
    """Sum ``flat`` over all ranks in place: reduce-scatter then all-gather around a ring."""
    n, r = w.world, w.rank
    chunks = list(flat.tensor_split(n))
    right, left = (r + 1) % n, (r - 1) % n
    for k in range(n - 1):  # after this, rank r holds the full sum of chunk r+1
        into = chunks[(r - k - 1) % n]
        buf = torch.empty_like(into)
        w.send(chunks[(r - k) % n], right, "reduce-scatter")
        w.recv(buf, left, "reduce-scatter")
        into.add_(buf)
        w.flush()
    for k in range(n - 1):  # pass the finished chunks around
        w.send(chunks[(r + 1 - k) % n], right, "all-gather")
        w.recv(chunks[(r - k) % n], left, "all-gather")
        w.flush()
