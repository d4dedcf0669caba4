"""Exercise 0.1 (chapter 0): a learner's first distributed script, as one function run on real ranks.

The checker (disttutor/checks/joining.py) runs it on 2, then 3 ranks with no process group made for it;
each realistic wrong answer below must fail with the message that names its slip (and the rank).
The solution and the untouched stub: tests/test_exercises.py.
"""
from __future__ import annotations

import os

import pytest

from disttutor.checks.joining import check_first_job

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def wrong(old: str, new: str) -> str:
    with open(os.path.join(ROOT, "solutions", "ex0_1_first_job.py")) as f:
        src = f.read()
    assert old in src, old
    return src.replace(old, new)


@pytest.mark.timeout(300)
def test_no_timeout_and_a_typed_world_size_are_refused_before_joining(no_leftovers):
    r = check_first_job(wrong(", timeout=datetime.timedelta(seconds=30)", ""))  # the article's call
    assert not r.passed and r.problems == [
        "on 2 ranks, ranks 0, 1: init_process_group was called without timeout=: a rank that never joins a "
        "collective would hold the others for torch's default (30 minutes for gloo, 10 for NCCL) -- pass "
        "timeout=datetime.timedelta(seconds=...)"], r.problems
    # world_size=2 typed in: right on 2 ranks, so only the second run (3 ranks) catches it
    r = check_first_job(wrong("(backend, timeout=", "(backend, rank=rank, world_size=2, timeout="))
    assert not r.passed and len(r.problems) == 1, r.problems
    assert r.problems[0].startswith("on 3 ranks, ranks 0, 1, 2: init_process_group got world_size=2, but this job "
                                    "has WORLD_SIZE=3"), r.problems


@pytest.mark.timeout(300)
def test_a_collective_only_rank_0_calls_ends_in_seconds_naming_the_rank(no_leftovers):
    r = check_first_job(wrong("    dist.all_reduce(x)", "    if rank == 0:\n        dist.all_reduce(x)"))
    assert not r.passed
    ones = [p for p in r.problems if p.startswith("on 2 ranks, rank 1: ")]
    assert ones and "this rank called no collective before it: a collective completes only when every rank " \
                    "calls it" in ones[0], r.problems
    # rank 0 waited in all_reduce: its peer left (or the 10 s timeout came), and the message says where
    assert any(p.startswith("on 2 ranks, rank 0: ") and "in all_reduce, which waits until every rank" in p
               for p in r.problems), r.problems


@pytest.mark.timeout(300)
def test_no_destroy_wrong_backend_and_a_typed_rank(no_leftovers):
    r = check_first_job(wrong("    dist.destroy_process_group()\n", ""))
    assert not r.passed and r.problems == [
        "on 2 ranks, ranks 0, 1: the process group is still initialised when your function returns: end with "
        "dist.destroy_process_group(), which closes the connections to the other ranks"], r.problems
    # NCCL copied from the article, on a machine whose device is the CPU (these tests run without GPUs)
    r = check_first_job(wrong('device, backend = torch.device("cpu"), "gloo"', 'device, backend = torch.device("cpu"), "nccl"'))
    assert not r.passed and len(r.problems) == 1, r.problems
    assert "backend 'nccl' with 0 GPU(s) for 2 processes on this machine: the device here is cpu, whose backend " \
           "is 'gloo'" in r.problems[0], r.problems
    # rank = 0 typed in: every rank adds 1; the code's own assert fails, and the checker says why
    r = check_first_job(wrong('rank = int(os.environ["RANK"])', "rank = 0"))
    assert not r.passed and r.problems[0].startswith("on 2 ranks, ranks 0, 1: your function raised AssertionError"), r.problems
    assert "all_reduce left 2 in element 0; the sum of rank + 1 over 2 ranks is 3 -- 2 is 2 ranks x 1: every rank " \
           "put in 1, as if every rank were rank 0 (read RANK from the environment)" in r.problems[0], r.problems
