"""Checker for Exercise 3.2 (chapter 3): one parameter-server step on real ranks.

The learner writes ``ps_step(model, optimizer)``, called on every rank after the local backward
on that rank's equal shard of the batch: the gradients go TO rank 0, rank 0 averages them and
steps its optimizer, then the updated parameters go FROM rank 0 to every rank. Only rank 0
steps; the other ranks' optimizers stay unused.

Rank side (``python -m disttutor.checks.param_server --source F --name ps_step``): a small MLP
trains a few SGD steps on 2, then 3 ranks; after every step each rank's parameters are compared
with the same model trained in one process on the full batch, and the calls are read
(:mod:`disttutor.checks.calls` records every collective, ``optimizer.step`` is recorded too): who
stepped, before or after which collective, with which root, and how many elements went through
rank 0. Plain SGD on purpose: its update is proportional to the gradient, so a sum that was not
averaged shows as an update exactly world-size times too large.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from disttutor.contract.options import cli, opt
from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, run_check
from disttutor.checks.tolerances import DATA_PARALLEL_RTOL as RTOL  # why 1e-5: see tolerances.py

WORLD_SIZES = (2, 3)
BATCH, D_IN, HIDDEN, D_OUT, LR = 12, 8, 16, 4, 0.1  # the batch splits evenly over 2 and 3 ranks


@dataclass(frozen=True)
class PSCheckConfig(LearnerCode):
    steps: int = opt(3, "training steps compared with one process")

    def __post_init__(self):
        super().__post_init__()
        if self.steps < 1:
            raise ValueError("--steps must be >= 1")


def _flat(tensors) -> Any:
    import torch

    return torch.cat([t.detach().reshape(-1) for t in tensors])


def _err(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def _order(events: list[dict[str, Any]], rank: int, world: int) -> str | None:
    """What the calls alone say is wrong on this rank (None: nothing)."""
    names = [e["name"] for e in events]
    if "all_reduce" in names:
        return ("the gradients went to every rank (dist.all_reduce): that is DDP's pattern, chapter 4. In a "
                "parameter server they go to rank 0 only (dist.reduce with dst=0, or dist.gather)")
    roots = {e["root"] for e in events if e["name"] in ("reduce", "gather")}
    if roots - {0}:
        return (f"the gradients were reduced to rank {sorted(roots - {0})[0]}, but the server that steps is "
                "rank 0: dst=0 on every rank")
    if rank != 0 and "step" in names:
        if "broadcast" in names[:names.index("step")]:
            return ("this rank stepped its own optimizer after a broadcast from rank 0: that broadcast sent "
                    "gradients, and every rank repeated the server's update. Only rank 0 steps, then it "
                    "broadcasts the updated parameters")
        return ("this rank stepped its own optimizer on its own gradient and received no parameters from "
                "rank 0, so the ranks' copies drift apart. Only rank 0 steps; the others receive its "
                "parameters (dist.broadcast with src=0)")
    if rank == 0:
        if "step" not in names:
            return "rank 0 never called optimizer.step(): the server must update the parameters"
        first_in = next((i for i, n in enumerate(names) if n in ("reduce", "gather")), None)
        if first_in is not None and names.index("step") < first_in:
            return ("rank 0 stepped before the gradients arrived (optimizer.step() before dist.reduce): its "
                    "update used only its own shard's gradient. Reduce, average, then step")
        if "broadcast" in names and names.index("step") > max(i for i, n in enumerate(names) if n == "broadcast"):
            return ("rank 0 broadcast before its step: what it sent were gradients or the old parameters, not the "
                    "updated ones. Step first, then broadcast the parameters")
    return None


def _train(fn: Callable, steps: int, rank: int, world: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from disttutor.checks.calls import Mismatch, Watch
    from disttutor.workloads.data import regression
    from disttutor.workloads.models import MLP, seeded

    model, ref = (seeded(MLP, 0, D_IN, [HIDDEN], D_OUT) for _ in range(2))
    opt_, ref_opt = torch.optim.SGD(model.parameters(), lr=LR), torch.optim.SGD(ref.parameters(), lr=LR)
    x, y = regression(n=BATCH * steps, d_in=D_IN, d_out=D_OUT, seed=1).tensors
    names = [n for n, _ in model.named_parameters()]
    through: dict[str, int] = {}
    with Watch() as watch:
        inner_step = opt_.step

        def step(*a, **k):  # recorded in order with the collectives
            watch.calls.append({"name": "step", "root": None, "numel": 0, "where": watch.where})
            return inner_step(*a, **k)

        opt_.step = step
        for s in range(steps):
            xb, yb = x[s * BATCH:(s + 1) * BATCH], y[s * BATCH:(s + 1) * BATCH]
            opt_.zero_grad(set_to_none=True)
            F.mse_loss(model(xb.chunk(world)[rank]), yb.chunk(world)[rank]).backward()  # a mean over my shard
            before = _flat(model.parameters())
            watch.at(f"step {s}")
            start, raised = len(watch.calls), None
            try:
                fn(model, opt_)
            except Mismatch as e:
                return {"passed": False, "problem": str(e)}
            except Exception as e:  # said to the other ranks too, so nobody waits for this one
                raised = f"step {s}: your function raised {type(e).__name__}: {e} (rank {rank})"
            try:
                watch.agree(raised or "returned")
            except Mismatch as e:
                return {"passed": False, "problem": raised or str(e)}
            if raised:
                return {"passed": False, "problem": raised}
            events = watch.since(start)
            ref_opt.zero_grad(set_to_none=True)
            F.mse_loss(ref(xb), yb).backward()  # one process, the full batch
            ref_opt.step()
            mine, want = _flat(model.parameters()), _flat(ref.parameters())
            rank0 = mine.clone()
            watch.originals["broadcast"](rank0, src=0)  # the checker's own: rank 0's parameters, for comparison
            problem = _order(events, rank, world)
            if problem and "drift apart" in problem and not _err(mine, rank0) <= RTOL:
                problem += f" (after this step they differ from rank 0's by {_err(mine, rank0):.3g}, relative)"
            if problem is None and rank == 0 and not _err(mine, want) <= RTOL:  # also catches NaN
                u, u_ref = mine - before, want - before
                ratio = float(u @ u_ref / (u_ref @ u_ref))
                worst = max(names, key=lambda n: _err(dict(model.named_parameters())[n].detach(),
                                                       dict(ref.named_parameters())[n].detach()))
                if abs(ratio - world) < 0.01 * world:
                    problem = (f"rank 0's update is {ratio:.2f}x the single-process one: the {world} gradients "
                               f"were summed, not averaged. Divide the sum by the world size ({world}) before "
                               "stepping")
                else:
                    problem = (f"rank 0's parameter {worst!r} differs from one process on the full batch by "
                               f"{_err(mine, want):.3g} (relative; allowed {RTOL:g}): did every rank's gradient "
                               "reach rank 0, averaged, before the step?")
            elif problem is None and rank != 0 and not _err(mine, rank0) <= RTOL:
                problem = ("this rank's parameters " + ("did not change" if torch.equal(mine, before) else
                           f"differ from rank 0's by {_err(mine, rank0):.3g} (relative)") +
                           ": the updated parameters must come FROM rank 0 (dist.broadcast with src=0, after "
                           "rank 0's step), every parameter")
            verdicts: list[Any] = [None] * world
            dist.all_gather_object(verdicts, problem is None)
            if problem is not None:
                return {"passed": False, "problem": f"step {s}: {problem}"}
            if not all(verdicts):
                return {"passed": True, "note": "other ranks went wrong"}
            for e in events:
                if e["name"] in ("reduce", "gather", "broadcast"):
                    through[e["name"]] = through.get(e["name"], 0) + e["numel"]
    return {"passed": True, "steps": steps, "elements_through_rank0_per_step": {k: v // steps for k, v in
                                                                                through.items()}}


def run(cfg: PSCheckConfig) -> None:
    from disttutor.rank import runtime
    from disttutor.checks.adapter import load_exercise

    with runtime.setup() as ctx:
        runtime.report(**_train(load_exercise(cfg.source, cfg.name), cfg.steps, ctx.rank, ctx.world_size))


def check_ps_step(fn: Callable | str, steps: int = 3, timeout: float = JOB_TIMEOUT_S) -> CheckResult:
    """Exercise 3.2: does ``fn(model, optimizer)`` train like one process, through rank 0, on 2 and 3 ranks?"""
    details: list[dict[str, Any]] = []
    for n in WORLD_SIZES:
        res = run_check("3.2", "disttutor.checks.param_server", fn, function_name(fn, "ps_step"), n,
                        args={"steps": steps}, timeout=timeout, collective_timeout=10.0, hint=(
                            "a rank waited for a message the others never sent: every rank must call the same "
                            "collectives in the same order, with the same root"))
        details += res.details
        if not res.passed:
            stub = [p for p in res.problems if p.startswith("still a stub")]
            return CheckResult("3.2", False, stub or [f"with {n} ranks, {p}" for p in res.problems], details)
    return CheckResult("3.2", True, [], details)


main = cli(PSCheckConfig, run)

if __name__ == "__main__":
    main()
