"""Checker for Exercise 4.3 (chapter 4): a single-process training script, turned into DDP.

``train_ddp(...)`` runs on every rank (each with its own initial weights) of a process group set up here.
The datasets note every index each rank reads; ``torch.save`` is watched (rank 0's slowed by
:data:`SLOW_SAVE_S`); each rank looks for the checkpoint as soon as it returns. The reference: rank 0's
model trained in one process on the same global batches (equal shards: DDP's mean of means is the mean).
"""
from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.functional import cross_entropy

from disttutor.contract.options import cli
from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, load_exercise, run_check
from disttutor.checks.tolerances import DATA_PARALLEL_RTOL as RTOL  # parameters: why 1e-5, see tolerances.py

N_TRAIN, N_EVAL, D, CLASSES = 101, 20, 8, 4  # 101: no world size divides it (padding, uneven shards)
EPOCHS, BATCH, LR = 3, 10, 0.5  # 2 ranks: 5 steps an epoch (50 of 51 samples); 3 ranks: 3 (30 of 34)
SLOW_SAVE_S = 1.0  # rank 0's torch.save waits this long first: a rank that does not wait reads no file
#: The metric: a mean of 20 per-sample losses of a model within RTOL of the reference's, summed in
#: another order (fp32, ~1e-7 relative); 1e-4 is 10x the parameters' tolerance, while the mean of the
#: ranks' means (3 ranks: shards of 7, 7, 6) or one rank's own mean is off by more than 1e-3.
METRIC_RTOL = 1e-4
ECHO = "stopped: another rank failed first"


def make_data():
    """(x_train, y_train, x_eval, y_eval): 4 classes from a fixed linear rule plus noise, seed 0."""
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(D, CLASSES, generator=g), torch.randn(N_TRAIN + N_EVAL, D, generator=g)
    y = (x @ w + 0.5 * torch.randn(N_TRAIN + N_EVAL, CLASSES, generator=g)).argmax(1)
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


def make_model(seed: int):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D, 16), nn.Tanh(), nn.Linear(16, CLASSES))


class Recorded:
    """(x, y) pairs that note each index read, by epoch: an epoch ends when the eval set is read."""

    def __init__(self, x, y, log: dict, kind: str):
        self.x, self.y, self.log, self.kind = x, y, log, kind

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        log, i = self.log, int(i)
        if self.kind == "train" and log["phase"] == "eval":
            log["epoch"] += 1  # training again after an evaluation: the next epoch
        log["phase"] = self.kind
        while len(log["train"]) <= log["epoch"]:
            log["train"].append([])
            log["eval"].append([])
        log[self.kind][log["epoch"]].append(i)
        if self.kind == "train":  # how far this rank got, read by read: kept if it dies in a collective later
            log["on_read"]([len(t) for t in log["train"]])  # (a rank one step ahead never reaches its eval set)
        return self.x[i], self.y[i]


