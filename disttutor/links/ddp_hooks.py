"""DDP communication hooks whose buckets cross an emulated link (chapter 8).

Introduced in chapter 8 (performance). Register with ``model.register_comm_hook(state, hook)``:

* :func:`link_hook` -- what DDP does by default (average each bucket as soon as it is ready, during
  the backward), with each bucket's all-reduce on the emulated link: **overlap**. The real gloo
  all-reduce runs, so the gradients are DDP's; the bucket's future completes no earlier than the
  link's ring all-reduce time after launch (:class:`disttutor.links.emulated.EmulatedLink`:
  the real loopback time is hidden inside the emulated time when it is shorter, and shows when not).
* :func:`deferred_hook` -- the same all-reduces, but none starts before the *last* bucket is ready,
  i.e. after the backward has finished: **no overlap**, the step pays compute + communication.
* compression: keep torch's own hook (``default_hooks.fp16_compress_hook``, ``powerSGD_hook``) and
  run the training inside :func:`disttutor.links.emulated.emulated_all_reduce`: the bytes on the
  emulated wire are then the bytes the hook hands to ``dist.all_reduce`` -- the compressed ones.

The communication itself lives in :mod:`disttutor.links.emulated`; this module only decides which
buckets go when.
"""
# No `from __future__ import annotations`: DDP.register_comm_hook compares the hook's annotations
# with dist.GradBucket and torch.futures.Future[torch.Tensor] as objects, not strings.
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.distributed as dist

from disttutor.links.emulated import EmulatedLink

__all__ = ["LinkHookState", "link_hook", "deferred_hook"]


@dataclass
class LinkHookState:
    link: EmulatedLink
    group: Optional[dist.ProcessGroup] = None
    pending: list = field(default_factory=list)  # deferred_hook's buckets of this backward
    bucket_bytes: list = field(default_factory=list)  # the last backward's bucket sizes, in order

    @property
    def world(self) -> int:
        return dist.get_world_size(self.group)


def _average(state: LinkHookState, buf: torch.Tensor) -> torch.futures.Future:
    # Divide first, then sum: the mean of the ranks' gradients, as DDP's default reducer gives.
    buf.div_(state.world)
    return state.link.all_reduce(buf, group=state.group).then(lambda f: f.value()[0])


def _note(state: LinkHookState, bucket: dist.GradBucket) -> None:
    if bucket.index() == 0:
        state.bucket_bytes = []
    buf = bucket.buffer()
    state.bucket_bytes.append(buf.numel() * buf.element_size())


# [teach hooks]
def link_hook(state: LinkHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Each bucket all-reduced on the emulated link as soon as DDP hands it over (overlap)."""
    _note(state, bucket)
    return _average(state, bucket.buffer())


def _hand_on(done: torch.futures.Future, target: torch.futures.Future) -> None:
    try:
        target.set_result(done.value())
    except Exception as e:  # the all-reduce failed: DDP sees the error when it waits for the bucket
        target.set_exception(e)


def deferred_hook(state: LinkHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Every bucket held until the last one is ready, then all sent: communication after backward.

    DDP only waits for the buckets' futures when the backward ends, so handing back futures that
    are completed later is allowed; DDP calls the hook in bucket order, and ``is_last()`` is the
    bucket with the first layers' gradients -- the last ones the backward produces.
    """
    _note(state, bucket)
    out: torch.futures.Future = torch.futures.Future()
    state.pending.append((bucket.buffer(), out))
    if bucket.is_last():
        for buf, target in state.pending:
            _average(state, buf).add_done_callback(lambda f, t=target: _hand_on(f, t))
        state.pending.clear()
    return out
# [/teach hooks]
