"""Every exercise of the registry: its stub (taken from the chapter's notebook SOURCE) fails naming
the exercise, its solution passes, and each checker rejects realistic wrong answers with a message
that says what is wrong. (DDP's wrong answers: tests/test_ch04_scratch.py; the ring's:
tests/test_ch02_allreduce.py.)"""
from __future__ import annotations

import glob
import os

import pytest

from disttutor.checks import EXERCISES, check, exercise, hint
from disttutor.checks.adapter import resolve_path, to_source
from disttutor.checks.fixbug import unchanged
from disttutor.course.grade import extract

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def chapter_cells(chapter: int) -> dict:
    """The chapter's percent-format source as a notebook-like dict (what extract() reads)."""
    (path,) = glob.glob(os.path.join(ROOT, "chapters", "src", f"{chapter:02d}_*.py"))
    cells, cur, kind = [], [], None
    for line in open(path).read().splitlines():
        if line.startswith("# %%"):
            if kind is not None:
                cells.append({"cell_type": kind, "source": "\n".join(cur), "metadata": {}})
            kind, cur = ("markdown" if "[markdown]" in line else "code"), []
        else:
            cur.append(line)
    cells.append({"cell_type": kind, "source": "\n".join(cur), "metadata": {}})
    return {"cells": cells}


def stub_source(ex) -> str:
    src = extract(chapter_cells(ex.chapter), ex)
    assert src is not None, f"chapter {ex.chapter}'s source has no cell defining {ex.stub}"
    return src


IDS = [e.id for e in EXERCISES]


def test_hint_goes_one_step_further_each_call(monkeypatch):
    from disttutor.checks import registry

    monkeypatch.setattr(registry, "_SHOWN", {})
    e = exercise("9.2")  # chapter 9: "gives a nudge, then more"
    got = [hint("9.2") for _ in range(len(e.hints) + 2)]
    assert [g.split(":")[0] for g in got[:len(e.hints)]] == [f"Exercise 9.2, hint {i}/{len(e.hints)}"
                                                             for i in range(1, len(e.hints) + 1)]
    assert got[-2] == got[-1] and e.solution in got[-1]  # the last step stays where the solution is
    assert hint("1.1", 3).startswith("Exercise 1.1, hint 3/3") and e.solution not in hint("1.1", 3)
    assert registry.exercise("1.1").solution in hint("1.1")  # after hint 3 (the chapter's cell) comes the solution
    assert hint("3.1").startswith("Exercise 3.1, hint 1/")  # every exercise keeps its own count


def test_registry_covers_the_chapters_and_is_consistent():
    assert len(set(IDS)) == len(IDS)
    assert {1, 2, 3, 4, 5, 6, 7} <= {e.chapter for e in EXERCISES}
    for e in EXERCISES:
        assert os.path.isfile(os.path.join(ROOT, e.solution)), e.solution
        assert callable(e.check_function())
        if e.broken:  # a "fix the bug" exercise starts from a broken program: the notebook's cell is it
            assert unchanged(stub_source(e), e.broken, e.stub), f"{e.id}: the notebook's cell differs from {e.broken}"
        else:
            assert f'NotImplementedError("Exercise {e.id}:' in stub_source(e)
        # progressive hints: numbered, and the last step names the solution
        assert hint(e.id, 1).startswith(f"Exercise {e.id}, hint 1/{len(e.hints)}")
        assert e.solution in hint(e.id, len(e.hints) + 1)
    with pytest.raises(ValueError, match="no exercise '9.9'"):
        exercise("9.9")
    with pytest.raises(ValueError, match="hint levels start at 1"):
        hint("1.1", 0)


def test_solutions_are_found_by_id_or_repo_path_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # e.g. a notebook in chapters/
    assert "def sync_gradients" in to_source("solutions/ex4_1_naive_ddp.py")
    assert to_source("4.1") == to_source("solutions/ex4_1_naive_ddp.py")
    with pytest.raises(FileNotFoundError, match="no file 'solutions/nope.py'"):
        resolve_path("solutions/nope.py")
    with pytest.raises(FileNotFoundError, match="no file"):
        to_source("solutions/nope.py")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ex_id", IDS)
def test_untouched_stub_fails_naming_its_exercise(ex_id, no_leftovers):
    res = check(ex_id, stub_source(exercise(ex_id)))
    assert not res.passed
    start = "still the broken program" if exercise(ex_id).broken else "still a stub"
    assert f"Exercise {ex_id}: not passed yet" in str(res) and f"{start} -- Exercise {ex_id}:" in str(res)
    assert len(res.problems) == 1  # said once, not once per rank


@pytest.mark.slow
@pytest.mark.timeout(960)  # 2.1 runs 3 jobs (2, 3, 4 ranks): ~5 s each idle, minutes on a loaded 2-core box
@pytest.mark.parametrize("ex_id", IDS)
def test_solution_passes(ex_id, no_leftovers):
    res = check(ex_id, exercise(ex_id).solution)
    assert res.passed, str(res)
    assert str(res) == f"Exercise {ex_id}: passed ✓"


def solution(ex_id: str) -> str:
    return open(os.path.join(ROOT, exercise(ex_id).solution)).read()


def wrong(ex_id: str, old: str, new: str) -> str:
    src = solution(ex_id)
    assert old in src, old
    return src.replace(old, new)


