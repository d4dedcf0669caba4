"""Gradient communication for a from-scratch DDP: per-tensor and bucketed all-reduce.

Introduced in chapter 4. Kept apart from the wrapper (:mod:`disttutor.scratch.ddp`)
that decides *when* to call these: this module only knows *how* gradients
travel. Everything here is a collective, so every rank must call the same
functions, on the same shapes, in the same order.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn


def allreduce_mean_(tensors: list[torch.Tensor]) -> int:
    """All-reduce every tensor on its own and divide by the world size (in place).

    One collective per tensor: simple, correct, and slow when there are many
    small tensors, because each call pays the full latency of a round of messages.
    Returns the number of collectives issued.
    """
    world = dist.get_world_size()
    for t in tensors:
        held = t._use_count()
        dist.all_reduce(t)  # SUM over ranks ...
        t.div_(world)       # ... then the mean: the gradient of the global mean loss
        released(t, held)   # gloo's thread has let go of t (see released)
    return len(tensors)


def plan_buckets(params: list[nn.Parameter], cap_numel: int) -> list[list[nn.Parameter]]:
    """Group parameters into buckets of at most ``cap_numel`` elements, in REVERSE order.

    Backward computes the last layer's gradients first, so the last parameters
    go into bucket 0: it fills first and its all-reduce can start while
    backward is still busy with earlier layers. A parameter larger than the
    cap gets a bucket of its own. Every rank computes the same plan from the
    same model, so bucket ``k`` means the same tensors everywhere.
    """
    if cap_numel < 1:
        raise ValueError(f"bucket cap must be >= 1 element, got {cap_numel}")
    buckets: list[list[nn.Parameter]] = []
    cur: list[nn.Parameter] = []
    size = 0
    for p in reversed(params):
        if cur and size + p.numel() > cap_numel:
            buckets.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += p.numel()
    if cur:
        buckets.append(cur)
    return buckets


@dataclass
class InFlight:
    """One bucket's all-reduce on its way: the flat buffer and the handle to wait on."""

    params: list[nn.Parameter]
    flat: torch.Tensor
    work: dist.Work = field(repr=False)


# [teach bucket]
def launch_bucket(params: list[nn.Parameter]) -> InFlight:
    """Copy a bucket's gradients into one flat buffer and start an async SUM all-reduce on it.

    One big message instead of many small ones: the per-call latency is paid
    once per bucket. ``async_op=True`` returns at once with a handle, so the
    caller (a backward hook) lets autograd carry on while the bytes travel.
    """
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    return InFlight(params, flat, dist.all_reduce(flat, async_op=True))


def finish_bucket(b: InFlight, world_size: int) -> None:
    """Wait for a bucket's all-reduce, turn the sum into a mean, copy it back into ``.grad``."""
    b.work.wait()
    b.flat.div_(world_size)
    offset = 0
    for p in b.params:
        n = p.numel()
        p.grad.copy_(b.flat[offset:offset + n].view_as(p.grad))
        offset += n
# [/teach bucket]


def release_buckets(inflight: list[InFlight]) -> None:
    """Drop the finished buckets' handles and wait until gloo's worker threads hold none of their buffers.

    After this a step leaves nothing behind in the process group's threads, so a rank can exit right after
    ``optimizer.step()`` without the exit-time abort described in :func:`released`.
    """
    for b in inflight:
        b.work = None  # the handle's future holds the buffer too
    for b in inflight:
        released(b.flat, 1)  # 1: the reference of b.flat's own Python object


def released(t: torch.Tensor, held: int, timeout_s: float = 5.0) -> bool:
    """Wait until gloo's worker thread has let go of ``t`` (its C++ use count is back to ``held``).

    ``work.wait()`` returns when the result is ready, but the worker thread drops its own reference to the
    work -- and with it to the tensor -- a moment later. In torch 2.x a Python tensor's last C++ reference
    going away decrefs its Python object, which takes the GIL. If that moment falls after the interpreter
    started finalising, Python ends the worker thread inside a ``noexcept`` destructor and the process
    aborts ("terminate called without an active exception") after every check has passed. So a
    collective is finished only once its buffer is released; sleeping hands the GIL to that thread.
    """
    deadline = time.monotonic() + timeout_s
    while t._use_count() > held:
        if time.monotonic() > deadline:
            return False  # never hang a learner's step on this: the result itself is complete
        time.sleep(1e-4)
    return True
