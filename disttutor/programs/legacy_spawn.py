"""The article's §5.3 launch (``torch.distributed.launch`` + ``mp.spawn``), reproduced safely (chapter 5).

The article starts ``python -m torch.distributed.launch --nproc_per_node=4 ...
train_script.py`` on each node, and ``train_script.py``'s ``main()`` calls
``mp.spawn(train, nprocs=torch.cuda.device_count())``, where each child runs
``init_process_group(rank=<spawn index>, world_size=<GPUs on this node>)``.
Both layers start one process per GPU, so every launched process spawns a
full set of children: ``nproc x gpus`` processes, and their ranks (0..gpus-1,
on every node, in every launched process) clash.

Two modes, a small diff of each other:

* default (``--gpus 2``): each torchrun rank plays one process the old
  launcher started and ``mp.spawn``s ``gpus`` children that try the article's
  ``init_process_group`` with a short timeout. Each child writes what happened
  (its rank, world size, the all-reduce it saw or the error) to the run
  directory; its parent gathers the records and reports them.
* ``--fixed``: the torchrun form. torchrun already started one process per
  device; each reads RANK/WORLD_SIZE from the environment (``runtime.setup``)
  and no process spawns another.

Run it with ``disttutor.launch("legacy_spawn", nproc=2)`` (the launcher's
timeout kills the whole tree, children included).
"""
from __future__ import annotations

import datetime as _dt
import glob
import json
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from disttutor.rank import runtime
from disttutor.contract.options import cli, opt


@dataclass(frozen=True)
class LegacyConfig:
    gpus: int = opt(2, "children each launched process spawns (torch.cuda.device_count() on the article's machine)")
    # short: a clash of two spawned groups must not stall the notebook cell
    timeout: float = opt(3.0, "seconds a child's init/all-reduce may wait")
    fixed: bool = opt(False, "the torchrun form: one process per device, no mp.spawn")

    def __post_init__(self):
        if not 1 <= self.gpus <= 4:
            raise ValueError(f"gpus must be 1..4 (each one is a real process here), got {self.gpus}")
        if not 0 < self.timeout <= 60:
            raise ValueError(f"timeout must be in (0, 60] seconds, got {self.timeout}")


def _record(rank: int, world_size: int, timeout: float) -> dict:
    """Join a group as ``rank`` of ``world_size``, all-reduce a 1, say who the partners were."""
    rec = {"rank": rank, "world_size": world_size, "pid": os.getpid(), "parent_pid": os.getppid(),
           "ok": False, "sum": None, "partners": None, "error": None}
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world_size,
                                 timeout=_dt.timedelta(seconds=timeout))
        one = torch.ones(1)
        dist.all_reduce(one)  # counts the processes that really are in *this* group
        partners: list = [None] * world_size
        dist.all_gather_object(partners, os.getpid())
        rec.update(ok=True, sum=one.item(), partners=partners)
    except Exception as exc:  # a clash ends here, as data, not as a traceback in the cell
        rec["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]}"
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return rec


def article_train(rank: int, world_size: int, timeout: float, out_dir: str, launched_rank: int) -> None:
    """The article's ``train(rank, world_size)`` as far as the process group goes.

    Module-level so ``mp.spawn`` (spawn start method) can import it in the child.
    ``rank`` is the spawn index and ``world_size`` the GPU count of *this node*:
    the article's formula, which ignores that the launcher already started
    ``nproc`` copies of this script.
    """
    runtime.tie_to_parent()  # die with the launched process if the launcher kills the tree
    # The article's setup(): MASTER_ADDR/PORT from the environment -- which the
    # launcher set for *its* processes, so all children meet at the same store.
    os.environ["MASTER_ADDR"] = os.environ.get("MASTER_ADDR", "localhost")
    os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT", "12355")
    rec = _record(rank, world_size, timeout)
    rec["launched_rank"] = launched_rank
    path = os.path.join(out_dir, f"child_{launched_rank}_{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(rec, f)
    os.replace(path + ".tmp", path)


def run_article(cfg: LegacyConfig) -> None:
    """One process the old launcher started: spawn ``gpus`` children, like the article's ``main()``."""
    # init_group=False: this process must not create a process group. The
    # children's clashing groups leave stale addresses under the same store
    # keys, so a group made here would try to connect to dead children.
    with runtime.setup(init_group=False) as ctx:
        out_dir = os.path.join(runtime.run_dir() or ".", f"spawned{ctx.rank}")
        os.makedirs(out_dir, exist_ok=True)
        # The article's call: mp.spawn(train, args=(world_size,), nprocs=world_size, join=True).
        mp.spawn(article_train, args=(cfg.gpus, cfg.timeout, out_dir, ctx.rank), nprocs=cfg.gpus, join=True)
        children = []
        for fn in sorted(glob.glob(os.path.join(out_dir, "child_*.json"))):
            with open(fn) as f:
                children.append(json.load(f))
        runtime.report(launched_pid=os.getpid(), children=children)


def run_fixed(cfg: LegacyConfig) -> None:
    """The torchrun form: this process *is* the one process for its device."""
    with runtime.setup() as ctx:  # RANK / WORLD_SIZE come from torchrun, never from a spawn index
        rec = _record_in_group(ctx)
        rec["launched_rank"] = ctx.rank
        runtime.report(launched_pid=os.getpid(), children=[rec])


def _record_in_group(ctx: "runtime.Context") -> dict:
    one = torch.ones(1, device=ctx.device)
    dist.all_reduce(one)
    partners: list = [None] * ctx.world_size
    dist.all_gather_object(partners, os.getpid())
    return {"rank": ctx.rank, "world_size": ctx.world_size, "pid": os.getpid(), "parent_pid": os.getppid(),
            "ok": True, "sum": one.item(), "partners": partners, "error": None}


def run(cfg: LegacyConfig) -> None:
    (run_fixed if cfg.fixed else run_article)(cfg)


main = cli(LegacyConfig, run)  # the command line is derived from LegacyConfig's fields



if __name__ == "__main__":
    main()
