"""Solution to Exercise 8.1 (chapter 8): ``no_sync()`` for chapter 4's from-scratch bucketed DDP.

Check it from a notebook or a shell::

    from disttutor.checks.perf import check_no_sync
    print(check_no_sync("solutions/ex8_1_no_sync.py"))

Same as :class:`disttutor.scratch.accumulate.NoSyncDDP`.
"""
import contextlib

from disttutor.scratch.ddp import BucketedDDP


class NoSyncDDP(BucketedDDP):
    def __init__(self, module, bucket_cap_numel=2**20):
        super().__init__(module, bucket_cap_numel)
        self.require_sync = True

    @contextlib.contextmanager
    def no_sync(self):
        old, self.require_sync = self.require_sync, False
        try:
            yield
        finally:
            self.require_sync = old

    def _grad_ready(self, p):
        # Inside no_sync(): leave the gradient in .grad (it keeps accumulating); count
        # nothing, launch nothing. The last backward then all-reduces the accumulated sum.
        if self.require_sync:
            super()._grad_ready(p)
