"""``nn.DataParallel``: the article's training code, corrected, and the traffic formulas.

Introduced in chapter 3. Everything here is single-process (DataParallel is one
process with one thread per GPU), so nothing here creates a process group:

* :func:`train_dataparallel` -- the article's section 4.2 training loop, fixed
  (seeded learnable data, DataParallel only with >= 2 GPUs, an honest per-epoch
  loss). With fewer than two GPUs it still runs: ``nn.DataParallel`` then simply
  calls the module.
* :func:`expected_bytes` -- the textbook per-step traffic of each rank for the
  three communication patterns that ``disttutor.programs.dp_traffic`` measures.

Quoting the installed torch source is :func:`disttutor.course.source.source_lines`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from disttutor.workloads import data
from disttutor.workloads import models
from disttutor.contract.config import require_positive

#: Per-step communication patterns measured by ``disttutor.programs.dp_traffic``.
#: dp-copy:  DataParallel, parameters copied device 0 -> each device and gradients
#:           copied each device -> device 0 (torch's path without NCCL; the article's diagram).
#: dp-chain: DataParallel, parameters/gradients moved by a pipelined chain broadcast/reduce
#:           (the shape of the NCCL broadcast/reduce that torch uses when NCCL is available).
#: ddp-ring: DistributedDataParallel's pattern: a ring all-reduce of the gradients, nothing else.
PATTERNS = ("dp-copy", "dp-chain", "ddp-ring")


# --------------------------------------------------------------------------- training
@dataclass(frozen=True)
class DPTrainConfig:
    """The article's hyper-parameters by default (10 -> 100 -> 10 MLP, batch 64, SGD lr 0.01)."""

    epochs: int = 3
    n_samples: int = 10_000
    batch_size: int = 64
    d_in: int = 10
    hidden: int = 100
    classes: int = 10
    lr: float = 0.01
    seed: int = 0
    labels: str = "blobs"            # "blobs": learnable; "random": the article's random labels
    min_gpus: int = 2                # DataParallel only pays off with at least two GPUs
    device_ids: tuple[int, ...] | None = None  # None: every visible GPU

    def __post_init__(self):
        require_positive(self, "epochs", "n_samples", "batch_size", "d_in", "hidden", "classes")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.labels not in ("blobs", "random"):
            raise ValueError(f"labels must be 'blobs' or 'random', got {self.labels!r}")
        if self.min_gpus < 2:
            raise ValueError("min_gpus must be >= 2: DataParallel over one device is just the module")
        if self.device_ids is not None and len(self.device_ids) < 2:
            raise ValueError(f"device_ids needs at least two GPUs, got {self.device_ids}")


@dataclass
class DPTrainResult:
    epoch_loss: list[float]          # sample-weighted mean over the whole epoch
    last_batch_loss: list[float]     # what the article prints: the loss of the epoch's last batch
    last_batch_size: int
    path: str                        # which code path ran, in words
    device_ids: list[int]
    params: dict[str, float] = field(default_factory=dict)


def make_dataset(cfg: DPTrainConfig) -> TensorDataset:
    """The training data, regenerated from ``cfg.seed`` (never downloaded)."""
    if cfg.labels == "blobs":
        return data.classification(n=cfg.n_samples, d_in=cfg.d_in, classes=cfg.classes, seed=cfg.seed)
    # The article's RandomDataset: unseeded randn inputs and *independent* random labels.
    # There is nothing to learn: the best a model can do is predict 1/classes everywhere.
    g = torch.Generator().manual_seed(cfg.seed)
    return TensorDataset(torch.randn(cfg.n_samples, cfg.d_in, generator=g),
                         torch.randint(0, cfg.classes, (cfg.n_samples,), generator=g))


