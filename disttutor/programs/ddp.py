"""The article's DDP program (§5.2), corrected for current PyTorch and launched by torchrun (chapter 4).

What changed from the article, and why (each is a comment below too):

* torchrun starts the ranks and sets ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``/``MASTER_*``;
  no ``mp.spawn``, no hard-coded port 12355 (:func:`disttutor.rank.runtime.setup`).
* backend and device come from the machine: NCCL + ``cuda:LOCAL_RANK`` with GPUs,
  gloo + CPU without. The article's ``.to(rank)`` uses the *global* rank, which
  is not a GPU index on a second node.
* the dataset is built from a seed, so it is the same on every rank (the article's
  ``torch.randn`` without a seed gives every process a different dataset).
* ``DistributedSampler`` + ``set_epoch``; ``drop_last`` is a flag to see its effect.
* the printed loss is averaged over ranks, not rank 0's last batch.
* rank 0 saves ``model.module.state_dict()`` (no ``module.`` prefix); the others load it.

Flags for the chapter's experiments: ``--no-set-epoch``, ``--drop-last``, ``--uneven N``
(+ ``--join``), ``--unused-demo``; ``--help`` lists them all (from :class:`DDPConfig`).

    disttutor run ddp -n 4 -- --epochs 3 --save /tmp/model.pt
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from disttutor.rank import runtime
from disttutor.workloads.data import classification
from disttutor.workloads.models import MLP, param_summary
from disttutor.contract.config import require_non_negative, require_positive
from disttutor.contract.options import cli, opt


@dataclass(frozen=True)
class DDPConfig:
    samples: int = opt(512, "samples in the dataset")
    epochs: int = opt(3, "passes over the dataset")
    batch_size: int = opt(32, "PER RANK, as in the article (global batch = batch_size * world_size)")
    lr: float = opt(0.05, "SGD learning rate")
    seed: int = opt(0, "seed of the dataset and the weights")
    set_epoch: bool = opt(True, "call sampler.set_epoch(epoch) (without it every epoch repeats epoch 0's order)")
    drop_last: bool = opt(False, "DistributedSampler drops the tail instead of padding with repeats")
    save: str = opt("", "path for rank 0's checkpoint (empty: do not save)")
    show: int = opt(6, "indices of each epoch's sampler order to report")
    uneven: int = opt(0, "the last rank skips this many batches per epoch")
    join: bool = opt(False, "wrap the loop in torch.distributed.algorithms.Join")
    unused_demo: bool = opt(False, "train a model with an unused layer, without and with find_unused_parameters")

    def __post_init__(self):
        require_positive(self, "samples", "epochs", "batch_size")
        require_non_negative(self, "show", "uneven")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.save and not os.path.isdir(os.path.dirname(os.path.abspath(self.save))):
            raise ValueError(f"save: directory of {self.save!r} does not exist")


def article_model() -> nn.Module:
    """The article's SimpleModel: Linear(10, 100) -> ReLU -> Linear(100, 10)."""
    return MLP(10, [100], 10)


def fingerprint(t: torch.Tensor) -> str:
    return runtime.summarize(t)["sha1"]


def wrap(model: nn.Module, ctx: runtime.Context, **kw) -> DDP:
    # device_ids: the ONE device this process drives -- cuda:LOCAL_RANK -- or None on CPU.
    return DDP(model, device_ids=[ctx.local_rank] if ctx.device.type == "cuda" else None, **kw)


