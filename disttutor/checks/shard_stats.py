"""Checker for Exercise 1.2 (chapter 1): the mean and variance of every rank's samples, from shards.

The learner writes ``global_stats(x_local)``: run on every rank with that rank's own shard
(``x_local``, shape ``(n_r, 3)``, ``n_r`` different on each rank, possibly 0), it returns
``(mean, var)`` over *all* ranks' samples (shape ``(3,)`` each; the variance divides by the
total count, ``correction=0``), the same on every rank, without changing ``x_local``.

Rank side (``python -m disttutor.checks.shard_stats --source F --name global_stats``): every
rank builds every rank's shard (seeded), so each can compute the single-process answer on the
concatenated data and the numbers each realistic slip would give, and name the slip it sees.
The learner's collectives are watched (:mod:`disttutor.checks.calls`): ranks that disagree on a
collective stop at once with a message naming them, never a hang.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from disttutor.contract.options import cli, opt
from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, run_check

#: Shard sizes per world size: uneven everywhere, one rank empty, one rank with a single sample.
SIZES = {2: ((3, 13),), 3: ((5, 0, 12), (9, 1, 4))}
D = 3  # features per sample
#: float32 sums of squares vs the float64 mean and variance of the concatenated data: the
#: learner's float32 partial sums round at ~1e-7 relative, and E[x^2] - mean^2 cancels about
#: 8x here (means up to 5, variances near 4): ~1e-6 relative. 1e-4 is 100x headroom, while every
#: slip this checker names is off by more than 3e-2 (tests/test_ch01_why_distributed.py).
RTOL = 1e-4


def shard(sizes: tuple[int, ...], case: int, rank: int):
    """Rank ``rank``'s samples in one case: each rank's own offset and spread (its data differ)."""
    import torch

    g = torch.Generator().manual_seed(1000 * case + rank)
    x = torch.randn(sizes[rank], D, generator=g, dtype=torch.float64)
    return (x * (1.0 + 0.5 * rank) + 1.0 + 1.5 * rank + torch.arange(D) * 0.5).float()


def _err(got, want) -> float:
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-12))


def _near(got, want) -> bool:
    return bool(_err(got, want) <= RTOL)  # also False for NaN


def _parse(out) -> tuple[Any, Any] | str:
    import torch

    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        return f"return (mean, var), two tensors; got {type(out).__name__}"
    if any(tuple(t.shape) != (D,) for t in out):
        return (f"return (mean, var), each of shape ({D},) (one value per feature); got shapes "
                f"{[tuple(t.shape) for t in out]}")
    return tuple(t.detach().double() for t in out)


def diagnose(out, shards, rank: int, world: int, rank0_right: bool | None, calls: list[str]) -> str | None:
    """None if ``out`` is the full data's (mean, var), else the slip it looks like, in words."""
    import torch

    parsed = _parse(out)
    if isinstance(parsed, str):
        return parsed
    mean, var = parsed
    sizes = [len(s) for s in shards]
    x = torch.cat(shards).double()
    n, mu, v = len(x), x.mean(0), x.var(0, correction=0)
    if _near(mean, mu) and _near(var, v):
        return None
    j = int((mean - mu).abs().argmax()) if not _near(mean, mu) else int((var - v).abs().argmax())
    full = [s.double() for s in shards if len(s)]
    if rank != 0 and rank0_right and "reduce" in calls:
        return (f"rank 0 has the right mean and variance, this rank has mean[{j}] = {mean[j]:.4g} (want "
                f"{mu[j]:.4g}): dist.reduce leaves the sum on its dst only (the others keep partial sums). "
                "Every rank needs the statistics: dist.all_reduce")
    if torch.isnan(mean).any() and 0 in sizes:
        return (f"mean[{j}] is nan: rank {sizes.index(0)} holds no samples, and the mean of no samples is 0/0. "
                "Add up sums and counts over the ranks (an empty shard adds 0 to both), then divide")
    if not _near(mean, mu):
        mom = torch.stack([s.mean(0) for s in full]).mean(0)
        if _near(mean, mom):
            return (f"mean[{j}] is {mean[j]:.4g}, the mean of all {n} samples is {mu[j]:.4g} (off by "
                    f"{abs(mean[j] - mu[j]):.3g}): that is the average of the ranks' means, which gives each "
                    f"rank's mean the same weight; with shards of {', '.join(map(str, sizes))} samples each "
                    "sample must count once: add up sums and counts over the ranks, then divide")
        if sizes[rank] and _near(mean, x.sum(0) / (sizes[rank] * world)):
            return (f"mean[{j}] is {mean[j]:.4g}, want {mu[j]:.4g}: you divided the global sum by this rank's "
                    f"{sizes[rank]} samples x {world} ranks = {sizes[rank] * world}, but the ranks hold {n} in "
                    "all (shards are uneven): all-reduce the count too")
        return (f"mean[{j}] is {mean[j]:.4g}, the mean of all {n} samples is {mu[j]:.4g} -- did every rank's sum "
                "reach every rank, divided by the total count?")
    if _near(var, torch.stack([s.var(0, correction=0) for s in full]).mean(0)):
        return (f"var[{j}] is {var[j]:.4g}, the variance of all {n} samples is {v[j]:.4g}: that is the average "
                "of the ranks' variances, which leaves out how far each shard's mean lies from the global mean "
                "(the shards' means differ). Add up sums of squares over the ranks, not variances")
    if n > 1 and _near(var, v * n / (n - 1)):
        return (f"var[{j}] is {var[j]:.4g}, want {v[j]:.4g}: you divided by N-1 = {n - 1}; this exercise's "
                f"variance divides by the total count N = {n}")
    return (f"var[{j}] is {var[j]:.4g}, the variance of all {n} samples is {v[j]:.4g} -- the mean is right: were "
            "the sums of squares added over all ranks and divided by the total count?")