def train_dataparallel(cfg: DPTrainConfig = DPTrainConfig()) -> DPTrainResult:
    """The article's section 4.2 loop, corrected. Real DataParallel with >= ``cfg.min_gpus`` GPUs.

    Fixes: DataParallel only with two or more GPUs; seeded data with something to learn; the
    printed loss is the epoch mean, not the last batch's. The article's order (wrap, then
    ``.cuda()``) was already right: ``.cuda()`` on the wrapper moves the wrapped module to the
    current device (cuda:0 unless ``torch.cuda.set_device`` changed it), which is ``device_ids[0]``
    by default, before any forward. Here the
    module moves first only because ``device_ids`` may be chosen (``DataParallel.forward``
    raises if parameters are not on ``device_ids[0]``).
    """
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    torch.manual_seed(cfg.seed)
    model: nn.Module = models.MLP(cfg.d_in, [cfg.hidden], cfg.classes)  # == the article's SimpleModel
    if n_gpu >= cfg.min_gpus:
        ids = list(cfg.device_ids if cfg.device_ids is not None else range(n_gpu))
        if max(ids) >= n_gpu:
            raise ValueError(f"device_ids {ids} but only {n_gpu} GPUs are visible")
        device = torch.device("cuda", ids[0])
        model = nn.DataParallel(model.to(device), device_ids=ids)  # forward needs it on ids[0]
        path = f"nn.DataParallel over cuda:{ids} (one process, {len(ids)} threads)"
    else:
        device, ids = torch.device("cpu"), []
        path = (f"single module on CPU: {n_gpu} GPU(s) visible, DataParallel needs >= {cfg.min_gpus}")
    loader = DataLoader(make_dataset(cfg), batch_size=cfg.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(cfg.seed))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    epoch_loss, last_loss, last_n = [], [], 0
    for _ in range(cfg.epochs):
        total, seen = 0.0, 0
        for x, y in loader:
            # Inputs go to device_ids[0]; DataParallel scatters them from there (first-device traffic).
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = criterion(model(x), y)  # outputs were gathered on device_ids[0]: the loss is computed there
            loss.backward()                # replica gradients are *summed* into the original module
            optimizer.step()               # one update, on device_ids[0] only
            total, seen, last_n = total + loss.item() * len(y), seen + len(y), len(y)
        epoch_loss.append(total / seen)
        last_loss.append(loss.item())
    inner = model.module if isinstance(model, nn.DataParallel) else model
    return DPTrainResult(epoch_loss, last_loss, last_n, path, ids, models.param_summary(inner))


def full_batch_reference(steps: int, batch: int, d_in: int, hidden: int, classes: int, lr: float,
                         seed: int = 0) -> tuple[list[float], dict[str, float]]:
    """One process, the whole batch, plain SGD: what every pattern of ``dp_traffic`` must reproduce.

    Returns the loss before each step and the final parameter summary.
    """
    x, y = data.classification(n=batch, d_in=d_in, classes=classes, seed=seed).tensors
    model = models.seeded(models.MLP, seed, d_in, [hidden], classes)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, models.param_summary(model)


# --------------------------------------------------------------------------- traffic formulas
def split_sizes(numel: int, n: int) -> list[int]:
    """Sizes of ``torch.tensor_split(t, n)`` for a 1-D tensor of ``numel`` elements."""
    q, r = divmod(numel, n)
    return [q + (1 if i < r else 0) for i in range(n)]


def ring_sent_elements(numel: int, n: int, rank: int) -> int:
    """Elements ``rank`` sends in a ring all-reduce (reduce-scatter, then all-gather)."""
    c = split_sizes(numel, n)
    rs = sum(c[(rank - k) % n] for k in range(n - 1))      # reduce-scatter step k sends chunk r-k
    ag = sum(c[(rank + 1 - k) % n] for k in range(n - 1))  # all-gather step k sends chunk r+1-k
    return rs + ag


def expected_bytes(pattern: str, n: int, rank: int, n_params: int, batch: int, d_in: int, d_out: int,
                   elem: int = 4) -> dict[str, int]:
    """Bytes ``rank`` sends and receives in one training step of ``pattern`` on ``n`` ranks.

    S = n_params*elem (parameters or gradients), X = batch*d_in*elem (inputs),
    Y = batch*d_out*elem (outputs, and their gradients). DataParallel also moves
    activations through rank 0: inputs scattered, outputs gathered, output
    gradients scattered -- (n-1)/n of X, Y and Y. The ring moves no activations.
    """
    if pattern not in PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r}; choose from {PATTERNS}")
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is not in 0..{n - 1}")
    if batch % n:
        raise ValueError(f"batch {batch} must be divisible by {n} ranks")
    S, x, y = n_params * elem, batch // n * d_in * elem, batch // n * d_out * elem  # x, y: one shard
    if n == 1:
        return {"sent": 0, "recv": 0}
    if pattern == "ddp-ring":
        # A rank receives exactly what its left neighbour sends.
        return {"sent": ring_sent_elements(n_params, n, rank) * elem,
                "recv": ring_sent_elements(n_params, n, (rank - 1) % n) * elem}
    if rank == 0:
        acts_sent, acts_recv = (n - 1) * (x + y), (n - 1) * y  # scatter x, scatter dy; gather y
        params = (n - 1) * S if pattern == "dp-copy" else S  # copy: one per device; chain: once
        return {"sent": acts_sent + params, "recv": acts_recv + params}
    middle = pattern == "dp-chain" and rank < n - 1  # forwards the broadcast and the partial sums
    return {"sent": y + S + (S if middle else 0), "recv": x + y + S + (S if middle else 0)}


def textbook_ring_bytes(n_params: int, n: int, elem: int = 4) -> float:
    """The textbook volume each rank sends in a ring all-reduce: 2(n-1)/n * S."""
    return 2 * (n - 1) / n * n_params * elem
