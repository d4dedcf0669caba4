"""Exercise 5.2 (chapter 5): a set-up that works on every node, run as 2 torchrun agents x 2 processes.

The checker (disttutor/checks/joining.py) compares every rank's returned identity with torchrun's
environment and refuses an address typed into the script before it joins; each realistic wrong answer
below must fail with the message that names its slip, the rank and the node. The solution and the
untouched stub: tests/test_exercises.py.
"""
from __future__ import annotations

import os

import pytest

from disttutor.checks.joining import check_multinode

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def wrong(old: str, new: str) -> str:
    with open(os.path.join(ROOT, "solutions", "ex5_2_join_job.py")) as f:
        src = f.read()
    assert old in src, old
    return src.replace(old, new)


@pytest.mark.timeout(300)
def test_device_by_rank_and_world_size_of_one_node(no_leftovers):
    r = check_multinode(wrong("gpu = local_rank", "gpu = rank"))  # fine on node 0, GPU 2 and 3 on node 1
    assert not r.passed and r.problems == [
        f"rank {g}: on node 1, LOCAL_RANK {g - 2} returned gpu={g}, expected {g - 2} -- a node has 2 GPUs (0-1), "
        "and RANK counts across nodes: index the device by LOCAL_RANK" for g in (2, 3)], r.problems
    r = check_multinode(wrong('world_size = int(os.environ["WORLD_SIZE"])',
                              'world_size = int(os.environ["LOCAL_WORLD_SIZE"])'))
    assert not r.passed and r.problems == [
        f"ranks {a}, {a + 1}: on node {a // 2}, returned world_size=2, expected 4 -- that is one node's processes "
        "(nproc-per-node); WORLD_SIZE counts the processes of all 2 nodes" for a in (0, 2)], r.problems


@pytest.mark.timeout(300)
def test_typed_addresses_are_refused_before_joining(no_leftovers):
    # the article's setup(): MASTER_ADDR / MASTER_PORT set in the script
    r = check_multinode(wrong("    dist.init_process_group(", '    os.environ["MASTER_ADDR"] = "localhost"\n'
                              '    os.environ["MASTER_PORT"] = "12355"\n    dist.init_process_group('))
    assert not r.passed and [p.split(":")[0] for p in r.problems] == ["ranks 0, 1", "ranks 2, 3"], r.problems
    assert all("your code set MASTER_PORT='12355', torchrun gave '" in p and "leave MASTER_ADDR and MASTER_PORT "
               "alone" in p for p in r.problems), r.problems
    assert "on node 1," in r.problems[1]
    r = check_multinode(wrong("dist.init_process_group(backend, ",
                              'dist.init_process_group(backend, init_method="tcp://127.0.0.1:29500", '))
    assert not r.passed and len(r.problems) == 2, r.problems
    assert r.problems[1].startswith("ranks 2, 3: on node 1, init_process_group got "
                                    "init_method='tcp://127.0.0.1:29500': an address typed into the script"), r.problems
