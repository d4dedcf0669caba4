"""ZeRO stage 1 from scratch: each rank keeps optimiser state for its shard of the parameters only.

Introduced in chapter 11 (Exercise 11.1 rebuilds it). The shape is torch's
``ZeroRedundancyOptimizer``: ``ZeroOne(params, torch.optim.AdamW, lr=..., ...)``
is itself a ``torch.optim.Optimizer``; the real optimiser of this rank's shard
is ``.optim``.

Every rank still holds all parameters and all (already averaged, e.g. by DDP)
gradients; what is split is Adam's ``exp_avg`` and ``exp_avg_sq`` -- 8 of the
16 bytes per parameter. After its local step a rank owns the only up-to-date
copy of its parameters, so each parameter is broadcast from its owner.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def partition(params: list[torch.Tensor], world: int) -> list[int]:
    """Owner rank of each parameter: largest first, each to the least-loaded rank so far.

    Deterministic (same input order and sizes on every rank), so all ranks agree on the owners
    without talking -- the broadcasts below are matched by call order, a disagreement would
    pair different tensors (wrong values) or different sizes (an error or a hang).
    """
    load, owner = [0] * world, [0] * len(params)
    for i in sorted(range(len(params)), key=lambda i: -params[i].numel()):  # stable: ties keep order
        r = min(range(world), key=lambda r: load[r])
        owner[i], load[r] = r, load[r] + params[i].numel()
    return owner


class ZeroOne(torch.optim.Optimizer):
    def __init__(self, params, optimizer_class: type[torch.optim.Optimizer], **defaults):
        params = list(params)
        super().__init__(params, defaults)  # param_groups over ALL params (schedulers see the usual object)
        seen: set[int] = set()
        # A tied weight may be listed twice by a caller: one tensor, one owner, one broadcast.
        self._params = [p for p in self.param_groups[0]["params"] if not (id(p) in seen or seen.add(id(p)))]
        # Frozen parameters never change: no owner, no state, no broadcast.
        self._params = [p for p in self._params if p.requires_grad]
        self.rank, world = dist.get_rank(), dist.get_world_size()
        self.owner = partition(self._params, world)
        mine = [p for p, r in zip(self._params, self.owner) if r == self.rank]
        # The only optimiser that allocates state: it sees this rank's shard only.
        # (An empty shard is legal -- more ranks than parameters -- but torch refuses an empty list.)
        self.optim = optimizer_class(mine or [torch.zeros(0, requires_grad=True)], **defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for g in self.optim.param_groups:  # hyperparameters changed on us (a scheduler) reach the shard
            g.update({k: v for k, v in self.param_groups[0].items() if k != "params"})
        self.optim.step()
        for p, r in zip(self._params, self.owner):
            # Every rank calls broadcast for every parameter in the same order: the owner sends
            # its freshly stepped values, everyone else overwrites its stale copy.
            dist.broadcast(p.data, src=r)
        return loss

    def zero_grad(self, set_to_none: bool = True):
        super().zero_grad(set_to_none)  # all params' grads, not just the shard's
