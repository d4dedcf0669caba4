"""Data loading under DDP: loader workers, pinning, persistence, prefetch -- measured (chapter 8, §8.4).

Each item of :class:`DecodeDataset` costs real CPU work, like decoding a compressed image
and augmenting it: zlib-decompress a stored blob, turn it into a tensor, flip it at
random. Every rank iterates its ``DistributedSampler`` shard for ``epochs`` epochs with
each loader setting and reports items per second, and which dataset indices it saw
(each item carries its index), so the notebook can assert that every sample is seen
exactly once per epoch across ranks *and* workers.

Workers are processes: ``ranks x (1 + num_workers)`` processes share the machine's
cores. Workers pay off only when there is a core for them: on 2 cores with 2 ranks both
cores already run a main process, so chapter 8 runs this with one rank per two cores::

    disttutor run dataloading -n 1 -- --workers 0 1 2 --base-workers 1 --prefetch-sweep 1 4

``pin_memory`` is measured too: it only helps copies to a GPU. Without one, torch 2.13 warns
and does not pin; each row reports whether its batches were pinned and what torch said.
"""
from __future__ import annotations

import time
import warnings
import zlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt
from disttutor.contract.machine import usable_cores


class DecodeDataset(Dataset):
    """``n`` compressed "images" (``side x side`` int16); ``__getitem__`` decodes, augments and resizes one.

    The resize to ``out x out`` (antialiased, like a random-resized crop to a network's input) is
    what makes workers pay off: each item costs real CPU work (grows with ``side**2``) while what a
    worker ships back to the main process is small (``out**2`` floats), so the hand-over between
    processes is cheap against the work it moves off the main process.
    """

    def __init__(self, n: int = 256, side: int = 96, seed: int = 0, out: int | None = None):
        g = torch.Generator().manual_seed(seed)
        # Smooth-ish data compresses like real images do (pure noise would not compress at all).
        base = torch.randint(0, 64, (n, side, side), generator=g, dtype=torch.int16).cumsum(-1).to(torch.int16)
        self.side = side
        self.out = min(out or side, side)
        self.blobs = [zlib.compress(b.numpy().tobytes(), 6) for b in base]

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        raw = zlib.decompress(self.blobs[i])                                     # "decode"
        img = torch.frombuffer(bytearray(raw), dtype=torch.int16).view(self.side, self.side).float()
        if (i * 2654435761) % 2:                                                 # "augment": a flip
            img = img.flip(-1)
        img = (img - img.mean()) / (img.std() + 1e-6)                            # normalise
        if self.out != self.side:                                                # resize (antialiased)
            img = F.interpolate(img[None, None], size=(self.out, self.out), mode="bilinear", antialias=True)[0, 0]
        return img, i                                                            # the index: coverage


@dataclass(frozen=True)
class LoadConfig:
    workers: tuple[int, ...] = opt((0, 1, 2), "num_workers values to measure")
    samples: int = opt(256, "dataset size")
    side: int = opt(192, "stored image side (per-item cost grows with side**2)")
    out: int = opt(64, "side of the image a loader returns (resized, antialiased; at most --side)")
    batch: int = opt(16, "per-rank batch size")
    epochs: int = opt(2, "epochs per setting (persistent workers matter from epoch 2)")
    persistent: bool = opt(True, "persistent_workers (for num_workers > 0)")
    prefetch: int = opt(2, "prefetch_factor (for num_workers > 0)")
    variants: bool = opt(True, "also measure, at --base-workers, persistent_workers flipped, "
                               "each --prefetch-sweep value and pin_memory=True")
    base_workers: int = opt(1, "num_workers for the variants")
    prefetch_sweep: tuple[int, ...] = opt((1, 4), "prefetch_factor values for the variants")

    def __post_init__(self):
        require_positive(self, "samples", "side", "out", "batch", "epochs", "prefetch", "base_workers")
        if not self.workers or any(isinstance(w, bool) or w < 0 for w in self.workers):
            raise ValueError(f"workers must be one or more integers >= 0, got {self.workers}")
        if any(isinstance(p, bool) or p < 1 for p in self.prefetch_sweep):
            raise ValueError(f"prefetch_sweep values must be integers >= 1, got {self.prefetch_sweep}")


@dataclass(frozen=True)
class Setting:
    workers: int
    persistent: bool
    prefetch: int
    pin: bool
    label: str


def settings(cfg: LoadConfig) -> list[Setting]:
    """The num_workers sweep (pin_memory off), then one option changed at a time at ``base_workers``."""
    out = [Setting(w, cfg.persistent, cfg.prefetch, False, f"workers={w}") for w in cfg.workers]
    if cfg.variants:
        w = cfg.base_workers
        out.append(Setting(w, not cfg.persistent, cfg.prefetch, False, f"w={w} persistent={not cfg.persistent}"))
        out += [Setting(w, cfg.persistent, p, False, f"w={w} prefetch={p}") for p in cfg.prefetch_sweep
                if p != cfg.prefetch]
        out.append(Setting(w, cfg.persistent, cfg.prefetch, True, f"w={w} pin_memory"))
    return out


def loader(ds: Dataset, sampler, cfg: LoadConfig, s: Setting) -> DataLoader:
    extra = {}
    if s.workers > 0:
        # These two options are errors with num_workers=0 (ValueError): pass them only with workers.
        extra = dict(persistent_workers=s.persistent, prefetch_factor=s.prefetch)
    return DataLoader(ds, batch_size=cfg.batch, sampler=sampler, num_workers=s.workers, pin_memory=s.pin, **extra)


def measure(ds: Dataset, sampler, cfg: LoadConfig, s: Setting, device: torch.device) -> dict:
    seen, epoch_s, pinned = [], [], []
    with warnings.catch_warnings(record=True) as caught:
        # pin_memory without an accelerator: torch says so with a warning (and does not pin):
        # recorded here, so the notebook reports what torch did instead of guessing.
        warnings.simplefilter("always")
        dl = loader(ds, sampler, cfg, s)
        for epoch in range(cfg.epochs):
            sampler.set_epoch(epoch)
            t0 = time.perf_counter()
            order = []
            for img, idx in dl:
                pinned.append(img.is_pinned())
                img = img.to(device, non_blocking=s.pin)  # async only from pinned memory to a GPU
                order += idx.tolist()
            epoch_s.append(time.perf_counter() - t0)
            seen.append(order)
        del dl  # shuts persistent workers down before the next setting starts its own
    notes = sorted({str(w.message).split("\n")[0] for w in caught if "pin" in str(w.message)})
    return dict(label=s.label, workers=s.workers, persistent=s.persistent, prefetch=s.prefetch, pin=s.pin,
                items_per_s=[len(o) / t for o, t in zip(seen, epoch_s)], epoch_s=epoch_s, seen=seen,
                pinned=all(pinned), pin_warnings=notes)


def run(cfg: LoadConfig) -> None:
    with runtime.setup() as ctx:
        ds = DecodeDataset(cfg.samples, cfg.side, out=cfg.out)
        sampler = DistributedSampler(ds, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=0)
        todo = settings(cfg)
        rows = []
        for s in todo:
            rows.append(measure(ds, sampler, cfg, s, ctx.device))
            runtime.progress(len(rows), len(todo), desc="data loading", workers=s.workers)
        runtime.report(rows=rows, cores=usable_cores(), accelerator=torch.cuda.is_available(),
                       per_rank=len(sampler))


main = cli(LoadConfig, run)


if __name__ == "__main__":
    main()
