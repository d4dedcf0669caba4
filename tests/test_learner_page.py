"""The learner's page: what a learner reads in a committed chapter follows CONTRIBUTING.md's rules.

Two layers: learner cells (what a learner would write, and its short printed output) and *proof* cells
(tag ``proof``; input collapsed; one printed line). ``scripts/learner_view.py`` counts; this file enforces
what can be counted. Rules that hold for every chapter are checked on every chapter; the rules of a
rewritten page (line length, sentences per cell, word budget, the plain torch API before the course's
first launch) are checked on the chapters listed in ``REWRITTEN`` -- a chapter joins the list when its
page is rewritten, and the list only grows. Reads committed notebooks only: launches nothing (< 2 s).
"""
from __future__ import annotations

import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import learner_view as lv  # noqa: E402

NOTEBOOKS = lv.notebooks("en")
ZH = lv.notebooks("zh")
# Chapters whose page has been rewritten as two layers (the rules below hold for them in full).
REWRITTEN: set[str] = {"00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13"}
IDS = [os.path.basename(p)[:2] for p in NOTEBOOKS]


def _views():
    return {os.path.basename(p)[:2]: lv.chapter_view(p) for p in NOTEBOOKS}


VIEWS = _views()


@pytest.mark.parametrize("ch", IDS)
def test_a_proof_cell_is_collapsed_and_prints_one_line(ch):
    v = VIEWS[ch]
    assert v["proof_shown"] == 0, f"chapter {ch}: {v['proof_shown']} proof cell(s) with the input shown " \
                                  "(python scripts/build_notebooks.py --metadata-only)"
    many = [(i, n) for i, n in v["proof_lines"] if n > 1]
    assert not many, f"chapter {ch}: proof cells print one line (the claim and its value); cell, lines: {many}"


@pytest.mark.parametrize("ch", IDS)
def test_nothing_about_how_the_course_is_built_or_tested_reaches_the_learner(ch):
    """Every chapter: no issue number, test or benchmark path, CI, nbval, commit hash or "build machine" in
    the markdown or in what a learner cell prints (teacher-facing notes live in TEACHING.md)."""
    refs = VIEWS[ch]["internal"]
    assert not refs, f"chapter {ch}: (cell, words) {refs}"


@pytest.mark.parametrize("ch", sorted(REWRITTEN))
def test_a_rewritten_page_keeps_its_rules(ch):
    v = VIEWS[ch]
    assert not v["internal"], f"chapter {ch}: how the course is built or tested reaches the learner: {v['internal']}"
    assert not v["long_lines"], f"chapter {ch}: printed lines over {lv.MAX_LINE_WORDS} words: " \
                                f"{[(i, ln[:80]) for i, ln in v['long_lines']]}"
    assert not v["wordy_cells"], f"chapter {ch}: cells printing more than {lv.MAX_SENTENCES} sentences: " \
                                 f"{v['wordy_cells']}"
    assert v["words"] <= lv.CHAPTER_WORDS, f"chapter {ch}: {v['words']} words to read (markdown + printed), " \
                                           f"budget {lv.CHAPTER_WORDS}"
    if v["first_launch_cell"] is not None and v["first_api_cell"] is not None:
        assert v["first_api_cell"] < v["first_launch_cell"], \
            f"chapter {ch}: the course's first launch (cell {v['first_launch_cell']}) comes before the plain " \
            f"torch.distributed code a learner would write (cell {v['first_api_cell']})"


def test_the_course_fits_its_reading_budget():
    """Markdown + printed words over every chapter (proof cells not counted): at most COURSE_WORDS, about
    3.75 hours at 200 words a minute before any exercise."""
    words = {ch: v["words"] for ch, v in VIEWS.items()}
    assert sum(words.values()) <= lv.COURSE_WORDS, f"{sum(words.values())} words to read, budget " \
                                                   f"{lv.COURSE_WORDS}: {words}"


def test_the_zh_edition_has_the_same_proof_cells():
    """The zh notebooks are built from the English run: the same cells are proof cells, collapsed."""
    for en, zh in zip(NOTEBOOKS, ZH):
        a, b = json.load(open(en))["cells"], json.load(open(zh))["cells"]
        b = [c for c in b if "zh-note" not in c.get("metadata", {}).get("tags", [])]  # a translator's note: zh only
        pa = [i for i, c in enumerate(a) if lv.is_proof(c)]
        pb = [i for i, c in enumerate(b) if lv.is_proof(c)]
        assert pa == pb, f"{os.path.basename(zh)}: proof cells differ from the English ({pa} vs {pb})"


def test_the_detectors_catch_what_they_name():
    """Each counter on a made-up chapter: a wrong page is caught, a right one passes."""
    assert lv.INTERNAL.search("Target (issue 23): met") and lv.INTERNAL.search("see tests/test_ch04_ddp.py")
    assert lv.INTERNAL.search("checked by nbval") and lv.INTERNAL.search("measured on the build machine")
    assert not lv.INTERNAL.search("the rank that issued the collective") and not lv.INTERNAL.search("CIFAR")
    assert lv.long_literals('print(f"the ratio is {r:.2f}, which means the overlap hides most of the time")')
    assert not lv.long_literals('print(f"ratio {r:.2f}")')
    assert lv.TORCH_API.search("dist.all_reduce(x)") and lv.TORCH_API.search("model = DDP(model)")
    assert not lv.TORCH_API.search("res = disttutor.launch('hello', nproc=2)")
    cell = {"cell_type": "code", "metadata": {"tags": ["proof"]}, "source": "print(check_x(res))",
            "outputs": [{"output_type": "stream", "name": "stdout", "text": "ok: one\nand two\n"}]}
    assert lv.is_proof(cell) and lv.printed(cell).splitlines() == ["ok: one", "and two"]
    assert lv.sentences("One. Two. Three. Four.") == 4 and lv.words("rank 0 sent 4 bytes") == 5
    long = " ".join(["word"] * 30)
    table = {"cell_type": "code", "metadata": {}, "source": "show()",
             "outputs": [{"output_type": "stream", "name": "stdout", "text": f"| {long} | x |\n{long}\n"}]}
    nb = {"cells": [table], "metadata": {}}
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".ipynb", delete=False) as f:
        json.dump(nb, f)
    assert [ln for _, ln in lv.chapter_view(f.name)["long_lines"]] == [long], "a prose line is caught, a table row is not"
    table["outputs"][0]["text"] = "| One. Two. | Three. Four. |\n"
    json.dump(nb, open(f.name, "w"))
    assert lv.chapter_view(f.name)["wordy_cells"] == [], "a table's rows are records, not sentences"
    table["outputs"][0]["text"] = "One. Two. Three. Four.\n"
    json.dump(nb, open(f.name, "w"))
    assert lv.chapter_view(f.name)["wordy_cells"] == [0]
    os.unlink(f.name)
