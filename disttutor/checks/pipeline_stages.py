"""Checker for Exercise 7.3 (chapter 7): split a model into PipelineStages and drive Schedule1F1B.

The learner writes ``pipeline_step(model, x, y, n_microbatches, loss_fn) -> (piece, losses)``: on
each rank it keeps that rank's contiguous share of ``model``'s blocks (an ``nn.Sequential`` the
same on every rank), wraps it in ``PipelineStage``, builds ``Schedule1F1B`` and runs one step (the
first rank feeds ``x``, the last ``y`` and collects the micro-batch losses). It returns the module
it kept and the losses (an empty list except on the last rank).

Rank side (``python -m disttutor.checks.pipeline_stages --source F --name pipeline_step``), on 2
and on 3 ranks (a middle stage: given neither input nor target), with a number of blocks that does
not divide evenly:

1. which blocks each rank kept (its parameters matched to the model's), gathered from every rank:
   none missing, none on two ranks, in order, balanced (sizes differ by at most one);
2. the last rank's losses: their mean against the same model's loss on the whole batch in one
   process; every kept parameter's gradient against that process's -- a factor of m (or 1/m)
   is named as the micro-batch averaging done twice or not at all;
3. a batch that does not split into the micro-batches must raise a ValueError on every rank.
torch's own errors for a stage not given its input, target or loss become a sentence.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from disttutor.contract.options import cli, opt
from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, run_check

#: Micro-batched vs whole-batch training of the same fp32 model: each micro-batch's mean and the
#: schedule's sum of m gradients (then / m) round in another order than one sum over the batch --
#: a few ulps: measured up to 2e-7 relative on 2 and 3 ranks. 1e-5 is 50x headroom; a real slip is
#: off by far more (a factor m for the averaging, a missing or repeated block: order 1).
MICROBATCH_RTOL = 1e-5
WIDTH = 8
SHAPES = {2: 5, 3: 7, 4: 7}   # ranks -> blocks: never a multiple, so the split is uneven (3 ranks: a middle stage)
BATCH, MICROBATCHES = 8, 4    # Schedule1F1B wants at least as many micro-batches as stages
COLLECTIVE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class PipelineStepCheck(LearnerCode):
    blocks: int = opt(5, "blocks of the sequential model")

    def __post_init__(self):
        super().__post_init__()
        if self.blocks < 1:
            raise ValueError("--blocks must be >= 1")


def _spans(kept: list[list[int]]) -> str:
    return ", ".join(f"rank {r} " + (f"{k[0]}-{k[-1]}" if len(k) > 1 and k == list(range(k[0], k[-1] + 1))
                                      else ",".join(map(str, k)) or "none") for r, k in enumerate(kept))


def split_problem(kept: list[list[int]], n: int) -> str | None:
    """What is wrong with the blocks each rank kept (a list per rank), or None."""
    held = {i: [r for r, k in enumerate(kept) if i in k] for i in range(n)}
    where = f"{n} blocks on {len(kept)} ranks, yours: {_spans(kept)}"
    missing = [i for i, rs in held.items() if not rs]
    if missing:
        return (f"{where} -- block{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} on no rank: "
                "the pieces must cover the whole model (the last rank takes the blocks up to the end)")
    both = [(i, rs) for i, rs in held.items() if len(rs) > 1]
    if both:
        i, rs = both[0]
        return (f"{where} -- block {i} is on ranks {' and '.join(map(str, rs))}: each block belongs to one stage "
                "(a slice's end is not included)")
    order = [i for k in kept for i in k]
    if order != list(range(n)):
        return f"{where} -- the pieces must be contiguous and in rank order (rank 0 the first blocks)"
    sizes = [len(k) for k in kept]
    if max(sizes) - min(sizes) > 1:
        return (f"{where} -- sizes {sizes}: a stage runs at its slowest stage's pace, so give every rank "
                f"{n // len(kept)} or {n // len(kept) + 1} blocks")
    return None


def _explain_error(e: Exception, rank: int, world: int) -> str | None:
    """A torch error a slip causes, in words; None for an echo of another rank's failure."""
    from disttutor.contract.errors import blame_of

    msg = f"{type(e).__name__}: {e}".strip().splitlines()[0]
    if blame_of(msg) != "self":
        return None
    if rank == 0 and "missing 1 required positional argument" in msg:
        return (f"the first stage ran without the input ({msg}): rank 0 hands the whole batch to "
                "schedule.step, which cuts it into micro-batches")
    if "target required for last stage" in msg or "loss_fn and target" in msg:
        return (f"the last stage got no loss or no target ({msg}): build Schedule1F1B with loss_fn, and on "
                f"rank {world - 1} pass target= (and losses=) to step")
    if "losses but got 0" in msg:
        return (f"the schedule computed no loss ({msg}): give Schedule1F1B the loss_fn -- the last stage "
                "computes it, and the backward starts there")
    return f"the function raised {msg}"[:400]


