"""Chapter 4's from-scratch bucketed DDP, with ``no_sync()`` for gradient accumulation (chapter 8).

Inside ``with ddp.no_sync():`` a backward only accumulates into ``.grad``: the gradient
hooks return before counting the parameter off its bucket, so no bucket fills and no
all-reduce starts. The next backward outside ``no_sync()`` finds each ``.grad`` holding
the SUM of all the micro-batches' gradients (``post_accumulate_grad_hook`` fires after
accumulation), and its buckets all-reduce that sum once. Exercise 8.1 rebuilds this.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from torch import nn

from disttutor.scratch.ddp import BucketedDDP


class NoSyncDDP(BucketedDDP):
    def __init__(self, module: nn.Module, bucket_cap_numel: int = 2**20, trace: list | None = None):
        super().__init__(module, bucket_cap_numel, trace)
        self.require_sync = True

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        old, self.require_sync = self.require_sync, False
        try:
            yield
        finally:
            self.require_sync = old  # restored even if the backward inside raised

    def _grad_ready(self, p: nn.Parameter) -> None:
        # Every rank takes the same branch (no_sync is entered in lockstep by the training
        # loop), so skipping here never leaves one rank waiting in a collective.
        if self.require_sync:
            super()._grad_ready(p)
