"""Exercise 3.2 (chapter 3): a parameter-server step on real ranks -- realistic wrong answers, each
rejected with the message that names its slip (the solution and the stub: tests/test_exercises.py).

The order rules are tested without ranks first (:func:`disttutor.checks.param_server._order`), then
the slips on real gloo ranks, each job stopping at its first wrong step (seconds, never a hang)."""
from __future__ import annotations

import os

import pytest

from disttutor.checks import check
from disttutor.checks.param_server import _order

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ev(*names, root=0):
    return [{"name": n, "root": None if n == "step" else root, "numel": 1, "where": "step 0"} for n in names]


def wrong(old: str, new: str) -> str:
    with open(os.path.join(ROOT, "solutions", "ex3_2_ps_step.py")) as f:
        src = f.read()
    assert old in src, old
    return src.replace(old, new)


def test_the_order_of_the_calls_names_the_slip():
    assert _order(ev("reduce", "reduce", "step", "broadcast", "broadcast"), 0, 2) is None  # the server
    assert _order(ev("reduce", "reduce", "broadcast", "broadcast"), 1, 2) is None          # a worker
    assert "stepped before the gradients arrived" in _order(ev("step", "reduce", "broadcast"), 0, 2)
    assert "broadcast before its step" in _order(ev("reduce", "broadcast", "step"), 0, 2)
    assert "never called optimizer.step()" in _order(ev("reduce", "broadcast"), 0, 2)
    assert "that broadcast sent gradients" in _order(ev("reduce", "broadcast", "step"), 1, 2)
    assert "drift apart" in _order(ev("reduce", "step"), 1, 2)
    assert "DDP's pattern" in _order(ev("all_reduce", "step"), 0, 2)
    assert "reduced to rank 1" in _order(ev("reduce", "step", "broadcast", root=1), 0, 2)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_real_ranks_reject_the_slips_with_the_message_that_names_them(no_leftovers):
    # summed, not averaged: plain SGD moves rank 0 exactly world-size times too far
    r = check("3.2", wrong("p.grad /= world", "pass"))
    assert not r.passed and r.problems == [
        "with 2 ranks, rank 0: step 0: rank 0's update is 2.00x the single-process one: the 2 gradients were "
        "summed, not averaged. Divide the sum by the world size (2) before stepping"], r.problems
    # every rank steps its own optimizer and nothing comes back from rank 0: rank 1 drifts, named with the step
    r = check("3.2", "def ps_step(model, optimizer):\n    for p in model.parameters():\n"
                     "        dist.reduce(p.grad, dst=0)\n        p.grad /= dist.get_world_size()\n"
                     "    optimizer.step()\n")
    assert not r.passed and len(r.problems) == 1, r.problems
    assert r.problems[0].startswith("with 2 ranks, rank 1: step 0: this rank stepped its own optimizer on its own "
                                    "gradient and received no parameters from rank 0")
    assert "after this step they differ from rank 0's by" in r.problems[0]
    # the averaged gradients broadcast instead of the parameters, every rank stepping
    r = check("3.2", "def ps_step(model, optimizer):\n    rank, world = dist.get_rank(), dist.get_world_size()\n"
                     "    for p in model.parameters():\n        dist.reduce(p.grad, dst=0)\n"
                     "        if rank == 0:\n            p.grad /= world\n    for p in model.parameters():\n"
                     "        dist.broadcast(p.grad, src=0)\n    optimizer.step()\n")
    assert not r.passed and any(p.startswith("with 2 ranks, rank 1: step 0: this rank stepped its own optimizer "
                                             "after a broadcast from rank 0: that broadcast sent gradients")
                                for p in r.problems), r.problems
    # each rank names itself as the destination: stopped at the first call, both ranks' calls named
    r = check("3.2", wrong("dist.reduce(p.grad, dst=0)", "dist.reduce(p.grad, dst=rank)"))
    assert not r.passed and r.problems == [
        "with 2 ranks, ranks 0, 1: step 0, collective call 1: the ranks disagree (rank 0: dist.reduce(dst=0, 128 "
        "elements); rank 1: dist.reduce(dst=1, 128 elements)) -- every rank must call the same collectives, with "
        "the same root, in the same order; one alone waits for the others forever"], r.problems
    # rank 0 steps first, then the gradients are reduced: its update used its own shard only
    r = check("3.2", "def ps_step(model, optimizer):\n    rank, world = dist.get_rank(), dist.get_world_size()\n"
                     "    if rank == 0:\n        optimizer.step()\n    for p in model.parameters():\n"
                     "        dist.reduce(p.grad, dst=0)\n        if rank == 0:\n            p.grad /= world\n"
                     "    with torch.no_grad():\n        for p in model.parameters():\n"
                     "            dist.broadcast(p, src=0)\n")
    assert not r.passed and r.problems[0].startswith("with 2 ranks, rank 0: step 0: rank 0 stepped before the "
                                                     "gradients arrived"), r.problems


GATHER_DEFAULT_ROOT = '''
import torch
import torch.distributed as dist

def ps_step(model, optimizer):
    rank, world = dist.get_rank(), dist.get_world_size()
    for p in model.parameters():
        lst = [torch.empty_like(p.grad) for _ in range(world)] if rank == 0 else None
        dist.gather(p.grad, gather_list=lst)   # dst left out: rank 0 (torch 2.13's default)
        if rank == 0:
            p.grad = torch.stack(lst).mean(0)
    if rank == 0:
        optimizer.step()
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p, 0)
'''


def test_a_gather_with_its_default_root_is_a_right_answer(no_leftovers):
    """gather's root is its third argument and defaults to rank 0: the watcher must read it so, never as the list."""
    from disttutor.checks.param_server import check_ps_step

    res = check_ps_step(GATHER_DEFAULT_ROOT)
    assert res.passed, res
