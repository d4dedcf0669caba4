"""Draw it, derive it, then measure it: schematics, derivations, worked problems and figure captions.

Counts tagged cells in the committed notebooks (``schematic``: a code cell drawing an idealised
figure; ``derivation``: a markdown cell deriving a rule; ``problem``: one worked problem a cell) and
checks the problems themselves (``disttutor.course.problems``): each one's own answer passes, realistic
wrong answers (off by 2x, by the factor n/(n-1) people drop, by 10x) do not, and the Chinese templates
keep the English placeholders. Launches nothing (a few seconds).
"""
from __future__ import annotations

import glob
import json
import math
import os
import re

import pytest

from disttutor.course import problems as pr
from disttutor.course.translation import lookup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = {os.path.basename(p)[:2]: p for p in sorted(glob.glob(os.path.join(ROOT, "chapters", "[0-9][0-9]_*.ipynb")))}
MECHANISM = [f"{n:02d}" for n in range(1, 13)]  # chapters 1-12 each teach mechanisms (chapter 13: its own rules)
PROBLEMS = pr.all_problems()
FIGURE = ("image/png", "image/svg+xml", "application/vnd.jupyter.widget-view+json")
CALL = re.compile(r'\bproblem\(\s*"(?P<id>\d+\.p\d+)"')


def _cells(ch: str) -> list[dict]:
    return json.load(open(NOTEBOOKS[ch], encoding="utf-8"))["cells"]


def _tags(c: dict) -> list[str]:
    return c.get("metadata", {}).get("tags", [])


def _src(c: dict) -> str:
    return "".join(c["source"]) if isinstance(c["source"], list) else c["source"]


def _has_figure(c: dict) -> bool:
    return c["cell_type"] == "code" and any(k in o.get("data", {}) for o in c.get("outputs", []) for k in FIGURE)


def _of(ch: str) -> dict[str, pr.Problem]:
    return {k: p for k, p in PROBLEMS.items() if p.chapter == int(ch)}


@pytest.mark.parametrize("ch", MECHANISM)
def test_a_mechanism_chapter_draws_derives_and_poses_problems(ch):
    cells = _cells(ch)
    schematics = [i for i, c in enumerate(cells) if "schematic" in _tags(c)]
    assert schematics, f"chapter {ch}: no cell tagged schematic (an idealised figure drawn from the run's parameters)"
    for i in schematics:
        c = cells[i]
        assert c["cell_type"] == "code" and "proof" not in _tags(c), f"chapter {ch} cell {i}: a schematic is a learner cell"
        assert _has_figure(c), f"chapter {ch} cell {i}: a schematic cell shows no figure"
    derivations = [c for c in cells if "derivation" in _tags(c)]
    assert derivations, f"chapter {ch}: no markdown cell tagged derivation"
    for c in derivations:
        assert c["cell_type"] == "markdown" and "$" in _src(c), f"chapter {ch}: a derivation is markdown with LaTeX"
    shown = [m["id"] for c in cells if "problem" in _tags(c) for m in [CALL.search(_src(c))] if m]
    assert len(shown) == len([c for c in cells if "problem" in _tags(c)]), \
        f"chapter {ch}: every cell tagged problem calls problem(\"N.pK\", ...)"
    assert len(shown) == len(set(shown)) and set(shown) == set(_of(ch)), \
        f"chapter {ch}: problem cells {sorted(shown)} are not the chapter's problems {sorted(_of(ch))}, one cell each"


@pytest.mark.parametrize("ch", MECHANISM)
def test_a_chapter_poses_enough_problems_with_real_hardware_and_the_learners_run(ch):
    ps = list(_of(ch).values())
    assert len(ps) >= 4, f"chapter {ch}: {len(ps)} problems, at least 4"
    hardware = [p for p in ps if p.quantitative and p.constants]
    assert 2 * len(hardware) >= len(ps), \
        f"chapter {ch}: {len(hardware)} of {len(ps)} problems work with real hardware's numbers, at least half"
    assert any(p.run for p in ps), f"chapter {ch}: no problem whose numbers the learner checks against their run"
    for p in hardware:
        for c in p.constants:
            assert c.tag in ("reported", "derived") and c.source, f"{p.id}: a constant without a published source"


