"""Exercise 1.2 (chapter 1): the mean and variance of all ranks' samples from uneven shards.

The checker's diagnosis is tested without ranks first (each realistic slip's numbers, computed here
from the same shards, must come back with the message that names it), then on real gloo ranks: the
slips only ranks can show (a reduce instead of an all-reduce, a changed input, ranks that disagree on
a collective) and the mean of means once more."""
from __future__ import annotations

import os

import pytest
import torch

from disttutor.checks import check
from disttutor.checks.shard_stats import RTOL, SIZES, diagnose, shard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shards(world: int, case: int = 0) -> list[torch.Tensor]:
    sizes = SIZES[world][case]
    return [shard(sizes, case, r) for r in range(world)]


def stats(xs):
    x = torch.cat(xs).double()
    return x.mean(0), x.var(0, correction=0)


def slips(world: int, case: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """What each realistic slip returns on rank 0 (float32, as a learner's code would)."""
    xs = shards(world, case)
    full = [x.double() for x in xs if len(x)]
    mu, var = stats(xs)
    n, n0 = sum(len(x) for x in xs), len(xs[0])
    s = torch.cat(xs).double().sum(0)
    q = (torch.cat(xs).double() ** 2).sum(0)
    mean_c = s / (n0 * world)
    return {k: (a.float(), b.float()) for k, (a, b) in {
        "mean of means": (torch.stack([x.mean(0) for x in full]).mean(0),
                          torch.stack([x.var(0, correction=0) for x in full]).mean(0)),
        "average of variances": (mu, torch.stack([x.var(0, correction=0) for x in full]).mean(0)),
        "count from the world size": (mean_c, q / (n0 * world) - mean_c ** 2),
        "N-1": (mu, var * n / (n - 1)),
    }.items()}


def test_the_solution_s_numbers_pass_and_every_slip_is_far_outside_the_tolerance():
    for world in SIZES:
        for case in range(len(SIZES[world])):
            xs = shards(world, case)
            mu, var = stats(xs)
            assert diagnose((mu.float(), var.float()), xs, 0, world, None, ["all_reduce"]) is None
            for name, (m, v) in slips(world, case).items():
                err = max(float((m.double() - mu).abs().max() / mu.abs().max()),
                          float((v.double() - var).abs().max() / var.abs().max()))
                assert err > 300 * RTOL, (world, case, name, err)  # RTOL's comment: every slip is off by > 3e-2


def test_each_slip_is_named():
    xs = shards(2)
    got = {k: diagnose(out, xs, 0, 2, None, ["all_reduce"]) for k, out in slips(2).items()}
    assert "that is the average of the ranks' means" in got["mean of means"]
    assert "with shards of 3, 13 samples each sample must count once" in got["mean of means"]
    assert "(off by " in got["mean of means"]  # by how much
    assert "that is the average of the ranks' variances" in got["average of variances"]
    assert "all-reduce the count too" in got["count from the world size"]
    assert "= 6, but the ranks hold 16 in all" in got["count from the world size"]
    assert "you divided by N-1 = 15" in got["N-1"]
    # shape and type
    assert "two tensors" in diagnose(None, xs, 0, 2, None, [])
    assert "each of shape (3,)" in diagnose((torch.zeros(1), torch.zeros(3)), xs, 0, 2, None, [])


def test_an_empty_shard_s_nan_mean_is_explained():
    xs = shards(3, 0)
    assert len(xs[1]) == 0
    nan = torch.full((3,), float("nan"))
    msg = diagnose((nan, nan), xs, 0, 3, None, ["all_reduce"])
    assert "rank 1 holds no samples, and the mean of no samples is 0/0" in msg


def test_a_reduce_is_named_on_the_ranks_it_left_behind():
    xs = shards(2)
    mu, var = stats(xs)
    msg = diagnose((mu.float() + 1, var.float()), xs, 1, 2, True, ["reduce"])
    assert msg.startswith("rank 0 has the right mean and variance, this rank has mean[")
    assert "dist.reduce leaves the sum on its dst only" in msg and "dist.all_reduce" in msg


def solution() -> str:
    with open(os.path.join(ROOT, "solutions", "ex1_2_global_stats.py")) as f:
        return f.read()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_real_ranks_reject_a_reduce_an_in_place_change_and_ranks_that_disagree(no_leftovers):
    src = solution()
    r = check("1.2", src.replace("dist.all_reduce(parts)", "dist.reduce(parts, dst=0)"))
    assert not r.passed and len(r.problems) == 1, r.problems
    assert r.problems[0].startswith("with 2 ranks, rank 1: shards of 3, 13 samples: rank 0 has the right mean")
    # a correct two-pass answer that subtracts the mean from the caller's tensor in place
    r = check("1.2", "def global_stats(x_local):\n    n = torch.tensor([float(x_local.shape[0])])\n"
                     "    s = x_local.sum(0)\n    dist.all_reduce(n)\n    dist.all_reduce(s)\n    mean = s / n\n"
                     "    x_local -= mean\n    q = (x_local ** 2).sum(0)\n    dist.all_reduce(q)\n"
                     "    return mean, q / n\n")
    assert not r.passed and all("your function changed the tensor it was given" in p for p in r.problems)
    # the count all-reduced on rank 0 only: rank 0's count meets rank 1's sums -- named at once, no hang
    r = check("1.2", "def global_stats(x_local):\n    n = torch.tensor([float(x_local.shape[0])])\n"
                     "    s, q = x_local.sum(0), (x_local ** 2).sum(0)\n    if dist.get_rank() == 0:\n"
                     "        dist.all_reduce(n)\n    dist.all_reduce(s)\n    dist.all_reduce(q)\n"
                     "    return s / n, q / n - (s / n) ** 2\n")
    assert not r.passed and "the ranks disagree (rank 0: dist.all_reduce(1 element); rank 1: " \
                            "dist.all_reduce(3 elements))" in r.problems[0], r.problems
    # the mean of the ranks' means, on real ranks: named with the shards' sizes and how far off it is
    r = check("1.2", "def global_stats(x_local):\n    w = dist.get_world_size()\n    m = x_local.mean(0)\n"
                     "    v = x_local.var(0, correction=0)\n    dist.all_reduce(m)\n    dist.all_reduce(v)\n"
                     "    return m / w, v / w\n")
    assert not r.passed and "that is the average of the ranks' means" in r.problems[0], r.problems
