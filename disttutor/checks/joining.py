"""Checkers for Exercises 0.1 (a first distributed script) and 5.2 (a multi-node-ready setup).

Both exercises are a script's opening and closing lines: read torchrun's environment, pick the
device and backend, join the process group. The learner's function runs on real ranks with *no*
process group made for it:

* **notebook side** -- :func:`check_first_job` (0.1: on 2, then 3 ranks, so a hard-coded world size
  fails) and :func:`check_multinode` (5.2: 2 torchrun agents x 2 processes, a port chosen by the OS)
  ship the learner's function through :func:`disttutor.checks.adapter.run_check`;
* **rank side** -- this module is also a program (``python -m disttutor.checks.joining --source F
  --name first_job --exercise first``). While the learner's function runs, :class:`_Watch` wraps
  ``dist.init_process_group``: a call that would hang or meet the wrong job (a rank or world size that
  is not torchrun's, an address of its own, NCCL without a GPU per process) is refused with a message
  *before* it joins, and every join gets the checker's short timeout, so a collective that only some
  ranks call ends in seconds. Then the function's result is compared with torchrun's environment.
"""
from __future__ import annotations

import datetime as _dt
import inspect
import os
from dataclasses import dataclass
from typing import Any, Callable, Literal

from disttutor.contract.options import cli, opt
from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, run_check

MODULE = "disttutor.checks.joining"
COLLECTIVE_TIMEOUT_S = 10.0  # a join or collective that waits longer is a rank that never came
FIRST_SIZES = (2, 3)         # 0.1 runs twice: a world size typed into the code passes at most one
NNODES, NPROC = 2, 2         # 5.2: two torchrun agents ("nodes") of two processes, as chapter 5 runs
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "broadcast",
               "reduce", "barrier", "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "gather", "scatter")


def check_first_job(fn: Callable | str, sizes: tuple[int, ...] = FIRST_SIZES) -> CheckResult:
    """Exercise 0.1: ``fn()`` joins, all-reduces rank+1, leaves, and returns the sum (a tensor)."""
    res = CheckResult("0.1", False)
    for n in sizes:
        res = run_check("0.1", MODULE, fn, function_name(fn, "first_job"), n, args={"exercise": "first"},
                        timeout=JOB_TIMEOUT_S, hint="a rank is probably waiting in a collective the others never call")
        if not res.passed:
            res.problems = [f"on {n} ranks, {p}" if p.startswith("rank") else p for p in res.problems]
            return res
    return res


def check_multinode(fn: Callable | str) -> CheckResult:
    """Exercise 5.2: ``fn(gpus_per_node)`` joins from torchrun's environment; returns who this process is."""
    # The two "nodes" share this machine: its GPUs (if any) are hidden, or both nodes would claim GPU 0 and 1.
    return run_check("5.2", MODULE, fn, function_name(fn, "join_job"), NPROC, nnodes=NNODES,
                     args={"exercise": "multinode", "gpus_per_node": NPROC}, timeout=JOB_TIMEOUT_S,
                     env={"CUDA_VISIBLE_DEVICES": ""})


class _Refused(RuntimeError):
    """An ``init_process_group`` call the checker stopped before it could hang or join the wrong job."""


