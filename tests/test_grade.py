"""``disttutor grade``: five learners' notebooks (all solved, untouched, one hanging, one partly right,
one syntax error) -> a table, a CSV, bounded time, no process left behind."""
from __future__ import annotations

import csv
import os
import time

import nbformat
import pytest

from disttutor.course import cli
from disttutor.checks import exercise
from disttutor.course.grade import extract, grade, table

from test_exercises import ROOT, stub_source

EXERCISES = ["1.1", "7.1"]  # one answered in-process, one on real ranks


def notebook(path, cells: list[str], nbgrader_id: str | None = None) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# my work")]
    for i, src in enumerate(cells):
        cell = nbformat.v4.new_code_cell(src)
        if nbgrader_id and i == 0:
            cell.metadata["nbgrader"] = {"grade_id": nbgrader_id, "solution": True, "grade": False, "locked": False}
        nb.cells.append(cell)
    nb.cells.append(nbformat.v4.new_code_cell("print(check_zero_memory(zero_memory))"))
    nbformat.write(nb, str(path))


def sol(ex_id: str) -> str:
    return open(os.path.join(ROOT, exercise(ex_id).solution)).read()


@pytest.fixture
def classroom(tmp_path):
    d = tmp_path / "class"
    d.mkdir()
    stubs = [stub_source(exercise(e)) for e in EXERCISES]
    notebook(d / "ada_all_solved.ipynb", [sol("1.1"), "%time 1 + 1\n" + sol("7.1")], nbgrader_id="exercise-1.1")
    notebook(d / "ben_untouched.ipynb", stubs)
    notebook(d / "cy_hangs.ipynb", ["def zero_memory(n_params, bytes_per_param, world, stage):\n    while True:\n"
                                    "        pass\n", stubs[1]])
    notebook(d / "dee_partly_right.ipynb", [sol("1.1"), sol("7.1").replace("min(m, p - rank)", "p - rank")])
    notebook(d / "eve_syntax_error.ipynb", ["def zero_memory(n_params, bytes_per_param, world, stage)\n    return {}\n",
                                            stubs[1]])
    (d / "notes.txt").write_text("not a notebook")
    return d


def test_extract_keeps_definitions_only():
    nb = {"cells": [{"cell_type": "code", "source": "import math\ndef zero_memory(a, b, c, d):\n    return {}\n"
                     "print(check_zero_memory(zero_memory))\n%time x = 1\n"}]}
    assert extract(nb, exercise("1.1")) == "import math\ndef zero_memory(a, b, c, d):\n    return {}\n"
    assert extract({"cells": []}, exercise("1.1")) is None


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_grade_a_classroom(classroom, tmp_path, capsys, no_leftovers):
    t0 = time.perf_counter()
    results, left = grade([str(classroom)], EXERCISES, timeout=75)  # 7.1 launches 3 ranks: ~15 s on an idle 2-core machine; the hanging learner costs this much
    wall = time.perf_counter() - t0
    got = {(r.learner, r.exercise): r for r in results}
    assert left == []
    assert got[("ada_all_solved", "1.1")].status == "pass" and got[("ada_all_solved", "7.1")].status == "pass"
    assert all(got[("ben_untouched", e)].message.startswith(f"still a stub -- Exercise {e}:") for e in EXERCISES)
    assert got[("cy_hangs", "1.1")].status == "timeout" and "no answer within 75s" in got[("cy_hangs", "1.1")].message
    assert got[("cy_hangs", "7.1")].status == "fail"  # the hang did not stop the batch
    assert got[("dee_partly_right", "1.1")].status == "pass"
    assert got[("dee_partly_right", "7.1")].message.startswith("rank 0 of p=4, m=2: action 2 is ('B', 0)")
    assert got[("eve_syntax_error", "1.1")].message == "the code does not compile: expected ':' (line 1)"
    text = table(results)
    assert text.splitlines()[0].split() == ["learner", "1.1", "7.1"] and len(text.splitlines()) == 7
    print(f"\n{text}\nwall {wall:.1f}s, processes left {len(left)}")  # shown with pytest -s

    # the command line: same table, and the CSV
    out_csv = tmp_path / "grades.csv"
    assert cli.main(["grade", str(classroom / "ben_untouched.ipynb"), "--exercises", "1.1", "--csv", str(out_csv)]) == 0
    assert "still a stub -- Exercise 1.1" in capsys.readouterr().out
    rows = list(csv.DictReader(open(out_csv)))
    assert [(r["learner"], r["exercise"], r["status"]) for r in rows] == [("ben_untouched", "1.1", "fail")]


def test_grade_bad_input(tmp_path, capsys):
    assert cli.main(["grade", str(tmp_path / "nothing_here")]) == 2
    assert "is not a notebook (.ipynb) or a folder of notebooks" in capsys.readouterr().err
    assert cli.main(["grade", str(tmp_path), "--exercises", "9.9"]) == 2
    assert "no exercise '9.9'" in capsys.readouterr().err
