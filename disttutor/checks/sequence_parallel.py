"""Checker for Exercise 12.2 (chapter 12): sequence parallelism's all-gather, with its backward.

The learner writes ``GatherSeq``, a ``torch.autograd.Function``: ``forward(ctx, shard)`` all-gathers
the ranks' sequence shards (``[seq/t, batch, dim]``, the sequence first) into the whole sequence in
rank order; ``backward(ctx, grad)`` reduce-scatters the whole sequence's gradient: the SUM over the
ranks of the gradients of this rank's rows.

Rank side (``python -m disttutor.checks.sequence_parallel --source F --name GatherSeq``), on 2 and
on 4 gloo ranks:

1. forward on distinct, known shards: the shape (a gather along the wrong dimension), then where
   each rank's rows landed (named by rank); the same for a non-contiguous shard;
2. backward of a different, known gradient on every rank: against the reduce-scatter's result, and
   against the usual slips -- this rank's own slice (no sum over ranks), the sum divided by the
   world size, another rank's rows, a gradient shaped like the whole sequence; again with a
   non-contiguous gradient (a list of chunks of it reduce-scatters the wrong numbers); an
   all-reduce in backward gives the right numbers with twice the bytes, and is named as such;
3. a tiny SP block (LayerNorm, column- and row-parallel MLP, residual) with the learner's gather,
   whose output and input gradient are compared with the unsplit block in one process.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, run_check
from disttutor.checks.tolerances import SPLIT_TENSOR_ATOL  # a split contraction's rounding: why 1e-4 there
from disttutor.contract.options import cli

COLLECTIVE_TIMEOUT_S = 10.0
S, B, D, H = 3, 2, 4, 8   # tokens per rank (odd), batch, model width, hidden width (split over t <= 4)


@dataclass(frozen=True)
class GatherSeqCheck(LearnerCode):
    pass


def _strided(t):
    """The same values, not contiguous: a [batch, seq, dim] tensor's memory read as [seq, batch, dim]."""
    return t.transpose(0, 1).contiguous().transpose(0, 1)


def _rows_problem(got, want, shards, rank: int) -> str | None:
    """Where each rank's rows landed in a gathered tensor of the right shape."""
    s = shards[0].shape[0]
    for k, shard in enumerate(shards):
        at = []
        for i in range(s):
            hits = [j for j in range(got.shape[0]) if (got[j] - shard[i]).abs().max().item() == 0]
            at.append(hits[0] if hits else None)
        if at != list(range(k * s, (k + 1) * s)):
            where = "nowhere" if all(a is None for a in at) else "at rows " + ", ".join(
                "missing" if a is None else str(a) for a in at)
            return (f"forward on rank {rank}: rank {k}'s {s} rows are {where}, expected rows {k * s}-{k * s + s - 1}: "
                    "the gathered sequence holds the shards one after another, in rank order")
    return None


def _forward_problem(G, shards, rank: int, world: int) -> str | None:
    want = torch.cat(shards)
    for contiguous in (True, False):
        x = shards[rank].clone() if contiguous else _strided(shards[rank])
        got = G.apply(x.requires_grad_())
        kind = "" if contiguous else " for a non-contiguous shard (a transposed view)"
        if tuple(got.shape) != tuple(want.shape):
            dims = [d for d in range(want.dim()) if tuple(got.shape) == tuple(torch.cat(shards, d).shape)]
            why = (f": that is a gather along dim {dims[0]}; the sequence is dim 0 of [seq, batch, dim]" if dims
                   else ": the shards one after another along dim 0, the sequence")
            return f"forward{kind} returned shape {list(got.shape)}, expected {list(want.shape)}{why}"
        problem = _rows_problem(got.detach(), want, shards, rank)
        if problem:
            return problem if contiguous else (
                f"right for a contiguous shard, wrong{kind}: {problem} -- make it contiguous before the collective")
    return None