def expected_orders(world: int, rank: int) -> list[list[int]]:
    """The training indices rank ``rank`` reads in each epoch: its DistributedSampler share, full batches."""
    full = (N_TRAIN // world) // BATCH * BATCH
    return [torch.randperm(N_TRAIN, generator=torch.Generator().manual_seed(epoch)).tolist()[rank::world][:full]
            for epoch in range(EPOCHS)]


def reference(world: int):
    """Rank 0's initial model trained in one process on the same global batches; the eval loss per epoch."""
    (xt, yt, xe, ye), model = make_data(), make_model(0)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    shares, losses = [expected_orders(world, r) for r in range(world)], []
    for epoch in range(EPOCHS):
        for k in range(len(shares[0][epoch]) // BATCH):
            idx = [i for s in shares for i in s[epoch][k * BATCH:(k + 1) * BATCH]]
            opt.zero_grad()
            cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
        with torch.no_grad():
            losses.append(cross_entropy(model(xe), ye, reduction="none"))
    return model, losses


def _train_problem(reads: list[list[int]], world: int, rank: int) -> str | None:
    want = expected_orders(world, rank)
    full, share = (N_TRAIN // world) // BATCH * BATCH, (N_TRAIN + world - 1) // world
    if len(reads) != EPOCHS:
        return (f"rank {rank} read the training set in {len(reads)} epoch(s), want {EPOCHS} (an epoch ends when "
                "the eval set is read): train, then evaluate, once per epoch")
    for e, got in enumerate(reads):
        if got == want[e]:
            continue
        if len(got) >= N_TRAIN - BATCH:
            return (f"rank {rank} read {len(got)} of the {N_TRAIN} training samples in epoch {e}: every rank trains "
                    "on the whole dataset, so the ranks repeat each other's work. A DistributedSampler gives each "
                    f"rank its 1/{world} share")
        if e > 0 and got == want[0][:len(got)] and len(got) == len(want[0]):
            return (f"rank {rank}, epoch {e}: the same samples in the same order as epoch 0. The sampler shuffles "
                    "with seed + epoch, and learns the epoch only from sampler.set_epoch(epoch), each epoch")
        if len(got) > full and got[:full] == want[e]:
            return (f"rank {rank} trained on {len(got)} samples in epoch {e}: {full // BATCH} full batches of "
                    f"{BATCH} and a last one of {len(got) - full}. Drop the last partial batch "
                    "(drop_last=True in the DataLoader): every step a full batch on every rank")
        return (f"rank {rank}, epoch {e}: read samples {got[:5]}..., DistributedSampler(train_set) with set_epoch "
                f"gives this rank {want[e][:5]}... ({share} samples, {full} in full batches of {BATCH})")
    return None


def _eval_problem(everyone: list[dict], world: int) -> str | None:
    for e in range(EPOCHS):
        per_rank = [f["eval"][e] if e < len(f["eval"]) else [] for f in everyone]
        for r, got in enumerate(per_rank):
            if len(got) >= N_EVAL and world > 1:
                return (f"epoch {e}: rank {r} evaluated all {N_EVAL} eval samples itself. Split the eval set "
                        "across the ranks, each sample on one rank, then add up the ranks' sums and counts")
        count = Counter(i for got in per_rank for i in got)
        twice = sorted(i for i, c in count.items() if c > 1)
        if twice:
            padded = (f"A DistributedSampler pads {N_EVAL} samples to a multiple of {world} by repeating some; a"
                      if N_EVAL % world else "A")  # the sampler's padding named only where it can be the cause
            return (f"epoch {e}: eval sample(s) {twice} were evaluated {max(count.values())} times. {padded} "
                    "metric must count each sample once (give each rank every world-th sample)")
        missed = sorted(set(range(N_EVAL)) - set(count))
        if missed:
            return (f"epoch {e}: eval sample(s) {missed[:5]} were evaluated on no rank (drop_last drops them?): "
                    f"the metric is over all {N_EVAL}")
    return None


def _metric_problem(everyone: list[dict], ref_losses) -> str | None:
    for r, f in enumerate(everyone):
        if not (isinstance(f["out"], list) and len(f["out"]) == EPOCHS):
            return (f"rank {r} returned {f['out_type']}: return a list of {EPOCHS} numbers, the eval loss after "
                    "each epoch")
    for e in range(EPOCHS):
        want = float(ref_losses[e].double().mean())
        shares = [f["eval"][e] for f in everyone]
        means = [float(ref_losses[e][s].double().mean()) if s else float("nan") for s in shares]
        got = [f["out"][e] for f in everyone]
        if max(got) - min(got) > METRIC_RTOL * abs(want):  # an all-reduced value is the same on every rank
            own = all(abs(v - m) <= METRIC_RTOL * abs(m) for v, m in zip(got, means))
            return (f"epoch {e}: the ranks returned different metrics ({', '.join(f'{v:.5f}' for v in got)})"
                    + (", each the mean over its own eval samples only" if own else "")
                    + f"; all {N_EVAL} give {want:.5f}. All-reduce the sum of losses and the count, then divide")
        v = got[0]
        if abs(v - want) <= METRIC_RTOL * abs(want):
            continue
        if abs(v - float(torch.tensor(means).mean())) <= METRIC_RTOL * abs(want):
            return (f"epoch {e}: the metric is {v:.5f}, the mean of the ranks' means (shards of "
                    f"{', '.join(str(len(s)) for s in shares)}); the mean over all {N_EVAL} is {want:.5f}. "
                    "All-reduce sums and counts, not means")
        return (f"epoch {e}: the metric is {v:.5f}, the mean cross-entropy over all {N_EVAL} eval samples is "
                f"{want:.5f}: evaluate after the epoch's training, sum per-sample losses and counts over ranks")
    return None


def diagnose(everyone: list[dict], world: int) -> str | None:
    """None if the job's run is right, else its first problem in words: every rank computes the same text."""
    problem = next((p for r in range(world) if (p := _train_problem(everyone[r]["train"], world, r))), None)
    problem = problem or _eval_problem(everyone, world)
    if problem:
        return problem
    ref, ref_losses = reference(world)
    if any(not torch.equal(f["params"], everyone[0]["params"]) for f in everyone):
        return ("the ranks' trained weights differ: nothing averaged their gradients (or broadcast rank 0's "
                "initial weights). Wrap the model in DistributedDataParallel and train the wrapper")
    want = torch.cat([p.detach().reshape(-1) for p in ref.parameters()])
    err = float((everyone[0]["params"] - want).abs().max() / want.abs().max())
    if not err <= RTOL:  # also catches NaN
        return (f"the trained weights differ from one process trained on the same global batches by {err:.3g} "
                f"(relative; allowed {RTOL:g}): plain SGD with lr, one step a batch, the mean cross-entropy")
    savers = [r for r, f in enumerate(everyone) for _ in f["saves"]]
    if savers != [0]:
        who = ", ".join(map(str, savers)) if savers else "no rank"
        return (f"torch.save(..., checkpoint_path) was called by rank(s) {who}: exactly once, on rank 0 only. The "
                "replicas are equal, and several writers of one file can leave it torn")
    early = [str(r) for r, f in enumerate(everyone) if not f["existed"]]
    if early:
        return (f"the checkpoint did not exist yet when train_ddp returned on rank(s) {', '.join(early)}: rank 0 was "
                "still saving. Call dist.barrier() after the save, on every rank")
    keys = everyone[0]["keys"]
    if any(k.startswith("module.") for k in keys):
        return (f"the checkpoint's keys start with 'module.' ({keys[0]!r}): that is the DDP wrapper's state_dict. "
                "Save model.module.state_dict(), whose keys a plain model loads")
    if everyone[0]["load"]:
        return f"the checkpoint does not load into a fresh model: {everyone[0]['load']}"
    return _metric_problem(everyone, ref_losses)


@contextlib.contextmanager
def _watch_saves(rank: int, path: str):
    """Wraps ``torch.save`` (looked up at call time) to note each save to ``path``; rank 0's waits first."""
    original, saves = torch.save, []

    def save(obj, f, *args, **kwargs):
        if os.path.abspath(os.fspath(getattr(f, "name", f))) == os.path.abspath(path):
            saves.append(type(obj).__name__)
            time.sleep(SLOW_SAVE_S if rank == 0 else 0)
        return original(obj, f, *args, **kwargs)

    torch.save = save
    try:
        yield saves
    finally:
        torch.save = original


def _check(fn: Callable, rank: int, world: int, run_dir: str) -> dict[str, Any]:
    from disttutor.rank import runtime

    xt, yt, xe, ye = make_data()
    log: dict[str, Any] = {"phase": "", "epoch": 0, "train": [], "eval": [],
                           "on_read": lambda reads: runtime.report(train_reads=reads)}
    model, path = make_model(rank), os.path.join(run_dir, "checkpoint.pt")
    with _watch_saves(rank, path) as saves:
        try:
            out = fn(model, Recorded(xt, yt, log, "train"), Recorded(xe, ye, log, "eval"), EPOCHS, BATCH, LR, path)
        except Exception as e:  # report at once: a collective of the checker's own would wait for a broken job
            return {"passed": False, "train_reads": [len(t) for t in log["train"]],
                    "problem": f"your function raised {type(e).__name__}: {str(e)[:300]}"}
    facts = {"existed": os.path.exists(path),  # right away: before any collective of the checker's own
             "train": log["train"], "eval": log["eval"], "saves": saves,
             "params": torch.cat([p.detach().reshape(-1) for p in model.parameters()]),
             "out_type": type(out).__name__, "keys": [], "load": ""}
    try:
        facts["out"] = [float(v) for v in out]
    except Exception:  # not a list of numbers: the diagnosis names its type
        facts["out"] = None
    if rank == 0 and facts["existed"]:
        try:
            state = torch.load(path, weights_only=True)
            facts["keys"] = list(state)
            (fresh := make_model(1234)).load_state_dict(state)
            if not torch.equal(torch.cat([p.reshape(-1) for p in fresh.parameters()]), facts["params"]):
                facts["load"] = "its weights are not the trained ones (saved before the last step?)"
        except Exception as e:
            facts["load"] = f"{type(e).__name__}: {str(e)[:200]}"
    everyone: list[Any] = [None] * world
    try:
        dist.all_gather_object(everyone, facts)  # the checker's own, after every rank returned
    except Exception:
        return {"passed": False, "problem": ECHO}
    problem = diagnose(everyone, world)
    return {"passed": problem is None, **({"problem": problem} if problem else {"epochs": EPOCHS})}


@dataclass(frozen=True)
class ScriptCheckConfig(LearnerCode):  # the learner's --source and --name, nothing more
    pass


def run(cfg: ScriptCheckConfig) -> None:
    from disttutor.rank import runtime

    with runtime.setup() as ctx:
        runtime.report(**_check(load_exercise(cfg.source, cfg.name), ctx.rank, ctx.world_size, runtime.run_dir()))


def check_ddp_script(fn: Callable | str, nprocs: tuple[int, ...] = (2, 3),
                     timeout: float = JOB_TIMEOUT_S) -> CheckResult:
    """Exercise 4.3: ``fn`` trains with DDP, a DistributedSampler, full batches, a global metric and one
    checkpoint saved by rank 0, on 2 and then 3 ranks."""
    details: list[dict[str, Any]] = []
    for n in nprocs:
        res = run_check("4.3", "disttutor.checks.ddp_script", fn, function_name(fn, "train_ddp"), n,
                        timeout=timeout, collective_timeout=10.0, hint="a rank waited for a collective the others "
                        "never called: every rank must take the same number of steps and call the same collectives")
        details += res.details
        if res.passed:
            continue
        reads = [(d or {}).get("train_reads") for d in res.details if (d or {}).get("train_reads")]
        if len(reads) > 1 and len({r[0] for r in reads}) > 1:  # the ranks' first epochs differ in length
            steps = ", ".join(f"rank {r}: {(d['train_reads'][0] + BATCH - 1) // BATCH}"
                              for r, d in enumerate(res.details) if (d or {}).get("train_reads"))
            return CheckResult("4.3", False, [
                f"with {n} ranks, epoch 0: the ranks took different numbers of steps ({steps}), so one rank's "
                "gradient all-reduce had no partner and the job broke off. A DistributedSampler gives every rank "
                "the same share; drop_last=True in the DataLoader makes every step a full batch"], details)
        everyone = f"ranks {', '.join(map(str, range(n)))}: "  # a problem of the whole job: said once
        problems = [p.removeprefix(everyone) for p in res.problems if ECHO not in p] or res.problems
        stub = [p for p in problems if p.startswith("still a stub")]
        return CheckResult("4.3", False, stub or [f"with {n} ranks, {p}" for p in problems], details)
    return CheckResult("4.3", True, [], details)


main = cli(ScriptCheckConfig, run)

if __name__ == "__main__":
    main()
