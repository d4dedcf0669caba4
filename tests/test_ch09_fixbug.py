"""Chapter 9's "fix the bug" exercises (9.2, 9.3): the checkers reject the broken program and the
realistic half-fixes, each with a message naming the rank and the problem, and accept the solution
(the solutions pass in tests/test_exercises.py::test_solution_passes). Also: the grader and the
nbgrader marks treat the broken program as the exercise's starting code."""
from __future__ import annotations

import os

import nbformat
import pytest

from disttutor.checks import check, exercise
from disttutor.checks.fixbug import unchanged
from disttutor.course.grade import grade

from test_exercises import ROOT, chapter_cells, stub_source

# A checker job is 2 gloo ranks (~10 s on an idle 2-core machine); a hung collective adds its 10 s
# timeout. A loaded shared box (load average 5-10 measured while writing these) makes it 30-90 s.
TIMEOUT = 300


def read(path: str) -> str:
    return open(os.path.join(ROOT, path)).read()


def variant(ex_id: str, old: str, new: str, start: str = "solution") -> str:
    src = read(getattr(exercise(ex_id), start))
    assert old in src, old
    return src.replace(old, new)


def test_unchanged_means_the_same_code_not_the_same_text():
    e = exercise("9.2")
    broken = read(e.broken)
    assert unchanged(broken, e.broken, e.stub)
    # comments, blank lines and a rewritten docstring are not a fix
    edited = broken.replace('"""One optimizer step', '"""My notes. One optimizer step').replace(
        "        loss.backward()\n", "        # TODO\n\n        loss.backward()\n")
    assert edited != broken and unchanged(edited, e.broken, e.stub)
    assert not unchanged(read(e.solution), e.broken, e.stub)
    assert not unchanged(broken.replace("loss", "l"), e.broken, e.stub)  # a change, even if not a fix
    assert not unchanged("def accumulate_step(:\n", e.broken, e.stub)     # a syntax error is not the broken program


@pytest.mark.parametrize("ex_id", ["9.2", "9.3"])
def test_the_notebook_cell_is_the_broken_program_and_marked_for_nbgrader(ex_id):
    import sys

    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import build_notebooks

    e = exercise(ex_id)
    assert unchanged(stub_source(e), e.broken, e.stub)
    cells = [c for c in build_notebooks.parse(read("chapters/src/09_profiling_troubleshooting.py"))
             if build_notebooks.cell_metadata(c).get("nbgrader", {}).get("grade_id") == f"exercise-{ex_id}"]
    assert len(cells) == 1 and f"def {e.stub}(" in cells[0]["source"]


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("case, old, new, start, expected", [
    # the broken program with a cosmetic change (so the checker really runs it): both bugs, the loss first
    ("original", "loss = ", "l = loss = ", "broken", "the weights moved 3.00x as far as one SGD step"),
    # the loss divided, no no_sync(): right numbers, three all-reduces per step
    ("no no_sync", "with contextlib.nullcontext() if sync else ddp_model.no_sync():",
     "with contextlib.nullcontext():", "solution", "all-reduced 3 times for one optimizer step"),
    # every micro-batch inside no_sync(), the last one too: the gradients never meet
    ("all in no_sync", "with contextlib.nullcontext() if sync else ddp_model.no_sync():",
     "with ddp_model.no_sync():", "solution", "the gradients were never all-reduced"),
    # no_sync() right, the loss not divided
    ("loss not divided", ") / n\n", ")\n", "solution", "divide each micro-batch's loss by len(micro_batches)"),
], ids=["original", "no-no_sync", "all-in-no_sync", "loss-not-divided"])
def test_9_2_rejects_the_broken_program_and_half_fixes(case, old, new, start, expected, no_leftovers):
    r = check("9.2", variant("9.2", old, new, start))
    assert not r.passed, case
    assert len(r.problems) == 1 and r.problems[0].startswith("ranks 0, 1: step 0: "), r.problems
    assert expected in r.problems[0], r.problems


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("case, old, new, start, expected", [
    # the broken program, cosmetically changed: set_epoch missing AND a rank-local log
    ("original", "log.append(loss.item())", "log.append(float(loss.item()))", "broken",
     ["every epoch visits the samples in the SAME order", "that is this rank's own loss"]),
    # set_epoch added, the log still rank-local: each rank's message names its own wrong value
    ("local log", "            mean = loss.detach().clone()\n            dist.all_reduce(mean)  # SUM over ranks "
     "(every rank calls it)\n            log.append(mean.item() / dist.get_world_size())",
     "            log.append(loss.item())", "solution", ["that is this rank's own loss"]),
    # the log fixed, set_epoch still missing
    ("no set_epoch", "        sampler.set_epoch(epoch)\n", "", "solution", ["call sampler.set_epoch(epoch)"]),
    # the tempting half-fix: only rank 0 all-reduces the loss -- a hang, ended by the collective timeout
    ("rank-0 all_reduce", "            dist.all_reduce(mean)", "            if dist.get_rank() == 0:\n"
     "                dist.all_reduce(mean)", "solution", ["Timed out", "if rank == 0: dist.all_reduce(...)"]),
], ids=["original", "local-log", "no-set_epoch", "rank0-all_reduce"])
def test_9_3_rejects_the_broken_program_and_half_fixes(case, old, new, start, expected, no_leftovers):
    r = check("9.3", variant("9.3", old, new, start))
    assert not r.passed, case
    text = "\n".join(r.problems)
    assert all(e in text for e in expected), r.problems
    assert text.startswith("rank"), r.problems  # each line names the rank(s)
    assert "/__w/" not in text  # no build-machine paths from gloo's messages
    if case == "local log":  # the two ranks logged different (each its own) losses: one line each
        assert [p[:7] for p in r.problems] == ["rank 0:", "rank 1:"], r.problems


@pytest.mark.timeout(TIMEOUT)
def test_grade_says_still_the_broken_program(tmp_path, no_leftovers):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c["source"]) for c in chapter_cells(9)["cells"]
                if c["cell_type"] == "code" and ("def accumulate_step(" in c["source"] or "def train_epochs(" in c["source"])]
    nbformat.write(nb, str(tmp_path / "untouched.ipynb"))
    results, left = grade([str(tmp_path)], ["9.2", "9.3"], timeout=120)
    assert left == [] and [r.status for r in results] == ["fail", "fail"]
    for r in results:
        assert r.message.startswith(f"still the broken program -- Exercise {r.exercise}:"), r.message