def _backward_problem(G, shards, grads, rank: int, world: int) -> str | None:
    import re

    from disttutor.tensor_parallel.counting import recording

    s = shards[0].shape[0]
    mine = slice(rank * s, (rank + 1) * s)
    want = sum(g[mine] for g in grads)
    for contiguous in (True, False):
        x = shards[rank].clone().requires_grad_()
        full = G.apply(x)
        g = grads[rank].clone() if contiguous else _strided(grads[rank])
        kind = "" if contiguous else " for a non-contiguous incoming gradient"
        with recording() as rec:
            try:
                full.backward(g)
            except RuntimeError as e:   # autograd checks the shape: say it with the exercise's words
                m = re.search(r"got \[([\d, ]*)\] but expected shape compatible with \[([\d, ]*)\]", str(e))
                if not m:
                    raise
                return (f"backward{kind} returned a gradient of shape [{m.group(1)}] for a shard of shape "
                        f"[{m.group(2)}]: a gradient is shaped like its input -- gathering the gradient again "
                        "gives the whole sequence; keep only this rank's rows, summed over the ranks")
        got = x.grad
        if got is None:
            return "backward returned no gradient for the shard"
        if (got - want).abs().max().item() <= SPLIT_TENSOR_ATOL:
            if "all_reduce" in rec.counts():
                return (f"backward{kind} gives the right numbers with an all-reduce: every rank receives the "
                        f"whole sequence's sum and keeps 1/{world} of it -- twice the bytes of a reduce-scatter, "
                        "which sends each rank only its own rows' sum")
            continue
        if not contiguous:
            return (f"right for a contiguous gradient, wrong{kind} (autograd may hand backward a transposed or "
                    "expanded gradient, and a list of chunks of one reduce-scatters the wrong numbers): make it "
                    "contiguous before the collective")
        close = lambda t: (got - t).abs().max().item() <= SPLIT_TENSOR_ATOL  # noqa: E731
        if close(grads[rank][mine]):
            others = "the other rank adds its" if world == 2 else f"the other {world - 1} ranks add their"
            return (f"backward on rank {rank} returned its own gradient's rows {mine.start}-{mine.stop - 1} only: "
                    f"too small: {others} contributions. Every rank used the whole gathered sequence, so these "
                    "rows' gradient is the sum over ranks: a reduce-scatter")
        if close(want / world):
            return (f"backward divides by the world size ({world}): the ranks' contributions to a token's "
                    "gradient add up (each rank's hidden units used it); they are summed, not averaged")
        other = [k for k in range(world) if k != rank and close(sum(g[k * s:(k + 1) * s] for g in grads))]
        if other:
            return (f"backward on rank {rank} returned the summed gradient of rank {other[0]}'s rows: a "
                    f"reduce-scatter gives rank r the r-th block (rows {mine.start}-{mine.stop - 1} here)")
        return (f"backward on rank {rank} differs from the sum over ranks of the gradient of its rows by "
                f"{(got - want).abs().max().item():.3g}")
    return None


class _ScatterSeq(torch.autograd.Function):
    """The partner op (reduce-scatter forward, all-gather backward): the checker's own."""

    @staticmethod
    def forward(ctx, partial):
        world = dist.get_world_size()
        out = partial.new_empty((partial.shape[0] // world, *partial.shape[1:]))
        dist.reduce_scatter_single(out, partial.contiguous())
        return out

    @staticmethod
    def backward(ctx, grad):
        full = grad.new_empty((grad.shape[0] * dist.get_world_size(), *grad.shape[1:]))
        dist.all_gather_single(full, grad.contiguous())
        return full


def _block_problem(G, rank: int, world: int) -> str | None:
    """A tiny SP block with the learner's gather against the unsplit block in one process."""
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(3)
    ln, fc1, fc2 = nn.LayerNorm(D), nn.Linear(D, H), nn.Linear(H, D)
    x = torch.randn(S * world, B, D, requires_grad=True)
    coef = torch.randn(S * world, B, D)    # a different weight per output: every row's gradient differs
    ref = x + fc2(F.gelu(fc1(ln(x))))      # one process, the whole sequence
    (ref * coef).sum().backward()
    mine, cols = slice(rank * S, (rank + 1) * S), slice(rank * H // world, (rank + 1) * H // world)
    xs = x.detach()[mine].clone().requires_grad_()
    h = G.apply(ln(xs))                                                  # all-gather: the column layer needs all
    partial = F.linear(F.gelu(F.linear(h, fc1.weight[cols], fc1.bias[cols])), fc2.weight[:, cols])
    out = xs + _ScatterSeq.apply(partial) + fc2.bias              # reduce-scatter: summed, my tokens
    (out * coef[mine]).sum().backward()
    for what, got, want in (("output", out, ref[mine]), ("input gradient", xs.grad, x.grad[mine])):
        diff = (got - want).abs().max().item()
        if not diff <= SPLIT_TENSOR_ATOL:   # also NaN
            return (f"in an SP block (LayerNorm, column- and row-parallel MLP) on {world} ranks, rank {rank}'s "
                    f"{what} differs from the unsplit block's by {diff:.3g}")
    return None


def _run(cfg: GatherSeqCheck) -> None:
    from disttutor.checks.adapter import load_exercise
    from disttutor.rank import runtime

    with runtime.setup() as ctx:
        G = load_exercise(cfg.source, cfg.name)
        rank, world = ctx.rank, ctx.world_size
        shards = [torch.randn(S, B, D, generator=torch.Generator().manual_seed(10 + k)) for k in range(world)]
        grads = [torch.randn(S * world, B, D, generator=torch.Generator().manual_seed(20 + k)) for k in range(world)]
        problem = (_forward_problem(G, shards, rank, world) or _backward_problem(G, shards, grads, rank, world)
                   or _block_problem(G, rank, world))
        runtime.report(passed=problem is None, **({"problem": problem} if problem else {}))


def check_gather_seq(cls: Callable | str, nprocs: tuple[int, ...] = (2, 4),
                     timeout: float = JOB_TIMEOUT_S) -> CheckResult:
    """Exercise 12.2: ``GatherSeq`` -- all-gather forward, reduce-scatter backward -- on each of ``nprocs``."""
    res = CheckResult("12.2", False, ["no launch"])
    for n in nprocs:
        res = run_check("12.2", "disttutor.checks.sequence_parallel", cls, function_name(cls, "GatherSeq"), n,
                        timeout=timeout, collective_timeout=COLLECTIVE_TIMEOUT_S, hint=(
                            "a rank waits in a collective another rank never calls: forward and backward must "
                            "each call one collective, on every rank"))
        if not res.passed:
            return res
    return res


main = cli(GatherSeqCheck, _run)

if __name__ == "__main__":
    main()
