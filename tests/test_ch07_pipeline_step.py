"""Exercise 7.3 (chapter 7): a pipeline step from a sequential model, split into PipelineStages.

The split rule is judged from every rank's kept blocks (no ranks needed here); the rest are
realistic wrong answers on 2 real gloo ranks (a launch each, ~10-20 s on the shared 2-core box),
each rejected with the message that names its slip. The solution itself passes on 2 and 3 ranks in
tests/test_exercises.py.
"""
from __future__ import annotations

import os

import pytest

from disttutor.checks import check
from disttutor.checks.pipeline_stages import split_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOL = open(os.path.join(ROOT, "solutions", "ex7_3_pipeline_step.py")).read()


def wrong(old: str, new: str) -> str:
    assert old in SOL, old
    return SOL.replace(old, new)


def test_split_rule_names_the_missing_or_shared_block():
    assert split_problem([[0, 1, 2], [3, 4]], 5) is None and split_problem([[0, 1], [2, 3, 4]], 5) is None
    assert split_problem([[0, 1], [2, 3], [4, 5], [6]], 7) is None
    assert "block 4 on no rank" in split_problem([[0, 1], [2, 3]], 5)             # floor division
    assert "blocks 6, 7, 8 on no rank" in split_problem([[0, 1], [2, 3], [4, 5]], 9)
    shared = split_problem([[0, 1, 2, 3], [3, 4]], 5)                              # an inclusive end
    assert "block 3 is on ranks 0 and 1" in shared and "rank 0 0-3, rank 1 3-4" in shared
    assert "in rank order" in split_problem([[2, 3, 4], [0, 1]], 5)
    assert "sizes [4, 1]" in split_problem([[0, 1, 2, 3], [4]], 5)                # contiguous but unbalanced


TWO = {"nprocs": (2,)}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("what, old, new, says", [
    ("floor division", "start = rank * base + min(rank, extra)\n    piece = model[start:start + base + "
     "(1 if rank < extra else 0)]", "piece = model[rank * base:(rank + 1) * base]", "block 4 on no rank"),
    ("scale_grads off", "loss_fn=loss_fn)", "loss_fn=loss_fn, scale_grads=False)",
     "4x too large, 4 micro-batches: their gradients were summed and not divided by 4"),
    ("loss divided by m", "loss_fn=loss_fn)", "loss_fn=lambda out, tgt: loss_fn(out, tgt) / n_microbatches)",
     "1/4 of it"),
    ("no target", '{"target": y, "losses": losses}', '{"losses": losses}', "the last stage got no loss or no target"),
    ("no input", "args = (x,) if rank == 0 else ()", "args = ()", "the first stage ran without the input"),
    ("no divisibility check", "if x.shape[0] % n_microbatches:", "if False:",
     "a batch of 10 rows with 4 micro-batches (they would hold 3, 3, 2, 2 rows"),
])
def test_wrong_answers_are_named(what, old, new, says, no_leftovers):
    from disttutor.checks.pipeline_stages import check_pipeline_step

    res = check_pipeline_step(wrong(old, new), **TWO)
    assert not res.passed and says in str(res), (what, str(res))
    assert "another rank died" not in str(res)   # the rank that slipped speaks, not its echoes


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_solution_passes_well_within_the_tolerance(no_leftovers):
    from disttutor.checks.pipeline_stages import MICROBATCH_RTOL

    res = check("7.3", SOL)
    assert res.passed, str(res)
    errs = [d["max_grad_rel_err"] for d in res.details]
    assert len(errs) == 3 and max(errs) < MICROBATCH_RTOL / 10   # measured ~2e-7: the tolerance has headroom
