"""Run the puzzles' code on real ranks and report what each rank ends with (the puzzles' answers' proof).

Every rank executes each snippet in turn (``rank`` and ``world`` given, ``torch`` and ``dist``
imported), then evaluates its ``expr`` and reports the value (tensors as lists). A snippet marked
``hangs`` runs in a fresh group over all ranks with a short timeout: ``dist``'s calls use that group,
and a rank whose call times out reports ``True`` ("waits"), one that finishes ``False``; the group is
then left alone and the next snippets use the default group. The snippets arrive as source, in a JSON
file the kernel writes (``disttutor.course.puzzles.snippets()``), like a learner's code::

    python -m torch.distributed.run --nproc-per-node 4 -m disttutor.programs.puzzle_check --source snippets.json
"""
from __future__ import annotations

import datetime
import functools
import inspect
import json
from dataclasses import dataclass

import torch
import torch.distributed as dist

from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt
from disttutor.rank import runtime


@dataclass(frozen=True)
class PuzzleCheckConfig:
    source: str = opt("", "JSON file: a list of {id, code, expr, hangs}")
    hang_s: int = opt(3, "seconds a call in a 'hangs' snippet waits before the rank counts as waiting")

    def __post_init__(self):
        require_positive(self, "hang_s")


class _InGroup:
    """``torch.distributed`` with ``group=`` defaulting to one group (a hang stays inside it)."""

    def __init__(self, group):
        self._group = group

    def __getattr__(self, name):
        fn = getattr(dist, name)
        if callable(fn) and "group" in getattr(inspect.signature(fn), "parameters", {}):
            return functools.partial(fn, group=self._group)
        return fn


def _plain(x):
    """A reportable value: tensors (and DTensors: their local shard) as lists."""
    if hasattr(x, "to_local"):
        x = x.to_local()
    if isinstance(x, torch.Tensor):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def run_one(snippet: dict, rank: int, world: int, hang_s: int):
    space = {"torch": torch, "dist": dist, "rank": rank, "world": world}
    if snippet.get("hangs"):
        # every rank makes the group (new_group is collective), whatever the snippet then does with it
        group = dist.new_group(timeout=datetime.timedelta(seconds=hang_s))
        space["dist"] = _InGroup(group)
        try:
            exec(compile(snippet["code"], f"<puzzle {snippet['id']}>", "exec"), space)
        except RuntimeError as e:  # gloo's timeout: this rank waited for a peer that never came
            runtime.rank_print(f"{snippet['id']}: waited {hang_s}s ({str(e).splitlines()[0][:80]})")
            return True
        return False
    exec(compile(snippet["code"], f"<puzzle {snippet['id']}>", "exec"), space)
    return _plain(eval(snippet["expr"], space))


def run(cfg: PuzzleCheckConfig) -> None:
    if not cfg.source:
        raise SystemExit("--source FILE is required (disttutor.course.puzzles.snippets() written as JSON)")
    with open(cfg.source, encoding="utf-8") as f:
        snippets = json.load(f)
    with runtime.setup() as ctx:
        out = {}
        # the ones that hang last: a rank that gave up on a group never touches it again
        for s in sorted(snippets, key=lambda s: bool(s.get("hangs"))):
            out[s["id"]] = run_one(s, ctx.rank, ctx.world_size, cfg.hang_s)
            if not s.get("hangs"):
                dist.barrier()  # one snippet's collectives never meet the next one's
        runtime.report(results=out)


main = cli(PuzzleCheckConfig, run)


if __name__ == "__main__":
    main()
