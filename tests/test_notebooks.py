"""Committed chapters are built from their sources and carry outputs nbval can compare.

nbval itself (configured in pyproject.toml) executes every chapter; this file
checks what nbval cannot: that the committed notebook is not stripped, is not
stale against its source, and has something that would fail if it were wrong.
"""
from __future__ import annotations

import glob
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import build_notebooks  # noqa: E402

SOURCES = sorted(glob.glob(os.path.join(ROOT, "chapters", "src", "[0-9][0-9]_*.py")))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "chapters", "[0-9][0-9]_*.ipynb")))


def test_every_chapter_has_source_and_notebook():
    assert NOTEBOOKS, "no chapters"
    names = lambda paths: {os.path.basename(p).rsplit(".", 1)[0] for p in paths}  # noqa: E731
    assert names(SOURCES) == names(NOTEBOOKS)


@pytest.mark.parametrize("src", SOURCES, ids=os.path.basename)
def test_notebook_is_built_from_source_and_executed(src):
    nb = json.load(open(build_notebooks.notebook_path(src)))
    cells = nb["cells"]
    want = build_notebooks.parse(open(src).read())
    assert [(c["cell_type"], "".join(c["source"])) for c in cells] == [(c["type"], c["source"]) for c in want], \
        f"{os.path.basename(src)}: notebook is stale; run `python3 course.py execute {os.path.relpath(src, ROOT)}`"
    code = [c for c in cells if c["cell_type"] == "code"]
    assert all(c.get("execution_count") for c in code), "some cells were never executed (stripped notebook?)"
    counts = [c["execution_count"] for c in code]
    assert counts == list(range(1, len(code) + 1)), "cells were not executed top to bottom in one fresh kernel"
    tagged = [c for c in code if "nbval-check-output" in c.get("metadata", {}).get("tags", [])]
    assert tagged, "no cell is tagged nbval-check-output: nbval would compare nothing"
    assert all(c["outputs"] for c in tagged), "a tagged cell has no output to compare"
    assert any("assert " in "".join(c["source"]) for c in code), "no assert backs the chapter's claims"
    errors = [o for c in code for o in c["outputs"] if o.get("output_type") == "error"]
    assert not errors, f"committed with an error: {errors[0].get('ename')}: {errors[0].get('evalue')}"


@pytest.mark.parametrize("src", SOURCES, ids=os.path.basename)
def test_cell_metadata_follows_the_source(src):
    """Tags and nbgrader marks in the committed notebook are what the source implies (nbval reads the
    tags; nbgrader and ``disttutor grade`` read ``grade_id``): refreshed by
    ``scripts/build_notebooks.py --metadata-only`` when only the marks changed."""
    nb = json.load(open(build_notebooks.notebook_path(src)))
    got = [{k: c["metadata"][k] for k in ("tags", "jupyter", "nbgrader") if k in c["metadata"]} for c in nb["cells"]]
    want = [build_notebooks.cell_metadata(c) for c in build_notebooks.parse(open(src).read())]
    assert got == want, f"{os.path.basename(src)}: cell metadata differs from the source's; run " \
                        f"`python scripts/build_notebooks.py --metadata-only {os.path.relpath(src, ROOT)}`"


def test_every_exercise_has_one_nbgrader_solution_cell_and_a_locked_check():
    from disttutor.checks.registry import EXERCISES

    marks: dict[str, list[str]] = {}
    for src in SOURCES:
        for c in build_notebooks.parse(open(src).read()):
            g = build_notebooks.cell_metadata(c).get("nbgrader")
            if g:
                marks.setdefault(g["grade_id"], []).append(os.path.basename(src)[:2])
    for e in EXERCISES:
        assert marks.get(f"exercise-{e.id}") == [f"{e.chapter:02d}"], (e.id, marks.get(f"exercise-{e.id}"))
        assert f"{e.chapter:02d}" in marks.get(f"check-{e.id}", []), f"no cell of chapter {e.chapter} calls {e.checker}"
