"""Every collective the course uses, run once on real ranks (chapter 2).

Rank ``r`` starts from ``x = [10r+1, 10r+2, ...]`` (``size`` elements) and
each operation reports its tensor before and after, so the notebook can show
and assert a rank-sorted table per collective. Same code on NCCL (GPUs) and
gloo (CPU): only the device differs.

``reduce_scatter`` is detected live: if the backend lacks it, the program
says so and shows the equivalent (an all-reduce, then each rank keeps its
own slice). ``--deadlock`` pairs ranks up and makes both call a blocking
``send`` first: nobody is receiving, so both wait until the collective
timeout (the bug the ring all-reduce avoids with ``isend``/``irecv``)::

    python -m torch.distributed.run --nproc-per-node 4 -m disttutor.programs.collectives
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from disttutor.rank import runtime
from disttutor.contract.config import require_non_negative, require_positive
from disttutor.contract.options import cli, opt

OPS = ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter", "gather", "scatter",
       "all_to_all", "send_recv", "isend_irecv", "barrier")


@dataclass(frozen=True)
class CollectivesConfig:
    ops: tuple[str, ...] = opt(OPS, f"collectives to run, of {', '.join(OPS)}")
    size: int = opt(2, "elements per rank")
    barrier_stagger: float = opt(0.2, "rank r sleeps r * this many seconds before the barrier")
    deadlock: bool = opt(False, "demo: two blocking sends facing each other")

    def __post_init__(self):
        unknown = [o for o in self.ops if o not in OPS]
        if unknown or not self.ops:
            raise ValueError(f"unknown op(s) {unknown or self.ops}; choose from {', '.join(OPS)}")
        require_positive(self, "size")
        require_non_negative(self, "barrier_stagger")


def start(rank: int, size: int, device: torch.device, k: int = 1) -> torch.Tensor:
    """Rank ``rank``'s starting tensor: ``10*rank + 1, 10*rank + 2, ...`` (``k * size`` elements)."""
    return (10.0 * rank + torch.arange(1, k * size + 1, dtype=torch.float32)).to(device)


def has_reduce_scatter(device: torch.device) -> bool:
    """Ask the backend itself (a tiny real call): does it implement reduce_scatter?"""
    n = dist.get_world_size()
    out = torch.zeros(1, device=device)
    try:
        dist.reduce_scatter_single(out, torch.ones(n, device=device))
    except (RuntimeError, NotImplementedError, ValueError):
        return False
    return True