def expected_device(local_rank: int, local_world_size: int):
    """The chapter's rule: ``cuda:LOCAL_RANK`` and NCCL with a GPU for every local rank, else the CPU and gloo."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world_size:
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


class _Watch:
    """Wraps ``init_process_group`` and the collectives while the learner's code runs."""

    def __init__(self, env, exercise: str, timeout_s: float):
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        self.dist, self.c10d, self.env, self.exercise, self.timeout_s = dist, c10d, env, exercise, timeout_s
        self.master = {k: os.environ.get(k) for k in ("MASTER_PORT", "MASTER_ADDR")}
        self.problem: str | None = None
        self.inits, self.collectives, self.failed_in = 0, 0, ""
        self.reduced = None
        self.saved = {name: getattr(dist, name) for name in ("init_process_group", *COLLECTIVES) if hasattr(dist, name)}

    def refuse(self, message: str) -> None:
        self.problem = self.problem or message
        raise _Refused(message)

    def _init(self, *args, **kwargs):
        a = inspect.signature(self.saved["init_process_group"]).bind(*args, **kwargs).arguments
        e, self.inits = self.env, self.inits + 1
        method, store = a.get("init_method"), a.get("store")
        if (method not in (None, "env://")) or store is not None:
            self.refuse(f"init_process_group got {'init_method=' + repr(method) if store is None else 'a store'}: an "
                        "address typed into the script -- on a cluster the head's address and port come from torchrun "
                        "(MASTER_ADDR/MASTER_PORT): call it without init_method, it reads them (env://)")
        for key, was in self.master.items():
            if os.environ.get(key) != was:
                self.refuse(f"your code set {key}={os.environ.get(key)!r}, torchrun gave {was!r}: an address typed "
                            "into the script -- torchrun sets both for every job (this one's port was chosen when it "
                            "started; a cluster's head has its own address): leave MASTER_ADDR and MASTER_PORT alone")
        for name, mine in (("world_size", e.world_size), ("rank", e.rank)):
            given = a.get(name, -1)
            if given not in (-1, None) and given != mine:
                var = "WORLD_SIZE" if name == "world_size" else "RANK"
                self.refuse(f"init_process_group got {name}={given!r}, but this job has {var}={mine}: a {name} typed "
                            f"into the script (or taken from another variable) -- read {var} from the environment "
                            "torchrun sets, or leave it out: init_process_group reads it")
        if self.exercise == "first" and a.get("timeout") is None:
            self.refuse("init_process_group was called without timeout=: a rank that never joins a collective would "
                        "hold the others for torch's default (30 minutes for gloo, 10 for NCCL) -- pass "
                        "timeout=datetime.timedelta(seconds=...)")
        device, want = expected_device(e.local_rank, e.local_world_size)
        backend = a.get("backend")
        backend = None if backend is None else str(backend).lower()
        if backend is not None and want not in backend:  # None or "cpu:gloo,cuda:nccl": torch picks per device
            gpus = self.saved_gpus()
            self.refuse(f"backend {backend!r} with {gpus} GPU(s) for {e.local_world_size} processes on this machine: "
                        f"the device here is {device.type}, whose backend is {want!r} -- choose the backend from "
                        "the device: NCCL for GPUs, gloo for the CPU")
        # The checker's short timeout, whatever the learner asked for: a hang ends in seconds.
        a["timeout"] = _dt.timedelta(seconds=self.timeout_s)
        return self.saved["init_process_group"](**a)

    @staticmethod
    def saved_gpus() -> int:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def _count(self, fn):
        def counted(*args, **kwargs):
            self.collectives += 1
            try:
                return fn(*args, **kwargs)
            except Exception:
                self.failed_in = fn.__name__  # the learner's error came from inside this collective
                raise
            finally:
                if fn.__name__ == "all_reduce" and args:
                    self.reduced = args[0]  # summed in place: what the sum was, whatever the code does next
        return counted

    def __enter__(self):
        for name, fn in self.saved.items():
            wrapped = self._init if name == "init_process_group" else self._count(fn)
            setattr(self.dist, name, wrapped)  # the learner's code looks dist.X up when it calls it
            if hasattr(self.c10d, name):
                setattr(self.c10d, name, wrapped)
        return self

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(self.dist, name, fn)
            if hasattr(self.c10d, name):
                setattr(self.c10d, name, fn)