@dataclass(frozen=True)
class StatsCheckConfig(LearnerCode):
    pass


def _check(fn: Callable, rank: int, world: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from disttutor.checks.calls import Mismatch, Watch

    with Watch() as watch:
        for case, sizes in enumerate(SIZES[world]):
            shards = [shard(sizes, case, r) for r in range(world)]
            x = shards[rank].clone()
            watch.at(f"shards of {', '.join(map(str, sizes))} samples")
            start, raised = len(watch.calls), None
            try:
                out = fn(x)
            except Mismatch as e:
                return {"passed": False, "problem": str(e)}
            except Exception as e:  # say it to the other ranks too, so nobody waits for this one
                raised = f"your function raised {type(e).__name__}: {e} ({watch.where}, rank {rank})"
            try:
                watch.agree(raised or "returned")
            except Mismatch as e:
                return {"passed": False, "problem": raised or str(e)}
            if raised:
                return {"passed": False, "problem": raised}
            calls = [c["name"] for c in watch.since(start)]
            if not torch.equal(x, shards[rank]):
                i = (x != shards[rank]).nonzero()[0].tolist()
                return {"passed": False, "problem": (
                    f"{watch.where}: your function changed the tensor it was given (x_local{i} was "
                    f"{shards[rank][tuple(i)]:.4g}, is {x[tuple(i)]:.4g}): the caller's data is not yours -- "
                    "`-=`, `**=` and methods ending in `_` work in place; compute new tensors instead")}
            right = diagnose(out, shards, rank, world, None, calls) is None
            everyone: list[Any] = [None] * world
            dist.all_gather_object(everyone, right)  # the checker's own: is rank 0 right?
            problem = None if right else diagnose(out, shards, rank, world, everyone[0], calls)
            if problem:
                return {"passed": False, "problem": f"{watch.where}: {problem}"}
            if not all(everyone):
                return {"passed": True, "note": "other ranks went wrong"}
    return {"passed": True, "cases": len(SIZES[world])}


def run(cfg: StatsCheckConfig) -> None:
    from disttutor.rank import runtime
    from disttutor.checks.adapter import load_exercise

    with runtime.setup() as ctx:
        if ctx.world_size not in SIZES:
            raise ValueError(f"Exercise 1.2's checker runs on {sorted(SIZES)} ranks, not {ctx.world_size}")
        runtime.report(**_check(load_exercise(cfg.source, cfg.name), ctx.rank, ctx.world_size))


def check_global_stats(fn: Callable | str, timeout: float = JOB_TIMEOUT_S) -> CheckResult:
    """Exercise 1.2: does ``fn(x_local)`` return every rank's (mean, var) of all samples, on 2 and 3 ranks?"""
    details: list[dict[str, Any]] = []
    for n in sorted(SIZES):
        res = run_check("1.2", "disttutor.checks.shard_stats", fn, function_name(fn, "global_stats"), n,
                        timeout=timeout, collective_timeout=10.0, hint=(
                            "a rank waited for a collective the others never called: every rank must call the "
                            "same collectives in the same order"))
        details += res.details
        if not res.passed:
            stub = [p for p in res.problems if p.startswith("still a stub")]
            return CheckResult("1.2", False, stub or [f"with {n} ranks, {p}" for p in res.problems], details)
    return CheckResult("1.2", True, [], details)


main = cli(StatsCheckConfig, run)

if __name__ == "__main__":
    main()
