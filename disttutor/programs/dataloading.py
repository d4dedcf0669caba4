"""Data loading under DDP: loader workers, pinning, persistence, prefetch -- measured (chapter 8, §8.4).

Each item of :class:`DecodeDataset` costs real CPU work, like decoding a compressed image
and augmenting it: zlib-decompress a stored blob, turn it into a tensor, flip it at
random. Every rank iterates its ``DistributedSampler`` shard for ``epochs`` epochs with
each loader setting and reports items per second, and which dataset indices it saw
(each item carries its index), so the notebook can assert that every sample is seen
exactly once per epoch across ranks *and* workers.

Workers are processes: ``ranks x (1 + num_workers)`` processes share the machine's
cores. On 2 cores with 2 ranks, a worker can only help while a rank's main process
would otherwise wait::

    disttutor run dataloading -n 2 -- --workers 0 1 2
"""
from __future__ import annotations

import os
import time
import zlib
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from disttutor import runtime
from disttutor.config import require_positive
from disttutor.options import cli, opt


class DecodeDataset(Dataset):
    """``n`` compressed "images" (``side x side`` int16); ``__getitem__`` decodes and augments one."""

    def __init__(self, n: int = 256, side: int = 96, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        # Smooth-ish data compresses like real images do (pure noise would not compress at all).
        base = torch.randint(0, 64, (n, side, side), generator=g, dtype=torch.int16).cumsum(-1).to(torch.int16)
        self.side = side
        self.blobs = [zlib.compress(b.numpy().tobytes(), 6) for b in base]

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        raw = zlib.decompress(self.blobs[i])                                     # "decode"
        img = torch.frombuffer(bytearray(raw), dtype=torch.int16).view(self.side, self.side).float()
        if (i * 2654435761) % 2:                                                 # "augment": a flip
            img = img.flip(-1)
        img = (img - img.mean()) / (img.std() + 1e-6)                            # normalise
        return img, i                                                            # the index: coverage


@dataclass(frozen=True)
class LoadConfig:
    workers: tuple[int, ...] = opt((0, 1, 2), "num_workers values to measure")
    samples: int = opt(256, "dataset size")
    side: int = opt(96, "image side (per-item cost grows with side**2)")
    batch: int = opt(16, "per-rank batch size")
    epochs: int = opt(2, "epochs per setting (persistent workers matter from epoch 2)")
    persistent: bool = opt(True, "persistent_workers (for num_workers > 0)")
    prefetch: int = opt(2, "prefetch_factor (for num_workers > 0)")

    def __post_init__(self):
        require_positive(self, "samples", "side", "batch", "epochs", "prefetch")
        if not self.workers or any(isinstance(w, bool) or w < 0 for w in self.workers):
            raise ValueError(f"workers must be one or more integers >= 0, got {self.workers}")


def loader(ds: Dataset, sampler, cfg: LoadConfig, workers: int, pin: bool) -> DataLoader:
    extra = {}
    if workers > 0:
        # These two options are errors with num_workers=0 (ValueError): pass them only with workers.
        extra = dict(persistent_workers=cfg.persistent, prefetch_factor=cfg.prefetch)
    return DataLoader(ds, batch_size=cfg.batch, sampler=sampler, num_workers=workers, pin_memory=pin, **extra)


def run(cfg: LoadConfig) -> None:
    with runtime.setup() as ctx:
        ds = DecodeDataset(cfg.samples, cfg.side)
        sampler = DistributedSampler(ds, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=0)
        pin = ctx.device.type == "cuda"  # pinned host memory only speeds up copies to a GPU
        rows = []
        for w in cfg.workers:
            dl = loader(ds, sampler, cfg, w, pin)
            seen, epoch_s = [], []
            for epoch in range(cfg.epochs):
                sampler.set_epoch(epoch)
                t0 = time.perf_counter()
                order = []
                for img, idx in dl:
                    img = img.to(ctx.device, non_blocking=pin)
                    order += idx.tolist()
                epoch_s.append(time.perf_counter() - t0)
                seen.append(order)
            del dl  # shuts persistent workers down before the next setting starts its own
            rows.append(dict(workers=w, items_per_s=[len(o) / s for o, s in zip(seen, epoch_s)],
                             epoch_s=epoch_s, seen=seen))
            runtime.progress(len(rows), len(cfg.workers), desc="data loading", workers=w)
        runtime.report(rows=rows, cores=os.cpu_count(), pin_memory=pin, per_rank=len(sampler))


main = cli(LoadConfig, run)


if __name__ == "__main__":
    main()
