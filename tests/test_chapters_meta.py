"""Chapter cards and the glossary: quoted headings exist in the article, every entry is well-formed."""
from __future__ import annotations

import os

import pytest

from disttutor import chapters

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTICLE = os.path.join(ROOT, "..", "shared", "seed", "article-zh.txt")


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
