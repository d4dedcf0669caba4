"""Exercise 8.2 (gradient accumulation with torch's DDP and ``no_sync()``): the checker accepts the
solution and rejects each realistic slip with the message that names it.

Most slips show on one rank: they run in this process, on a one-rank gloo group, through the same
rank-side function the checker program calls (:func:`disttutor.checks.accumulation.examine`), in
well under a second each. What needs two ranks (parameters drifting apart, the count of real
all-reduces across ranks, a hang) runs through the checker on 2 gloo ranks: three launches. The
solution on 2 ranks: tests/test_exercises.py::test_solution_passes."""
from __future__ import annotations

import os

import pytest
import torch.distributed as dist

from disttutor.checks import check, exercise
from disttutor.checks.accumulation import examine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A checker job is 2 gloo ranks (~6 s on an idle 2-core machine); a hung collective adds its 10 s
# timeout. A loaded shared box makes it 30-90 s.
TIMEOUT = 300
SYNC = "with contextlib.nullcontext() if last else ddp.no_sync():"


def variant(old: str, new: str) -> str:
    src = open(os.path.join(ROOT, exercise("8.2").solution)).read()
    assert old in src, old
    return src.replace(old, new)


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    # A one-rank gloo group in this process: DDP, its comm hook and no_sync() are the real ones.
    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def run_here(src: str) -> str | None:
    ns: dict = {}
    exec(compile(src, "exercise.py", "exec"), ns)
    return examine(ns["accumulate_train"], 0, 1)


@pytest.mark.timeout(60)
def test_the_solution_passes_on_one_rank(one_rank):
    assert run_here(variant("", "")) is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("old, new, expected", [
    # the loss not divided: each step is the group's size times the mean loss's
    (") / len(group)", ")", "step 0 (micro-batches 0-2): the update is 3 times the reference's -- the 3 "
     "micro-batches' gradients add up: divide each loss by the size of its group (3)"),
    # divided by k, the short last group too: its step is 2/3 of the mean's
    (") / len(group)", ") / k", "step 2 (micro-batches 6-7): the last group holds only 2 micro-batches, and its "
     "update is 2/3 of the reference's -- divide its losses by 2"),
    # zero_grad inside the inner loop: only the last micro-batch's gradient is left
    ("                loss.backward()", "                optimizer.zero_grad()\n                loss.backward()",
     "step 0 (micro-batches 0-2): the optimizer saw only micro-batch 2's gradient -- .grad was cleared inside "
     "the loop"),
    # never zeroed: step 1 also carries step 0's gradient
    ("        optimizer.zero_grad()\n", "", "step 1 (micro-batches 3-5): the optimizer saw this group's gradient plus "
     "step 0's"),
    # stepping (and zeroing) every micro-batch, the article's loop without its `% k` test
    ("                loss.backward()\n        optimizer.step()\n        optimizer.zero_grad()",
     "                loss.backward()\n                optimizer.step()\n                optimizer.zero_grad()",
     "optimizer.step() ran 8 times for 8 micro-batches with k=3; expected 3 (groups of 3, 3 and 2) -- a step "
     "after every micro-batch"),
    # the short last group dropped
    ("        group = micro_batches[start:start + k]\n", "        group = micro_batches[start:start + k]\n"
     "        if len(group) < k:\n            break\n",
     "optimizer.step() ran 2 times for 8 micro-batches with k=3; expected 3 (groups of 3, 3 and 2) -- the last 2 "
     "micro-batches never stepped"),
    # no no_sync(): right numbers, one all-reduce per micro-batch
    (SYNC, "with contextlib.nullcontext():", "step 0 (micro-batches 0-2): 3 all-reduces for 3 micro-batches"),
    # the first micro-batch synchronised instead of the last
    ("last = i == len(group) - 1", "last = i == 0", "DDP all-reduced in the backward of micro-batch(es) [0], not "
     "in the group's last (2)"),
], ids=["not-divided", "short-group-by-k", "zero_grad-inside", "never-zeroed", "step-every-micro-batch",
        "short-group-dropped", "no-no_sync", "first-synchronised"])
def test_each_slip_is_named_on_one_rank(one_rank, old, new, expected):
    problem = run_here(variant(old, new))
    assert problem is not None and expected in problem, problem


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT)
def test_no_sync_on_every_micro_batch_lets_the_ranks_drift_apart(no_leftovers):
    r = check("8.2", variant(SYNC, "with ddp.no_sync():"))
    assert not r.passed and len(r.problems) == 1, r.problems
    assert r.problems[0].startswith("ranks 0, 1: DDP never all-reduced: every backward ran inside no_sync(), each "
                                    "group's last too"), r.problems
    assert "(rank 1's differ from rank 0's by " in r.problems[0], r.problems


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT)
def test_without_no_sync_the_all_reduces_are_counted_on_both_ranks(no_leftovers):
    r = check("8.2", variant(SYNC, "with contextlib.nullcontext():"))
    assert not r.passed and r.problems == [
        "ranks 0, 1: step 0 (micro-batches 0-2): 3 all-reduces for 3 micro-batches -- the numbers are right, but "
        "every micro-batch but the group's last, its forward and its backward, belongs inside ddp.no_sync(): "
        "one all-reduce per step"], r.problems


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT)
def test_a_collective_only_rank_0_calls_ends_in_a_message(no_leftovers):
    r = check("8.2", variant("        optimizer.zero_grad()\n", "        optimizer.zero_grad()\n        if "
                             "torch.distributed.get_rank() == 0:\n            torch.distributed.barrier()\n"))
    text = "\n".join(r.problems)
    assert not r.passed and "Timed out" in text and "if rank == 0: dist.all_reduce(...)" in text, r.problems
    assert "/__w/" not in text  # no build-machine paths from gloo's messages