def _ratio(got, want) -> float | None:
    denom = (want * want).sum().item()
    if denom == 0:
        return None
    k = (got * want).sum().item() / denom
    return k if (got - k * want).abs().max().item() <= 1e-3 * want.abs().max().item() else None


def _grad_problem(piece, ref, kept: list[int], m: int, stats: dict) -> str | None:
    import torch

    params = list(piece.parameters())
    for i in kept:
        for name, q in ref[i].named_parameters():
            p = next((p for p in params if p.shape == q.shape and torch.equal(p.detach(), q.detach())), None)
            what = f"block {i}'s {name.replace('0.', 'linear.')}"
            if p is None:
                return f"your piece holds block {i}'s linear.weight but not its {name.replace('0.', 'linear.')}"
            if p.grad is None:
                return (f"{what} has no gradient: no backward ran on this stage (was the schedule given "
                        "loss_fn, and the last rank the target?)")
            err = (p.grad - q.grad).abs().max().item() / max(q.grad.abs().max().item(), 1e-12)
            stats["max_grad_rel_err"] = max(stats.get("max_grad_rel_err", 0.0), err)
            if err <= MICROBATCH_RTOL:
                continue
            k = _ratio(p.grad, q.grad)
            why = ""
            if k is not None and abs(k - m) < 1e-3 * m:
                why = (f" -- {m}x too large, {m} micro-batches: their gradients were summed and not divided by "
                       f"{m} (Schedule1F1B's scale_grads does that; leave it on)")
            elif k is not None and abs(k * m - 1) < 1e-3:
                why = (f" -- 1/{m} of it, {m} micro-batches: the averaging over micro-batches was done twice "
                       "(the loss divided by m, and the schedule's scale_grads divides again)")
            return (f"{what}'s gradient differs from one process on the whole batch by {err:.3g} (relative; "
                    f"allowed {MICROBATCH_RTOL:g}){why}")
    return None


