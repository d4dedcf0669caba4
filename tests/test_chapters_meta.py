"""Chapter cards and the glossary: quoted headings exist in the article, every entry is well-formed."""
from __future__ import annotations

import glob
import json
import os

import pytest

from disttutor.course import chapters

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTICLE = os.path.join(ROOT, "..", "shared", "seed", "article-zh.txt")
if not os.path.exists(ARTICLE):  # a worktree lies one level deeper than the main checkout
    ARTICLE = os.path.join(ROOT, "..", "..", "shared", "seed", "article-zh.txt")


@pytest.mark.skipif(not os.path.exists(ARTICLE), reason="the article lies beside the checkout (../shared/seed)")
def test_every_quoted_heading_is_in_the_article():
    text = open(ARTICLE, encoding="utf-8").read().splitlines()
    for c in chapters.CHAPTERS.values():
        for heading in c.zh:
            assert heading in text, f"chapter {c.number}: {heading!r} is not a heading of the article"


def test_header_and_glossary_render():
    md = chapters.header_markdown(2, {"seconds": 12.3, "cores": 2, "gpus": 0, "torch": "2.13.0"})
    assert "about 12 s" in md and "2 CPU cores" in md and "3. PyTorch分布式训练核心概念" in md
    for e in chapters._glossary():
        assert e["chapter"] in chapters.CHAPTERS and e["zh"].strip() and e["en"].strip()
    assert "微批次" in chapters.glossary_markdown(7)
    with pytest.raises(ValueError, match="no chapter 99"):
        chapters.header_markdown(99)


SOURCES = sorted(glob.glob(os.path.join(ROOT, "chapters", "src", "[0-9][0-9]_*.py")))


@pytest.mark.parametrize("path", SOURCES, ids=os.path.basename)
def test_chapter_opens_with_its_card_and_ends_with_its_glossary(path):
    import sys

    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from build_notebooks import HEADER_TAG, parse

    n = int(os.path.basename(path)[:2])
    cells = parse(open(path, encoding="utf-8").read())
    code = [c for c in cells if c["type"] == "code"]
    assert HEADER_TAG in code[0]["tags"], "the first code cell must be tagged chapter-header"
    assert f"disttutor.course.chapters.header({n})" in code[0]["source"]
    assert cells[0]["type"] == "markdown" and cells[0]["source"].startswith("# "), "a title and intro come first"
    assert cells[-1]["type"] == "code" and cells[-1]["source"].strip().endswith(f"disttutor.course.chapters.glossary({n})")
    if n in chapters.CHAPTERS and os.path.basename(path)[:-3] == chapters.CHAPTERS[n].stem:
        assert chapters.terms(n), f"chapter {n} introduces no glossary terms: add them to disttutor/course/glossary.yaml"


def test_glossary_terms_are_unique_and_honest_about_the_article():
    entries = chapters._glossary()
    zh = [e["zh"] for e in entries]
    assert len(zh) == len(set(zh)), "a term is listed twice: one chapter introduces it"
    assert [e["chapter"] for e in entries] == sorted(e["chapter"] for e in entries), "keep entries in chapter order"
    for e in entries:
        for v in e.values():
            assert not (isinstance(v, str) and v.rstrip().endswith("(")), f"{e}: quote values that contain commas"
    if os.path.exists(ARTICLE):
        text = open(ARTICLE, encoding="utf-8").read()
        for e in entries:
            says_absent = "not in the article" in e.get("note", "")
            # A term marked "not in the article" must really be absent, and an unmarked one present.
            assert says_absent != (e["zh"] in text), f"{e['zh']}: note disagrees with the article"


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "chapters", "[0-9][0-9]_*.ipynb"))),
                         ids=os.path.basename)
def test_the_committed_glossary_output_is_the_glossary_now(path):
    n = int(os.path.basename(path)[:2])
    cell = json.load(open(path, encoding="utf-8"))["cells"][-1]
    shown = "".join(next(o for o in cell["outputs"] if "text/markdown" in o.get("data", {}))["data"]["text/markdown"])
    assert shown == chapters.glossary_markdown(n, lang="en"), \
        "glossary.yaml changed: `python scripts/build_notebooks.py --glossary-only` re-renders it (no rerun)"
