"""Exercise 12.2 (chapter 12): sequence parallelism's all-gather with its reduce-scatter backward.

Realistic wrong answers on 2 real gloo ranks (a launch each, ~10-20 s on the shared 2-core box),
each rejected with the message that names its slip; the solution passes on 2 and 4 ranks in
tests/test_exercises.py.
"""
from __future__ import annotations

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOL = open(os.path.join(ROOT, "solutions", "ex12_2_gather_seq.py")).read()
FORWARD = """        full = shard.new_empty((shard.shape[0] * world, *shard.shape[1:]))
        dist.all_gather_single(full, shard.contiguous())   # dim 0 is the sequence: rank k's rows at k*s
        return full"""
BACKWARD = """        mine = grad.new_empty((grad.shape[0] // world, *grad.shape[1:]))
        dist.reduce_scatter_single(mine, grad.contiguous())
        return mine"""
LIST_GATHER = """        parts = [torch.empty_like(shard) for _ in range(world)]
        dist.all_gather(parts, shard.contiguous())
"""

WRONG = [
    ("a slice, no sum", BACKWARD, """        s = grad.shape[0] // world
        return grad[dist.get_rank() * s:(dist.get_rank() + 1) * s]""",
     "returned its own gradient's rows 0-2 only: too small: the other rank adds its contributions"),
    ("another all-gather", BACKWARD, """        full = grad.new_empty((grad.shape[0] * world, *grad.shape[1:]))
        dist.all_gather_single(full, grad.contiguous())
        return full""", "backward returned a gradient of shape [12, 2, 4] for a shard of shape [3, 2, 4]"),
    ("divided by the world size", BACKWARD, BACKWARD.replace("return mine", "return mine / world"),
     "backward divides by the world size (2)"),
    ("gathered along dim 1", FORWARD, LIST_GATHER + "        return torch.cat(parts, dim=1)",
     "forward returned shape [3, 4, 4], expected [6, 2, 4]: that is a gather along dim 1"),
    ("my shard first", FORWARD,
     LIST_GATHER + "        r = dist.get_rank()\n        return torch.cat(parts[r:] + parts[:r])",
     "rank 1: forward on rank 1: rank 0's 3 rows are at rows 3, 4, 5, expected rows 0-2"),
    ("list reduce-scatter of a non-contiguous gradient", BACKWARD, BACKWARD.replace(
        "dist.reduce_scatter_single(mine, grad.contiguous())", "dist.reduce_scatter(mine, list(grad.chunk(world)))"),
     "right for a contiguous gradient, wrong for a non-contiguous incoming gradient"),
    ("an all-reduce, then a slice", BACKWARD, """        g = grad.clone()
        dist.all_reduce(g)
        s = grad.shape[0] // world
        return g[dist.get_rank() * s:(dist.get_rank() + 1) * s]""", "twice the bytes of a reduce-scatter"),
]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("what, old, new, says", WRONG, ids=[w[0] for w in WRONG])
def test_wrong_answers_are_named(what, old, new, says, no_leftovers):
    from disttutor.checks.sequence_parallel import check_gather_seq

    assert old in SOL
    res = check_gather_seq(SOL.replace(old, new), nprocs=(2,))
    assert not res.passed and says in str(res), (what, str(res))