def train(cfg: DDPConfig, ctx: runtime.Context) -> dict:
    # Same seed on every rank -> the same dataset everywhere; the sampler then
    # hands each rank a disjoint part of ONE dataset.
    dataset = classification(cfg.samples, d_in=10, classes=10, seed=cfg.seed)
    article_data = torch.randn(cfg.samples, 10)  # the article's RandomDataset: unseeded, differs per process
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True,
                                 seed=cfg.seed, drop_last=cfg.drop_last)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler,
                        num_workers=0,  # loader workers are chapter 8's topic; 0 keeps ranks light here
                        pin_memory=ctx.device.type == "cuda")

    torch.manual_seed(cfg.seed + ctx.rank)  # different weights on each rank, on purpose (as unseeded code would)
    model = article_model().to(ctx.device)
    before = param_summary(model)["sum"]
    ddp = wrap(model, ctx)  # the constructor broadcasts rank 0's parameters and buffers to all ranks
    after = param_summary(model)["sum"]
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg.lr)

    orders, losses, batches = [], [], []
    skip = cfg.uneven if ctx.rank == ctx.world_size - 1 else 0
    for epoch in range(cfg.epochs):
        if cfg.set_epoch:
            sampler.set_epoch(epoch)  # reseeds the shuffle: without it every epoch repeats epoch 0's order
        order = list(sampler)
        orders.append(order[:cfg.show] if cfg.show else order)
        total = torch.zeros(2, dtype=torch.float64, device=ctx.device)  # [sum of losses * samples, samples]
        limit = len(loader) - skip
        # Join lets ranks that run out of batches early shadow the others' all-reduces.
        with Join([ddp], enable=cfg.join):
            for i, (x, y) in enumerate(loader):
                if i >= limit:
                    break
                x, y = x.to(ctx.device), y.to(ctx.device)
                opt.zero_grad(set_to_none=True)
                loss = criterion(ddp(x), y)
                loss.backward()  # DDP all-reduces (averages) gradients during this call
                opt.step()
                total += torch.tensor([loss.item() * len(y), len(y)], dtype=torch.float64, device=ctx.device)
        batches.append(min(limit, len(loader)))
        # The loss a learner should see is the whole epoch's, over ALL ranks, not rank 0's last batch.
        dist.all_reduce(total)
        losses.append(total[0].item() / total[1].item())
        runtime.progress(epoch + 1, cfg.epochs, desc=f"DDP on {ctx.world_size} ranks", loss=losses[-1])
        if ctx.rank == 0:
            runtime.rank_print(f"epoch {epoch}: loss {losses[-1]:.4f} (mean over {int(total[1].item())} samples)")

    out = dict(init_sum_before_wrap=before, init_sum_after_wrap=after, data_sha=fingerprint(dataset.tensors[0]),
               article_data_sha=fingerprint(article_data), per_rank=len(sampler), total_size=sampler.total_size,
               orders=orders, epoch_loss=losses, batches=batches,
               final_sha=fingerprint(torch.cat([p.detach().reshape(-1) for p in model.parameters()])))
    if cfg.save:
        out.update(save_and_reload(ddp, cfg.save, ctx))
    return out


def save_and_reload(ddp: DDP, path: str, ctx: runtime.Context) -> dict:
    """Rank 0 writes ``ddp.module.state_dict()``; after a barrier every rank loads and compares."""
    if ctx.rank == 0:
        # .module: the plain model's keys ("0.weight"), loadable without DDP;
        # ddp.state_dict() would save "module.0.weight".
        torch.save(ddp.module.state_dict(), path)
    dist.barrier()  # nobody reads the file before rank 0 has finished writing it
    loaded = torch.load(path, map_location=ctx.device, weights_only=True)
    mine = ddp.module.state_dict()
    return dict(saved_keys=sorted(loaded), ddp_keys=sorted(ddp.state_dict()),
                loaded_equal=loaded.keys() == mine.keys() and all(torch.equal(loaded[k], mine[k]) for k in mine))


class WithUnusedLayer(nn.Module):
    """The article's model plus a layer ``forward`` never calls (think: a head used only sometimes)."""

    def __init__(self):
        super().__init__()
        self.body = article_model()
        self.unused = nn.Linear(10, 10)

    def forward(self, x):
        return self.body(x)


def unused_demo(cfg: DDPConfig, ctx: runtime.Context) -> dict:
    """Two steps without ``find_unused_parameters`` (fails at step 2), then with it (works)."""
    x = torch.randn(cfg.batch_size, 10, generator=torch.Generator().manual_seed(cfg.seed)).to(ctx.device)
    out = {}
    for flag in (False, True):
        torch.manual_seed(cfg.seed)
        ddp = wrap(WithUnusedLayer().to(ctx.device), ctx, find_unused_parameters=flag)
        try:
            for step in range(2):
                ddp(x).sum().backward()
            out[f"find_unused_{flag}"] = "ok"
        except RuntimeError as e:  # raised on every rank alike, before any mismatched collective
            out[f"find_unused_{flag}"] = f"RuntimeError at step {step}: {str(e).split('. ')[0]}."
        del ddp  # drop the reducer (and its hooks) before the next wrap
    return out


def run(cfg: DDPConfig) -> None:
    with runtime.setup() as ctx:
        runtime.report(**(unused_demo(cfg, ctx) if cfg.unused_demo else train(cfg, ctx)))


main = cli(DDPConfig, run)  # the command line is derived from DDPConfig's fields


if __name__ == "__main__":
    main()