def _call(fn: Callable, watch: _Watch, *args) -> tuple[Any, str | None]:
    """``fn(*args)`` and what went wrong: a refusal first (also one the code caught), else its exception."""
    import re

    try:
        out, why = fn(*args), None
    except Exception as exc:  # gloo's text without its source location ("[.../pair.cc:534] ")
        text = re.sub(r"\[[^\]]*\.(?:cc|h|cpp):\d+\]\s*", "", str(exc)).strip()
        out, why = None, f"your function raised {type(exc).__name__}" + (f": {text.splitlines()[0]}" if text else "")
    return out, watch.problem or why


def _sum_problem(value: Any, n: int, rank: int) -> str | None:
    """What an all-reduced ``value`` says, on ``n`` ranks: None if it is the sum of rank + 1."""
    import torch

    got = torch.as_tensor(value).detach().double().flatten().cpu()
    want = n * (n + 1) / 2
    if not got.numel():
        return "the tensor is empty"
    if bool((got == want).all()):  # small whole numbers summed in floating point: exact, so ==
        return None
    seen = got[0].item()
    why = {float(rank + 1): "this rank's own rank + 1: the sum never happened",
           float(n): f"{n} ranks x 1: every rank put in 1, as if every rank were rank 0 (read RANK from the "
                     "environment)"}.get(seen, "")
    return (f"all_reduce left {seen:g} in element 0; the sum of rank + 1 over {n} ranks is {want:g}"
            + (f" -- {seen:g} is {why}" if why else ""))


def _first(fn: Callable, env, watch: _Watch) -> str | None:
    """0.1's verdict on this rank: None if right, else what is wrong."""
    import torch

    out, why = _call(fn, watch)
    no_call = ("a collective completes only when every rank calls it: call all_reduce on every rank, not inside "
               "an if on the rank")
    if why and not watch.problem and watch.failed_in:
        return (f"{why.split('. ')[0]} -- in {watch.failed_in}, which waits until every rank has called it: does "
                "every rank reach it?")
    if why and not watch.problem and watch.inits and not watch.collectives:
        return f"{why} -- and this rank called no collective before it: {no_call}"
    if why and not watch.problem and watch.reduced is not None:  # e.g. the code's own check of the sum failed
        wrong = _sum_problem(watch.reduced, env.world_size, env.rank)
        return f"{why} -- " + (wrong or f"yet all_reduce's sum is right for {env.world_size} ranks: does that line "
                               "assume another number of ranks?")
    if why:
        return why
    if not watch.inits:
        return "your function never called dist.init_process_group: without a process group there is no collective"
    if not watch.collectives:
        return f"this rank called no collective (it returned {out!r}) -- {no_call}"
    if watch.dist.is_initialized():
        return ("the process group is still initialised when your function returns: end with "
                "dist.destroy_process_group(), which closes the connections to the other ranks")
    if not isinstance(out, (torch.Tensor, int, float)) or isinstance(out, bool):
        return f"your function returned {out!r}: return the tensor all_reduce summed in place"
    device, _ = expected_device(env.local_rank, env.local_world_size)
    if isinstance(out, torch.Tensor) and out.device != device:
        return (f"the tensor is on {out.device}; with LOCAL_RANK {env.local_rank} on this machine it belongs on "
                f"{device} (cuda:LOCAL_RANK with a GPU for every process, else the CPU)")
    return _sum_problem(out, env.world_size, env.rank)


KEYS = ("rank", "local_rank", "world_size", "node", "gpu")


