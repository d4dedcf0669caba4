"""Chapter 8's shared pieces: which precision a device gets, and counting what a step sends.

* :func:`precision` -- the autocast dtype (and whether a ``GradScaler`` is needed) for a
  device: bf16 on CPU, fp16 + scaler on CUDA (the article's case).
* :class:`CommRecorder` -- counts calls and payload bytes of ``dist.all_reduce`` /
  ``dist.all_gather*``. DDP's communication hooks (``default_hooks``, PowerSGD, a
  learner's own) call these Python functions, so the count is *measured* from the
  hooks, not estimated. (DDP's built-in C++ all-reduce bypasses Python: that is why
  the programs register ``default_hooks.allreduce_hook`` -- the same arithmetic --
  when they want to count.)
* :func:`model` / :func:`batch` -- the chapter's tiny regression model and its data.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from disttutor.workloads.data import regression
from disttutor.workloads.models import MLP, seeded

D_IN, HIDDEN, D_OUT = 32, (64, 64), 8


@dataclass(frozen=True)
class Precision:
    dtype: torch.dtype
    scaler: bool          # fp16 needs loss scaling; bf16 has fp32's exponent range and does not

    @property
    def name(self) -> str:
        return str(self.dtype).replace("torch.", "")


def precision(device: torch.device, prefer_bf16_on_cuda: bool = False) -> Precision:
    """bf16 autocast on CPU; on CUDA fp16 + GradScaler (or bf16 where the GPU supports it and it is preferred)."""
    if device.type == "cuda":
        if prefer_bf16_on_cuda and torch.cuda.is_bf16_supported():
            return Precision(torch.bfloat16, False)
        return Precision(torch.float16, True)
    return Precision(torch.bfloat16, False)  # CPU autocast supports bf16 (fp16 on CPU is slow and needs scaling)


def model(seed: int = 0) -> nn.Module:
    """The same weights on every rank (seeded), so fp32/bf16 or hook A/B runs start equal."""
    return seeded(MLP, seed, D_IN, list(HIDDEN), D_OUT)


def dataset(n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    ds = regression(n, D_IN, D_OUT, seed=seed)
    return ds.tensors[0], ds.tensors[1]


def batch(x: torch.Tensor, y: torch.Tensor, step: int, size: int, rank: int, world: int):
    """Rank ``rank``'s contiguous share of global batch ``step`` (rows wrap around the dataset)."""
    idx = (torch.arange(size) + step * size) % len(x)
    return x[idx].chunk(world)[rank], y[idx].chunk(world)[rank]


def median_ms(times_s: list[float]) -> float:
    return 1000 * statistics.median(times_s) if times_s else float("nan")


class CommRecorder:
    """Within ``with CommRecorder() as rec``: every ``dist.all_reduce`` / ``all_gather*`` call is noted.

    ``rec.calls`` is a list of ``(op, numel, bytes)``; bytes = the payload this rank hands to
    the collective (``numel * element_size``). A ring all-reduce puts about
    ``2 (n-1)/n`` times that on the wire per rank; the ratio between two hooks is the same.
    """

    # torch 2.13 spells the flat gather all_gather_single; torch's own hooks and older code still call
    # all_gather_into_tensor (deprecated): record both.
    _OPS = ("all_reduce", "all_gather", "all_gather_single", "all_gather_into_tensor")

    def __init__(self):
        self.calls: list[tuple[str, int, int]] = []
        self._saved: dict[str, object] = {}

    def _wrap(self, op: str, original):
        def recorded(tensor_or_list, *args, **kwargs):
            # all_gather(out_list, tensor): the payload is the 2nd argument; others: the 1st.
            t = args[0] if op.startswith("all_gather") and args else tensor_or_list
            self.calls.append((op, t.numel(), t.numel() * t.element_size()))
            return original(tensor_or_list, *args, **kwargs)
        return recorded

    def __enter__(self) -> "CommRecorder":
        for op in self._OPS:
            self._saved[op] = getattr(dist, op)
            setattr(dist, op, self._wrap(op, self._saved[op]))  # hooks look it up as dist.<op> at call time
        return self

    def __exit__(self, *exc) -> None:
        for op, fn in self._saved.items():
            setattr(dist, op, fn)

    def mark(self) -> int:
        return len(self.calls)

    def since(self, mark: int) -> tuple[int, int]:
        """(calls, bytes) recorded after ``mark``."""
        new = self.calls[mark:]
        return len(new), sum(b for _, _, b in new)


def timed(fn) -> tuple[object, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0
