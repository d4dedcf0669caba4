"""Chapter 11's exercise checkers reject realistic wrong answers, each with a message that says what is wrong.

(The solutions passing and the untouched stubs failing are tests/test_exercises.py's job, for
every exercise.) Each wrong answer is a small edit of the solution file, so it is what a learner
who got *one* thing wrong would hand in. Timeouts are generous: a 2-rank check takes ~15 s idle,
~50 s at load average 10 on the shared 2-core machine.
"""
from __future__ import annotations

import os

import pytest

from disttutor.checks.sharding import ShardingCheck, check_fsdp, check_zero1

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 300


def mutated(path: str, *edits: tuple[str, str]) -> str:
    src = open(os.path.join(ROOT, path)).read()
    for old, new in edits:
        assert old in src, old  # the solution changed: update the wrong answer with it
        src = src.replace(old, new)
    return src


ZERO1, FSDP = "solutions/ex11_1_zero1.py", "solutions/ex11_2_fsdp.py"


def test_check_config_rejects_bad_values():
    with pytest.raises(ValueError, match="--source FILE is required"):
        ShardingCheck()
    with pytest.raises(ValueError, match="--name must be a Python name"):  # LearnerCode's check, shared
        ShardingCheck(source="x.py", name="Zero One")
    with pytest.raises(ValueError, match="steps must be >= 1"):
        ShardingCheck(source="x.py", name="ZeroOne", steps=0)


@pytest.mark.timeout(TIMEOUT)
def test_zero1_without_broadcast_is_caught(no_leftovers):
    res = check_zero1(mutated(ZERO1, ("dist.broadcast(p, src=owner)", "pass")))
    assert not res.passed
    assert "differs from one process on the full batch" in str(res)


@pytest.mark.timeout(TIMEOUT)
def test_zero1_with_full_state_on_every_rank_is_caught(no_leftovers):
    # Every rank steps every parameter: the parameters are right, the memory saving is gone.
    res = check_zero1(mutated(ZERO1, ("mine = [p for p, owner in self.owners if owner == rank]",
                                      "mine = [p for p, owner in self.owners]")))
    assert not res.passed
    assert "optimiser state takes" in str(res) and "stored once it is" in str(res)


@pytest.mark.timeout(TIMEOUT)
def test_zero1_moving_the_frozen_parameter_is_caught(no_leftovers):
    # Owns frozen parameters too, and "helpfully" gives missing gradients zeros: weight decay moves them.
    res = check_zero1(mutated(ZERO1, ("if p.requires_grad and all(", "if all("),
                              ("        self.optim.step()\n",
                               "        for g in self.optim.param_groups:\n"
                               "            for p in g['params']:\n"
                               "                if p.grad is None:\n"
                               "                    p.grad = torch.zeros_like(p)\n"
                               "        self.optim.step()\n")))
    assert not res.passed
    assert "frozen pos.weight moved" in str(res)


@pytest.mark.timeout(TIMEOUT)
def test_fsdp_summing_instead_of_averaging_is_caught(no_leftovers):
    res = check_fsdp(mutated(FSDP, ("piece.float().div_(self.world)", "piece.float()")))
    assert not res.passed
    assert "SGD, step 0" in str(res) and "Averaged gradients" in str(res)


@pytest.mark.timeout(TIMEOUT)
def test_fsdp_sharding_the_frozen_parameter_is_caught(no_leftovers):
    # " if p.requires_grad]" ends the list of trainable parameters: the frozen one is flattened and sharded too
    res = check_fsdp(mutated(FSDP, (" if p.requires_grad]", "]")))
    assert not res.passed
    assert "the frozen pos.weight is in your shard" in str(res)  # caught by storage, before it can move


@pytest.mark.timeout(TIMEOUT)
def test_fsdp_that_keeps_the_full_copies_is_caught(no_leftovers):
    # requires_grad is turned off (so the optimiser sees only the shard), but the full copies stay in memory
    res = check_fsdp(mutated(FSDP, ("p.data = p.data.new_empty(0)", "pass")))
    assert not res.passed
    assert "the full copies of the trainable parameters are still stored" in str(res)


REPLICATED = '''
import torch
import torch.distributed as dist
from torch import nn


class FSDP(nn.Module):
    """Wrong: data parallel in disguise -- every rank keeps every parameter (no sharding)."""

    def __init__(self, module, compute_dtype=None):
        super().__init__()
        self.module = module

    def forward(self, *inputs):
        return self.module(*inputs)  # (its gradients are not even averaged: the storage check comes first)

    def full_parameters(self):
        return dict(self.module.named_parameters())
'''


@pytest.mark.timeout(TIMEOUT)
def test_fsdp_that_keeps_every_parameter_on_every_rank_is_caught(no_leftovers):
    res = check_fsdp(REPLICATED)
    assert not res.passed
    assert "each rank should keep only its shard" in str(res)


def test_the_page_claims_catch_a_wrong_run():
    """The chapter's two new claims: the learner's FSDP2 script (falling losses, half the rows per rank) and
    FSDP2 vs one process. A right run passes; a rising loss, a whole weight on a rank, a drift all fail."""
    from disttutor.checks.claims.ch11 import check_fsdp2_matches_one_process, check_plain_fsdp2

    parts = "blocks.0.up.weight: DTensor (256, 64), local parts {}"
    good = [["step 0: loss 4.3", "step 1: loss 3.2", "step 2: loss 2.5", parts.format([(128, 64)] * 2)], []]
    assert "3 falling losses" in check_plain_fsdp2(good)
    glued = [["step 0: loss 4.3", "step 1: loss 3.2", "step 2: loss 2.5[default0]:", good[0][3]], []]
    assert "3 falling losses" in check_plain_fsdp2(glued)  # a line torchrun's tail read mid-write still counts
    rising = [["step 0: loss 4.3", "step 1: loss 4.4", "step 2: loss 4.5", good[0][3]], []]
    with pytest.raises(AssertionError, match="falling"):
        check_plain_fsdp2(rising)
    whole = [good[0][:3] + [parts.format([(128, 64), (256, 64)])], []]  # rank 1 kept the whole weight
    with pytest.raises(AssertionError, match="local parts"):
        check_plain_fsdp2(whole)
    F2 = [{"vs_one_process": {"fsdp2": 2.7e-7, "fsdp2_ac": 2.7e-7}}] * 2
    assert "= one process" in check_fsdp2_matches_one_process(F2)
    with pytest.raises(AssertionError, match="one process"):
        check_fsdp2_matches_one_process([{"vs_one_process": {"fsdp2": 1e-3, "fsdp2_ac": 0.0}}])
