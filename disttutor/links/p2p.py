"""Point-to-point messages over an emulated link: chapter 2's from-scratch all-reduces on a slow network.

Introduced in chapter 2 (collectives). :class:`EmulatedP2P` stands in for ``torch.distributed`` in a
function that only calls ``dist.send / recv / isend / irecv / get_rank / get_world_size``, like the
from-scratch all-reduces of :mod:`disttutor.scratch.allreduce`; :func:`over_link` runs such a function
with it, unchanged (its ``dist`` name is re-bound, its code is not copied or edited).

The model of each rank's network card is full duplex, one link per direction:

* a message of ``b`` bytes occupies the sender's **outgoing** link for ``T = alpha + b / beta``,
  starting when the call is made or when the previous outgoing message is done; the sender's
  ``wait()`` returns at the end of it;
* it occupies the receiver's **incoming** link for the same ``T``, starting when the sender started
  it or when the previous incoming message is done; the receiver's ``wait()`` returns at the end.

So rank 0 of the naive all-reduce, receiving ``n-1`` tensors and then sending ``n-1``, pays
``2(n-1) T(N)``; a ring step, every rank sending one chunk right and receiving one from the left at
the same time, pays ``T(N/n)``. To know when the sender started, every message is preceded by a
small header (one float64: the sender's start time on this machine's monotonic clock, which all
local processes share; the emulation is for one machine). The payload still travels for real, so
the sums are exact; the real loopback time is hidden inside ``T`` when shorter.
"""
from __future__ import annotations

import types

import torch
import torch.distributed as dist

from disttutor.links.emulated import EmulatedLink, now

__all__ = ["EmulatedP2P", "over_link"]

HEADER_TAG = 7919  # a tag of its own: headers and payloads are matched in order, each with its kind


class _Pending:
    """The handle ``isend`` / ``irecv`` return: ``wait()`` returns when the emulated message is done."""

    def __init__(self, works, finish, keep=None):
        # keep: the header tensor, alive until its send is done
        self._works, self._finish, self._done, self._keep = works, finish, False, keep

    def wait(self, timeout=None) -> bool:
        if not self._done:
            for w in self._works:
                w.wait()
            self._finish()
            self._done = True
        return True

    def is_completed(self) -> bool:
        return self._done


class EmulatedP2P:
    """``dist``'s point-to-point calls, each message on the emulated link of this rank."""

    def __init__(self, link: EmulatedLink):
        self.link = link            # outgoing direction: its queue is the link's own
        self._in_free = 0.0         # incoming direction: when it has finished what it carries
        self.messages = 0

    get_rank = staticmethod(dist.get_rank)
    get_world_size = staticmethod(dist.get_world_size)

    def __getattr__(self, name):    # anything else (ReduceOp, barrier...) is the real torch.distributed
        return getattr(dist, name)

    def isend(self, tensor: torch.Tensor, dst: int, group=None, tag: int = 0) -> _Pending:
        nbytes = tensor.numel() * tensor.element_size()
        seconds = self.link.link.message_time(nbytes)
        end = self.link.reserve(seconds, nbytes)
        header = torch.tensor([end - seconds], dtype=torch.float64)   # when it started on our side
        works = [dist.isend(header, dst, group=group, tag=HEADER_TAG), dist.isend(tensor, dst, group=group, tag=tag)]
        self.messages += 1
        return _Pending(works, lambda: self.link.wait_until(end), keep=header)

    def irecv(self, tensor: torch.Tensor, src: int, group=None, tag: int = 0) -> _Pending:
        nbytes = tensor.numel() * tensor.element_size()
        seconds = self.link.link.message_time(nbytes)
        header = torch.empty(1, dtype=torch.float64)
        works = [dist.irecv(header, src, group=group, tag=HEADER_TAG), dist.irecv(tensor, src, group=group, tag=tag)]

        def finish() -> None:
            # The message entered our incoming link when the sender started it, or when the
            # previous one had passed: incoming messages queue behind each other too.
            start = max(float(header[0]), self._in_free)
            self._in_free = start + seconds
            self.link.wait_until(self._in_free)

        return _Pending(works, finish)

    def send(self, tensor: torch.Tensor, dst: int, group=None, tag: int = 0) -> None:
        self.isend(tensor, dst, group=group, tag=tag).wait()

    def recv(self, tensor: torch.Tensor, src: int, group=None, tag: int = 0) -> int:
        self.irecv(tensor, src, group=group, tag=tag).wait()
        return src


def over_link(fn: types.FunctionType, p2p: EmulatedP2P) -> types.FunctionType:
    """``fn`` with its global ``dist`` replaced by ``p2p``: the same code, its messages on the link.

    A function that calls itself by name (the naive all-reduce does, for strided tensors) finds the
    re-bound copy too.
    """
    glb = dict(fn.__globals__)
    glb["dist"] = p2p
    new = types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)
    glb[fn.__name__] = new
    return new


