"""Solution to Exercise 4.2 (chapter 4): bucketed gradient all-reduce, overlapped with backward.

Check it from a notebook or a shell::

    from disttutor.checks.ddp import check_bucketed_ddp
    print(check_bucketed_ddp("solutions/ex4_2_bucketed_ddp.py"))

Self-contained on purpose: the checker runs this file's source on every rank.
Same algorithm as :class:`disttutor.scratch.ddp.BucketedDDP`.
"""
import torch
import torch.distributed as dist


class OverlappedDDP:
    """Hooks launch one async all-reduce per full bucket during backward; ``finish()`` waits."""

    def __init__(self, model: torch.nn.Module, bucket_cap: int):
        from disttutor.scratch.buckets import plan_buckets

        self.world = dist.get_world_size()
        params = [p for p in model.parameters() if p.requires_grad]  # a frozen parameter takes no hook
        self.buckets = plan_buckets(params, bucket_cap)  # reverse order: the last layer's grads come first
        self.bucket_of = {id(p): k for k, b in enumerate(self.buckets) for p in b}
        self.missing = [len(b) for b in self.buckets]    # gradients each bucket still waits for
        self.next = 0                                    # the next bucket to launch
        self.handles = []                                # (bucket index, flat tensor, work handle)
        for p in params:
            p.register_post_accumulate_grad_hook(self.grad_ready)

    def grad_ready(self, p: torch.Tensor) -> None:
        self.missing[self.bucket_of[id(p)]] -= 1
        # Launch in bucket order only: every rank must start the same collectives in the same order.
        while self.next < len(self.buckets) and self.missing[self.next] == 0:
            flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[self.next]])
            self.handles.append((self.next, flat, dist.all_reduce(flat, async_op=True)))
            self.next += 1

    def finish(self) -> None:
        # Buckets holding a parameter this step did not use never completed: launch them now,
        # in order, with zeros for the missing gradients (every rank skipped the same ones).
        while self.next < len(self.buckets):
            flat = torch.cat([q.grad.reshape(-1) if q.grad is not None else q.new_zeros(q.numel())
                              for q in self.buckets[self.next]])
            self.handles.append((self.next, flat, dist.all_reduce(flat, async_op=True)))
            self.next += 1
        for k, flat, work in self.handles:
            work.wait()  # the sum is only in `flat` once the collective has completed
            flat.div_(self.world)
            offset = 0
            for q in self.buckets[k]:
                if q.grad is not None:  # an unused parameter keeps no gradient, as in one process
                    q.grad.copy_(flat[offset:offset + q.numel()].view_as(q.grad))
                offset += q.numel()
        self.missing = [len(b) for b in self.buckets]
        self.next, self.handles = 0, []
