"""Solution to Exercise 11.1 (chapter 11): ZeRO stage 1 -- shard the optimiser state, broadcast the updates.

Check it from a notebook or a shell::

    from disttutor.checks.sharding import check_zero1
    print(check_zero1("solutions/ex11_1_zero1.py"))

Self-contained on purpose: the checker runs this file's source on every rank. Same idea as
:class:`disttutor.scratch.zero1.ZeroOne`, with a simpler (round-robin) choice of owners.
"""
import torch
import torch.distributed as dist


class ZeroOne(torch.optim.Optimizer):
    def __init__(self, params, optimizer_class, **defaults):
        params = list(params)
        super().__init__(params, defaults)
        unique = []
        for p in params:
            # tied weights may be listed twice; frozen ones never change, so nobody owns them
            if p.requires_grad and all(p is not q for q in unique):
                unique.append(p)
        world, rank = dist.get_world_size(), dist.get_rank()
        # Round robin by position: every rank computes the same owners from the same list.
        self.owners = [(p, i % world) for i, p in enumerate(unique)]
        mine = [p for p, owner in self.owners if owner == rank]
        # Only this optimiser creates state, and only for this rank's parameters.
        self.optim = optimizer_class(mine if mine else [torch.zeros(0, requires_grad=True)], **defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None if closure is None else closure()
        self.optim.step()
        for p, owner in self.owners:  # same calls, same order, on every rank
            dist.broadcast(p, src=owner)
        return loss
