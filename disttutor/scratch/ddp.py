"""DistributedDataParallel from scratch: a naive wrapper and a bucketed, overlapped one.

Introduced in chapter 4 (exercises 4.1 and 4.2 rebuild these). Both wrappers

1. broadcast rank 0's parameters when they are built (so every replica starts equal),
2. make every rank's gradients the *average* over ranks before the optimiser step.

:class:`NaiveDDP` does step 2 after ``backward()``: one all-reduce per parameter.
:class:`BucketedDDP` does it *during* ``backward()``: a hook on each parameter
notices its gradient is ready; when a bucket is full its all-reduce starts
asynchronously, overlapping communication with the rest of backward.
``finish()`` waits for the handles before the optimiser step. The
communication itself lives in :mod:`disttutor.scratch.buckets`.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from disttutor.scratch.buckets import (InFlight, allreduce_mean_, finish_bucket, launch_bucket, plan_buckets,
                                      release_buckets)


def broadcast_params_(module: nn.Module, src: int = 0) -> None:
    """Copy rank ``src``'s parameters and buffers to every rank (what DDP's constructor does)."""
    with torch.no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            dist.broadcast(t, src)


class NaiveDDP(nn.Module):
    """After backward, all-reduce every gradient separately (no buckets, no overlap)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module  # named .module like torch's DDP, so state_dict keys match
        broadcast_params_(module)
        self.calls_last_step = 0

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish(self) -> None:
        """Call between ``backward()`` and ``optimizer.step()``."""
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        self.calls_last_step = allreduce_mean_(grads)


class BucketedDDP(nn.Module):
    """Gradient buckets whose all-reduces start during backward; ``finish()`` before the step.

    ``bucket_cap_numel`` plays the role of DDP's ``bucket_cap_mb`` (in elements,
    not megabytes). ``trace``, if a list, receives events in the order they
    happen -- ``("grad", name)`` when a gradient is ready, ``("launch", k)``
    when bucket ``k``'s all-reduce starts -- so the overlap can be seen.
    """

    def __init__(self, module: nn.Module, bucket_cap_numel: int = 2**20, trace: list | None = None):
        super().__init__()
        self.module = module
        broadcast_params_(module)
        self.world = dist.get_world_size()
        params = [p for p in module.parameters() if p.requires_grad]
        self.buckets = plan_buckets(params, bucket_cap_numel)
        self._where = {id(p): k for k, b in enumerate(self.buckets) for p in b}
        self._names = {id(p): n for n, p in module.named_parameters()}
        self.trace = trace
        self._reset()
        for p in params:
            # Fires once .grad holds this backward's full gradient for p.
            p.register_post_accumulate_grad_hook(self._grad_ready)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _reset(self) -> None:
        self._missing = [len(b) for b in self.buckets]  # gradients each bucket still waits for
        self._next = 0                                  # the next bucket to launch
        self._inflight: list[InFlight] = []

    # [teach hook]
    def _grad_ready(self, p: nn.Parameter) -> None:
        if self.trace is not None:
            self.trace.append(("grad", self._names[id(p)]))
        self._missing[self._where[id(p)]] -= 1
        # Launch buckets strictly in index order 0, 1, 2, ...: collectives are
        # matched by call order, so if autograd ever finished bucket 1 before
        # bucket 0 on one rank but not on another, launching "whatever is full"
        # would pair rank A's bucket 1 with rank B's bucket 0 -- wrong sums or a hang.
        while self._next < len(self.buckets) and self._missing[self._next] == 0:
            self._inflight.append(launch_bucket(self.buckets[self._next]))
            if self.trace is not None:
                self.trace.append(("launch", self._next))
            self._next += 1
    # [/teach hook]

    def finish(self) -> None:
        """Wait for every bucket, average, copy back. Call before ``optimizer.step()``."""
        if self._next < len(self.buckets):
            k = self._next
            idle = [self._names[id(p)] for b in self.buckets[k:] for p in b if p.grad is None]
            # The buckets already launched are collectives every rank started: wait for them and for
            # gloo's threads to let go of their buffers before raising (see buckets.released: a
            # buffer released by gloo's thread while the interpreter is finalising aborts the process).
            for b in self._inflight:
                b.work.wait()
            release_buckets(self._inflight)
            self._reset()
            raise RuntimeError(f"bucket {k} never filled: no gradient for {idle or 'some parameters'} "
                               "in this backward (unused parameters?). Every rank would wait for it forever.")
        for b in self._inflight:
            finish_bucket(b, self.world)
        release_buckets(self._inflight)  # nothing left in gloo's threads: a rank may exit right after the step
        if self.trace is not None:
            self.trace.append(("finish", len(self._inflight)))
        self._reset()