def _identity(out: Any, env, gpus_per_node: int) -> str | None:
    """5.2: what ``out`` says about this process, against torchrun's environment."""
    if not isinstance(out, dict) or any(k not in out for k in KEYS):
        return f"return a dict with the keys {', '.join(KEYS)}; got {out!r}"
    truth = {"rank": env.rank, "local_rank": env.local_rank, "world_size": env.world_size, "node": env.group_rank,
             "gpu": env.local_rank}
    slips = {  # key -> (the value a usual slip gives, what it means)
        "local_rank": (env.rank, "that is its RANK: LOCAL_RANK numbers one node's processes from 0"),
        "gpu": (env.rank, f"a node has {gpus_per_node} GPUs (0-{gpus_per_node - 1}), and RANK counts across "
                          "nodes: index the device by LOCAL_RANK"),
        "world_size": (env.local_world_size, "that is one node's processes (nproc-per-node); WORLD_SIZE counts "
                                             f"the processes of all {env.world_size // env.local_world_size} nodes"),
        "rank": (env.local_rank, "that is its LOCAL_RANK, which repeats on every node; RANK is unique in the job"),
        "node": (None, ""),
    }
    for k in KEYS:
        if out[k] != truth[k]:
            typical, slip = slips[k]
            who = f"LOCAL_RANK {env.local_rank} " if k in ("rank", "local_rank", "gpu") else ""
            if isinstance(out[k], str):  # os.environ's values are strings
                slip = "torchrun's variables are strings: convert them with int()"
            elif out[k] != typical or not slip:
                slip = ""
            return f"{who}returned {k}={out[k]!r}, expected {truth[k]}" + (f" -- {slip}" if slip else "")
    return None


def _multinode(fn: Callable, env, watch: _Watch, gpus_per_node: int) -> str | None:
    """5.2's verdict on this rank."""
    out, why = _call(fn, watch, gpus_per_node)
    if why:
        return why
    if not watch.inits:
        return "your function never called dist.init_process_group: a multi-node job still joins one process group"
    if not watch.dist.is_initialized():
        return "the process group is gone when your function returns: join it and leave it for the training to use"
    problem = _identity(out, env, gpus_per_node)
    # Every rank takes part, also one with a problem: no rank is left waiting for another.
    seen: list[Any] = [None] * env.world_size
    try:
        watch.saved["all_gather_object"](seen, (env.group_rank, env.local_rank))
    except Exception as exc:
        return problem or f"another rank died or left before the check's all_gather ({type(exc).__name__})"
    nodes = env.world_size // env.local_world_size
    if not problem and sorted(seen) != [(g, r) for g in range(nodes) for r in range(env.local_world_size)]:
        return f"the process group holds (node, LOCAL_RANK) {sorted(seen)}: not every node's processes"
    return problem


@dataclass(frozen=True)
class JoiningCheckConfig(LearnerCode):
    exercise: Literal["first", "multinode"] = opt("first", "which exercise: 0.1 first, 5.2 multinode")
    gpus_per_node: int = opt(NPROC, "5.2: the GPUs each node has, handed to the learner's function")
    timeout_s: float = opt(COLLECTIVE_TIMEOUT_S, "the join's and every collective's timeout, in seconds")

    def __post_init__(self):
        super().__post_init__()
        if self.gpus_per_node < 1 or self.timeout_s <= 0:
            raise ValueError("--gpus-per-node must be >= 1 and --timeout-s > 0")


def run(cfg: JoiningCheckConfig) -> None:
    from disttutor.rank import runtime
    from disttutor.rank.arrival import arrive_together
    from disttutor.checks.adapter import load_exercise

    with runtime.setup(init_group=False) as ctx:  # the learner's code makes the process group, not us
        fn = load_exercise(cfg.source, cfg.name)
        arrive_together(ctx.env)  # the short timeout counts once every rank has started
        with _Watch(ctx.env, cfg.exercise, cfg.timeout_s) as watch:
            problem = (_first(fn, ctx.env, watch) if cfg.exercise == "first"
                       else _multinode(fn, ctx.env, watch, cfg.gpus_per_node))
        if problem and cfg.exercise == "multinode":  # say where: ranks of one node merge into one line
            problem = f"on node {ctx.env.group_rank}, {problem}"
        runtime.report(passed=problem is None, **({"problem": problem} if problem else {}),
                       collectives=watch.collectives)


main = cli(JoiningCheckConfig, run)


if __name__ == "__main__":
    main()