def _one_step(fn: Callable, cfg: PipelineStepCheck, rank: int, world: int, stats: dict) -> str | None:
    import copy

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(cfg.blocks)])
    ref = copy.deepcopy(model)   # the same model, trained here in one process on the whole batch
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, WIDTH, generator=g)
    ref_loss = F.mse_loss(ref(x), y)
    ref_loss.backward()
    try:
        out = fn(model, x.clone(), y.clone(), MICROBATCHES, F.mse_loss)
    except Exception as e:
        problem = _explain_error(e, rank, world)
        if problem is None:
            raise  # another rank failed first: its report says why
        return problem
    try:
        piece, losses = out
        params = list(piece.parameters())
    except (TypeError, ValueError, AttributeError):
        return f"return (piece, losses): the nn.Module this rank kept and the list of losses, got {out!r}"[:300]
    kept = [i for i in range(cfg.blocks)
            if any(p.shape == ref[i][0].weight.shape and torch.equal(p.detach(), ref[i][0].weight.detach())
                   for p in params)]
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, kept)
    problem = split_problem(everyone, cfg.blocks)
    if problem:
        return problem
    if rank == world - 1:
        try:
            vals = [float(v) for v in losses]
        except (TypeError, ValueError):
            return f"the last stage: return the list the schedule filled as losses, got {losses!r}"[:300]
        if len(vals) != MICROBATCHES:
            return (f"the last stage returned {len(vals)} losses for {MICROBATCHES} micro-batches: "
                    "pass a list as step's losses= and return it")
        mean, want = sum(vals) / len(vals), ref_loss.item()
        if abs(mean - want) > MICROBATCH_RTOL * abs(want):
            why = (f" -- 1/{MICROBATCHES} of it: the loss was divided by the number of micro-batches, which the "
                   "schedule's scale_grads already does for the gradients") if abs(
                mean * MICROBATCHES - want) <= 1e-4 * want else ""
            return (f"the mean of the last stage's {MICROBATCHES} micro-batch losses is {mean:.6g}, one process "
                    f"on the whole batch gives {want:.6g}{why}")
    return _grad_problem(piece, ref, kept, MICROBATCHES, stats)


def _indivisible(fn: Callable, rank: int, world: int) -> str | None:
    import torch
    import torch.nn.functional as F
    from torch import nn

    rows = BATCH + 2
    model = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(world)])
    x, y = torch.randn(rows, WIDTH), torch.randn(rows, WIDTH)
    sizes = ", ".join(str(len(c)) for c in torch.arange(rows).tensor_split(MICROBATCHES))
    head = (f"a batch of {rows} rows with {MICROBATCHES} micro-batches (they would hold {sizes} rows, and the "
            "mean of their means is not the batch's mean)")
    try:
        fn(model, x, y, MICROBATCHES, F.mse_loss)
    except ValueError:
        return None
    except Exception as e:
        if _explain_error(e, rank, world) is None:
            raise
        return (f"{head} failed inside torch ({type(e).__name__}: {str(e).splitlines()[0][:120]}): check it "
                "first, on every rank, and raise a ValueError naming both numbers")
    return f"{head} ran without an error: raise a ValueError on every rank before building the stage"


def _run(cfg: PipelineStepCheck) -> None:
    import torch.distributed as dist

    from disttutor.checks.adapter import load_exercise
    from disttutor.rank import runtime

    with runtime.setup() as ctx:
        fn = load_exercise(cfg.source, cfg.name)
        # A rank with a problem reports it and stops; the others then fail waiting for it (an echo,
        # which the notebook side leaves out), so every problem shown is a rank's own.
        stats: dict[str, float] = {}   # the largest relative gradient error seen (the tolerance's evidence)
        problem = _one_step(fn, cfg, ctx.rank, ctx.world_size, stats)
        if problem is None:
            dist.barrier()   # every stage trained right: on to the batch that does not split
            problem = _indivisible(fn, ctx.rank, ctx.world_size)
        runtime.report(passed=problem is None, **stats, **({"problem": problem} if problem else {}))


def check_pipeline_step(fn: Callable | str, nprocs: tuple[int, ...] = (2, 3),
                        timeout: float = JOB_TIMEOUT_S) -> CheckResult:
    """Exercise 7.3: does ``fn`` train an unevenly split model like one process, on each of ``nprocs``?"""
    res = CheckResult("7.3", False, ["no launch"])
    for n in nprocs:
        res = run_check("7.3", "disttutor.checks.pipeline_stages", fn, function_name(fn, "pipeline_step"), n,
                        args={"blocks": SHAPES[n]}, timeout=timeout, collective_timeout=COLLECTIVE_TIMEOUT_S, hint=(
                            "a stage waits for a micro-batch that never comes: every rank must build its stage "
                            "and call schedule.step once"))
        if not res.passed:
            return res
    return res


main = cli(PipelineStepCheck, _run)

if __name__ == "__main__":
    main()