def test_1_1_rejects_wrong_sharding():
    # ZeRO-1 sharding the gradients too (one stage early)
    r = check("1.1", wrong("1.1", "stage >= first_sharded_stage", "stage >= max(1, first_sharded_stage - 1)"))
    assert not r.passed and "ZeRO-1: gradients should be" in r.problems[0]
    assert "(ZeRO-1 does not shard the gradients)" in r.problems[0]
    # plain DDP divided by the world size (confusing "data is split" with "model is split")
    r = check("1.1", wrong("1.1", "total / world if stage >= first_sharded_stage else total", "total / world"))
    assert not r.passed and "plain DDP: weights should be" in r.problems[0]
    # a learner who forgets the optimizer states
    r = check("1.1", wrong("1.1", "out[part] = ", "out[part] = 0 if part == 'optimizer' else "))
    assert not r.passed and "optimizer should be" in r.problems[0]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_3_1_rejects_the_textbook_ring_volume(no_leftovers):
    # 2(n-1)/n * S is right only when n divides the parameter count (2110 = 3 * 703 + 1)
    r = check("3.1", wrong("3.1", "return (reduce_scatter + all_gather) * elem", "return 2 * (n - 1) / n * n_params * elem"))
    assert not r.passed
    assert r.problems[0].startswith("ddp-ring, n=3 ranks, 2110 parameters, batch 96: rank 0 sends 11256 bytes per "
                                    "step (measured on real ranks), you predicted 11253.33")
    assert "tensor_split" in r.problems[0]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_3_1_rejects_dataparallel_without_activations(no_leftovers):
    r = check("3.1", wrong("3.1", "(n_params * elem + x_shard + y_shard)", "n_params * elem"))
    assert not r.passed and r.problems[0].startswith("dp-copy, n=2 ranks") and "measured on real ranks" in r.problems[0]
    assert "its shard of the inputs and of the output gradients" in r.problems[0]


def test_5_1_rejects_commands_that_cannot_form_one_job():
    # a different rendezvous id per node: two jobs, not one (found before anything runs)
    r = check("5.1", wrong("5.1", 'f"--rdzv-id={job_id}"', 'f"--rdzv-id=node{node_rank}"'))
    assert not r.passed and "rendezvous ids ['node0', 'node1']" in r.problems[0]
    # each node pointing the rendezvous at itself
    r = check("5.1", wrong("5.1", 'f"--rdzv-endpoint={head}:{port}"', 'f"--rdzv-endpoint=node{node_rank}:{port}"'))
    assert not r.passed and "node 0: torchrun reads --rdzv-endpoint='node0:29500'" in r.problems[0]
    # something torchrun's parser refuses
    r = check("5.1", wrong("5.1", '"--rdzv-backend=c10d"', '"--rdzv-backend"'))
    assert not r.passed and "torchrun's parser rejects it" in r.problems[0]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_6_1_rejects_activations_sent_back_as_gradients(no_leftovers):
    r = check("6.1", wrong("6.1", "dist.send(inp.grad.contiguous(), dst=rank - 1)",
                           "dist.send(inp.detach().contiguous(), dst=rank - 1)"))
    assert not r.passed
    assert any("differs from the single-process model" in p for p in r.problems), r.problems
    assert any(p.startswith("rank 0: the first stage, after step 0") for p in r.problems), r.problems


def test_7_1_rejects_warmup_without_min():
    # p - r warm-up forwards even when there are fewer micro-batches than that
    r = check("7.1", wrong("7.1", "warm = min(m, p - rank)", "warm = p - rank"))
    assert not r.passed
    assert r.problems == ["rank 0 of p=4, m=2: action 2 is ('B', 0) in the model of torch's Schedule1F1B order, yours is "
                          "('F', 2) (torch: F0 F1 B0 B1)"]
    # GPipe's order is not 1F1B
    r = check("7.1", "def one_f_one_b(rank, p, m):\n    return [('F', i) for i in range(m)] + [('B', i) for i in range(m)]\n")
    assert not r.passed and "rank 0 of p=4, m=8: action 4 is ('B', 0)" in r.problems[0]


def test_7_2_rejects_the_formula_a_window_from_zero_and_per_rank_windows():
    r = check("7.2", wrong("7.2", "busy / (len(events) * (last - first))", "busy / (len(events) * last)"))
    assert not r.passed and "the window starts at the earliest event, not at time 0" in r.problems[0], r.problems
    # the drawing's formula is right on every drawing, wrong on a measurement
    r = check("7.2", "def bubble_fraction(timelines):\n    p = len(timelines)\n    m = len(timelines[0]) // 2\n"
                     "    return (p - 1) / (m + p - 1)\n")
    assert not r.passed and r.problems[0].startswith("measured-looking 1f1b events, p=3, m=4: yours is 0.333333"), r.problems
    assert "that is the formula (p-1)/(m+p-1)" in r.problems[0]
    r = check("7.2", "def bubble_fraction(timelines):\n    fr = []\n    for evs in timelines:\n"
                     "        a, b = min(e[3] for e in evs), max(e[4] for e in evs)\n"
                     "        fr.append(1 - sum(e[4] - e[3] for e in evs) / (b - a))\n    return sum(fr) / len(fr)\n")
    assert not r.passed and "one window for all ranks" in r.problems[0], r.problems