@pytest.mark.parametrize("pid", list(PROBLEMS))
def test_a_problem_accepts_its_answer_and_rejects_realistic_wrong_ones(pid):
    p = PROBLEMS[pid]
    assert set(p.run) == set(p.example), f"{pid}: example must give exactly the run's keywords {p.run}"
    vals = p.values(**p.example)
    for key in ("question", "working"):
        missing = pr.placeholders(getattr(p, key)) - set(vals)
        assert not missing, f"{pid}: {key} names {missing}, which values() does not give"
    text = pr.render(pid, None, p.example)
    assert "<details>" in text, f"{pid}: the worked answer is collapsed until the learner has answered"
    if p.answer is None:
        return
    ans = vals[p.answer]
    assert isinstance(ans, (int, float)) and math.isfinite(ans) and ans != 0, f"{pid}: answer {ans!r}"
    assert ": right**" in pr.render(pid, ans, p.example)
    assert 0 < p.rel_tol < 0.34, f"{pid}: a tolerance wide enough to pass a factor-2 mistake is no check"
    for wrong in (2 * ans, ans / 2, 10 * ans):
        assert "not yet" in pr.render(pid, wrong, p.example), f"{pid}: {wrong} (a realistic mistake) passes"


@pytest.mark.parametrize("pid", list(PROBLEMS))
def test_a_problem_renders_in_chinese_with_the_same_numbers(pid):
    from disttutor.course.chapters import chapter

    p = PROBLEMS[pid]
    for key in ("question", "working"):
        zh = lookup(chapter(p.chapter).stem, f"problem:{pid}:{key[0]}", getattr(p, key))
        assert zh is not None, f"{pid}: no signed Chinese for its {key} (scripts/translate.py stale {p.chapter})"
        assert pr.placeholders(zh) == pr.placeholders(getattr(p, key)), f"{pid}: the Chinese {key} fills other numbers"
    assert "习题" in pr.render(pid, None, p.example, lang="zh")


@pytest.mark.parametrize("ch", sorted(NOTEBOOKS))
def test_every_figure_has_a_caption_saying_what_to_look_at(ch):
    """After a cell that shows a figure, the next cell that is not a proof is a one-line markdown
    caption (tag caption)."""
    cells = _cells(ch)
    missing = []
    for i, c in enumerate(cells):
        if not _has_figure(c):
            continue
        j = i + 1
        while j < len(cells) and "proof" in _tags(cells[j]):
            j += 1
        nxt = cells[j] if j < len(cells) else None
        if nxt is None or nxt["cell_type"] != "markdown" or "caption" not in _tags(nxt):
            missing.append(i)
        elif len(_src(nxt).strip().splitlines()) != 1 or len(_src(nxt).split()) > 40:
            missing.append(i)
    assert not missing, f"chapter {ch}: figure cells without a one-line caption (tag caption) after them: {missing}"


def test_the_problem_card_says_right_and_wrong_on_a_made_up_problem():
    p = pr.Problem("99.p1", "A ring of {n} ranks: how many steps?", "2(n-1) = {steps}",
                   lambda: {"n": 4, "steps": 6}, answer="steps", rel_tol=0.01)
    pr.PROBLEMS["99.p1"] = p
    try:
        assert ": right**" in pr.render("99.p1", 6)
        assert "not yet" in pr.render("99.p1", 3) and "2(n-1) = 6" not in pr.render("99.p1", 3).split("<details>")[0]
        with pytest.raises(ValueError, match="is a number"):
            pr.render("99.p1", "six")
        with pytest.raises(ValueError, match="no problem"):
            pr.render("99.p7")
    finally:
        del pr.PROBLEMS["99.p1"]