def run_op(op: str, ctx: runtime.Context, cfg: CollectivesConfig) -> dict:
    """Run one collective; return this rank's before/after (``None`` = unspecified/none).

    Each collective's lines sit in a ``# [teach NAME]`` region: chapter 2 shows them beside the
    picture of the data they moved. The names are torch 2.13's: ``all_gather_single`` and
    ``reduce_scatter_single`` (older code says ``all_gather_into_tensor`` / ``reduce_scatter_tensor``,
    deprecated aliases of the same calls, or the private ``_all_gather_base`` / ``_reduce_scatter_base``).
    """
    r, n, dev, size = ctx.rank, ctx.world_size, ctx.device, cfg.size
    x = start(r, size, dev)
    before, extra = x.tolist(), {}
    if op == "broadcast":
        # [teach broadcast]
        dist.broadcast(x, src=0)                    # everybody gets rank 0's tensor, in place
        # [/teach broadcast]
        after = x.tolist()
    elif op == "reduce":
        # [teach reduce]
        dist.reduce(x, dst=0)                       # the sum, on rank 0 only
        # [/teach reduce]
        after = x.tolist() if r == 0 else None      # other ranks' buffers are unspecified afterwards
    elif op == "all_reduce":
        # [teach all_reduce]
        dist.all_reduce(x)                          # the sum, on every rank, in place
        # [/teach all_reduce]
        after = x.tolist()
    elif op == "all_gather":
        # [teach all_gather]
        out = torch.empty(n * size, device=dev)
        dist.all_gather_single(out, x)              # rank i's x lands in slice i of every rank's out
        # [/teach all_gather]
        after = out.tolist()
    elif op == "reduce_scatter":
        x = start(r, size, dev, k=n)                # n chunks; chunk i of the sum goes to rank i
        before = x.tolist()
        native = has_reduce_scatter(dev)
        # [teach reduce_scatter]
        out = torch.empty(size, device=dev)         # one chunk: x holds n of them
        dist.reduce_scatter_single(out, x)          # rank i gets chunk i of the sum over ranks
        # [/teach reduce_scatter]
        # The equivalent with what every backend has: all-reduce (which *is*
        # reduce-scatter + all-gather) and keep my slice. Twice the traffic.
        full = x.clone()
        dist.all_reduce(full)
        equiv = full.tensor_split(n)[r]
        after = out.tolist() if native else equiv.tolist()
        extra = {"native": native, "equivalent": equiv.tolist()}
    elif op == "gather":
        # [teach gather]
        outs = [torch.empty(size, device=dev) for _ in range(n)] if r == 0 else None
        dist.gather(x, gather_list=outs, dst=0)     # only rank 0 receives: everybody's x, in rank order
        # [/teach gather]
        after = torch.cat(outs).tolist() if r == 0 else None
    elif op == "scatter":
        x = start(r, size, dev, k=n)
        before = x.tolist() if r == 0 else None     # only rank 0's input is read
        # [teach scatter]
        out = torch.empty(size, device=dev)
        chunks = list(x.tensor_split(n)) if r == 0 else None
        dist.scatter(out, scatter_list=chunks, src=0)   # rank i gets chunk i of rank 0's x
        # [/teach scatter]
        after = out.tolist()
    elif op == "all_to_all":
        x = start(r, size, dev, k=n)                # n chunks: chunk j is addressed to rank j
        before = x.tolist()
        # [teach all_to_all]
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x)              # chunk j of rank i -> chunk i of rank j (a transpose)
        # [/teach all_to_all]
        after = out.tolist()
    elif op == "send_recv":
        # Pairs (0,1), (2,3): blocking send/recv is safe because in every pair
        # one side sends while the other receives.
        if r % 2 == 0 and r + 1 < n:
            dist.send(x, dst=r + 1)
        elif r % 2 == 1:
            dist.recv(x, src=r - 1)
        after = x.tolist()
    elif op == "isend_irecv":
        # Ring shift: everybody sends right AND receives from the left at the
        # same time. Posting both before waiting is what keeps it from deadlocking.
        got = torch.empty_like(x)
        reqs = [dist.isend(x, dst=(r + 1) % n), dist.irecv(got, src=(r - 1) % n)]
        for q in reqs:
            q.wait()
        after = got.tolist()
    elif op == "barrier":
        time.sleep(r * cfg.barrier_stagger)         # ranks arrive at different times...
        t0 = time.perf_counter()
        dist.barrier()                              # ...and leave together
        extra = {"waited_s": time.perf_counter() - t0}
        after = x.tolist()
    else:  # pragma: no cover - the config already rejected it
        raise ValueError(op)
    return {"before": before, "after": after, **extra}


def deadlock(ctx: runtime.Context, size: int) -> None:
    """Pairs (0,1), (2,3): BOTH call the blocking ``send`` first. Nobody reaches ``recv``."""
    peer = ctx.rank ^ 1
    if peer >= ctx.world_size:
        return
    x, got = start(ctx.rank, size, ctx.device), torch.empty(size, device=ctx.device)
    runtime.rank_print(f"rank {ctx.rank}: send to {peer}, then recv from {peer}")
    dist.send(x, dst=peer)   # waits for the peer to post a recv -- it never will
    dist.recv(got, src=peer)


def run(cfg: CollectivesConfig) -> None:
    with runtime.setup() as ctx:
        if cfg.deadlock:
            deadlock(ctx, cfg.size)
        for i, op in enumerate(cfg.ops):
            runtime.report(**{op: run_op(op, ctx, cfg)})
            runtime.progress(i + 1, len(cfg.ops), desc="collectives")
        runtime.report(backend=ctx.backend, device=str(ctx.device))


main = cli(CollectivesConfig, run)  # the command line is derived from CollectivesConfig's fields


if __name__ == "__main__":
    main()
