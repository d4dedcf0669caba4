"""An emulated link: each transfer completes ``alpha + bytes / beta`` after it starts, without using the CPU.

Introduced in chapter 8 (performance). A laptop's ranks talk over loopback, which is neither a
10 GbE office network nor a 100 Gb/s InfiniBand fabric. :class:`EmulatedLink` is one rank's network
card of a chosen :class:`~disttutor.links.presets.Link`:

* **The data is real.** Every collective still runs on the real process group (gloo on loopback),
  so results are exactly what they would be; the emulation only decides *when* a result is handed
  back.
* **When.** A transfer launched at ``t0`` starts on the link at ``start = max(t0, link free)`` (one
  link: transfers queue behind each other, as on a NIC) and its future completes at
  ``max(start + T, real completion)``, ``T`` from the link's figures. So the emulated time is a
  **lower bound** and the real loopback time is **hidden** inside it whenever it is shorter (the
  chapters pick links slow enough that it is; if it is not, the real time shows, and
  :attr:`EmulatedLink.late` counts how often).
* **Without the CPU.** Waiting is a ``threading.Timer`` that completes a ``torch.futures.Future``:
  no thread spins, so the rank's compute (a backward pass) really runs while the link "transfers".
  A timer fires up to a fraction of a millisecond late (the OS's scheduling): sub-millisecond
  figures such as NVLink's are not resolved, which is why the chapters time bandwidth-bound
  transfers of megabytes.

:func:`emulated_all_reduce` puts *every* Python-level ``dist.all_reduce`` on the link for the
duration of a ``with`` block, so any DDP communication hook (fp16 compression, PowerSGD) crosses it
with the bytes it really hands to the all-reduce -- its compressed bytes. The hooks that use this
are :mod:`disttutor.links.ddp_hooks`; the point-to-point version is :mod:`disttutor.links.p2p`.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

import torch
import torch.distributed as dist

from disttutor.links.presets import Link

__all__ = ["EmulatedLink", "emulated_all_reduce", "now"]

now = time.monotonic  # CLOCK_MONOTONIC: one clock for every process on this machine (p2p headers compare them)


class EmulatedLink:
    """One rank's emulated network card: a queue in time, and futures completed on schedule."""

    def __init__(self, link: Link):
        self.link = link
        self._free_at = 0.0            # when the link has finished what it already carries
        self._lock = threading.Lock()  # hooks may launch from the autograd thread, callbacks from gloo's
        self.transfers = 0
        self.bytes = 0                 # bytes handed to the link (payload per rank)
        self.busy_s = 0.0              # emulated seconds the link was occupied
        self.late = 0                  # transfers whose real loopback time outlasted the emulated one
        self.log: list | None = None   # set to a list to record each all-reduce's times (a timeline)

    def reserve(self, seconds: float, nbytes: int, at: float | None = None) -> float:
        """Book ``seconds`` on the link from ``at`` (default: now) or when it frees up; return when it ends."""
        with self._lock:
            start = max(now() if at is None else at, self._free_at)
            self._free_at = start + seconds
            self.transfers += 1
            self.bytes += nbytes
            self.busy_s += seconds
            return self._free_at

    def complete_at(self, real: torch.futures.Future, due: float) -> torch.futures.Future:
        """A future with ``real``'s value that completes at ``max(due, real's completion)``.

        The result is always set from a timer thread, never inline in gloo's thread or ours: a hook's
        callback (PowerSGD's) may itself wait for the next transfer, which needs a free thread.
        """
        # [teach timer]
        out: torch.futures.Future = torch.futures.Future()

        def finish() -> None:
            try:
                out.set_result(real.value())
            except Exception as e:  # the real collective failed (timeout, peer died): hand on its error
                out.set_exception(e)

        def real_done(_: torch.futures.Future) -> None:
            left = due - now()
            if left <= 0:
                self.late += 1
            t = threading.Timer(max(left, 0.0), finish)
            t.daemon = True  # a rank that ends with a transfer pending must not hang on it
            t.start()

        real.add_done_callback(real_done)
        return out
        # [/teach timer]

    def wait_until(self, due: float) -> None:
        """Block this thread (asleep, not spinning) until ``due``."""
        left = due - now()
        if left > 0:
            time.sleep(left)
        else:
            self.late += 1

    def all_reduce(self, tensor: torch.Tensor, group=None, op=dist.ReduceOp.SUM,
                   real_all_reduce=None) -> torch.futures.Future:
        """Real all-reduce of ``tensor``; its future completes after the link's ring all-reduce time."""
        world = dist.get_world_size(group)
        nbytes = tensor.numel() * tensor.element_size()
        launched = now()
        seconds = self.link.all_reduce_time(nbytes, world)
        # The emulated transfer is booked now, when the bucket is handed over (not when the real one ends) ...
        due = self.reserve(seconds, nbytes, at=launched)
        # ... and the real all-reduce starts at once, asynchronously (gloo's thread): it only has to
        # be done by ``due``, so its loopback time hides inside the emulated one.
        work = (real_all_reduce or dist.all_reduce)(tensor, op=op, group=group, async_op=True)
        real = work.get_future()
        if self.log is not None:
            event = {"bytes": nbytes, "launched": launched, "start": due - seconds, "due": due}
            self.log.append(event)
            real.add_done_callback(lambda _: event.__setitem__("real_done", now()))
        return self.complete_at(real, due)


class _DelayedWork:
    """What ``dist.all_reduce(..., async_op=True)`` returns under :func:`emulated_all_reduce`."""

    def __init__(self, fut: torch.futures.Future):
        self._fut = fut

    def get_future(self) -> torch.futures.Future:
        return self._fut

    def wait(self, timeout=None) -> bool:
        self._fut.wait()
        return True

    def is_completed(self) -> bool:
        return self._fut.done()


@contextlib.contextmanager
def emulated_all_reduce(link: EmulatedLink) -> Iterator[EmulatedLink]:
    """Within the block, ``dist.all_reduce`` (as DDP's Python hooks call it) crosses ``link``.

    torch's hooks (``default_hooks.fp16_compress_hook``, ``powerSGD_hook``) look up
    ``dist.all_reduce`` when they run -- also in PowerSGD's callbacks, which run after the hook has
    returned -- so the patch stays for the whole block, not one hook call. DDP's built-in C++
    all-reduce (no hook registered) bypasses Python and is *not* emulated: register a hook.
    """
    original = dist.all_reduce

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        fut = link.all_reduce(tensor, group=group, op=op, real_all_reduce=original)
        work = _DelayedWork(fut)
        if async_op:
            return work
        work.wait()
        return None

    dist.all_reduce = all_reduce
    try:
        yield link
    finally:
        dist.all_reduce = original
