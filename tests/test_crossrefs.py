"""Every cross-reference in a chapter points somewhere real.

A chapter that says "chapter 10 removes this" or "the article's §7.3" sends the learner looking.
This test fails when a chapter source (``chapters/src/NN_*.py``) names

* a chapter that the course does not have (chapters are ``disttutor.course.chapters.CHAPTERS``),
* a section of the article that the article does not have (its numbered headings),
* a chapter notebook (``NN_topic.ipynb`` link) that is not one of the course's chapters, or
* after a link to a chapter that exists, a topic in backquotes (``[04 DDP](04_ddp.ipynb)
  (`DistributedSampler`)``) that the linked chapter never mentions.
"""
from __future__ import annotations

import glob
import os
import re

import pytest

from disttutor.course.chapters import CHAPTERS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = sorted(glob.glob(os.path.join(ROOT, "chapters", "src", "[0-9][0-9]_*.py")))
ARTICLE = os.path.join(ROOT, "..", "shared", "seed", "article-zh.txt")
if not os.path.exists(ARTICLE):  # a worktree lies one level deeper than the main checkout
    ARTICLE = os.path.join(ROOT, "..", "..", "shared", "seed", "article-zh.txt")

# "chapter 4", "Chapter 4", "chapters 6–7", "chapters 09 and 10", "chapters 8, 9 or 11"
CHAPTER_REF = re.compile(r"\b[Cc]hapters?\s+(\d+(?:\s*(?:[–—-]|,|\band\b|\bor\b)\s*\d+)*)")
SECTION_REF = re.compile(r"§\s?(\d+(?:\.\d+)?)")
NOTEBOOK_LINK = re.compile(r"\]\((\d\d_[\w-]+)\.ipynb\)(?:\s*\(([^()]*)\))?")


def chapter_numbers(ref: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", ref)]


def article_sections(text: str) -> set[str]:
    """'3', '3.1', ... : the numbered headings of the article (subsection lines like '7.3 PyTorch实现示例';
    top-level sections are every number up to the last one that has subsections or a heading)."""
    subs = set(re.findall(r"^(\d+\.\d+)\s+\S", text, flags=re.M))
    tops = {int(s.split(".")[0]) for s in subs}
    return subs | {str(n) for n in range(1, max(tops) + 1)}


def refs(path: str):
    """(line number, kind, value, line) for every reference in a chapter source."""
    for i, line in enumerate(open(path, encoding="utf-8"), 1):
        for m in CHAPTER_REF.finditer(line):
            for n in chapter_numbers(m.group(1)):
                yield i, "chapter", n, line.strip()
        for m in SECTION_REF.finditer(line):
            yield i, "section", m.group(1), line.strip()
        for m in NOTEBOOK_LINK.finditer(line):
            yield i, "notebook", (m.group(1), m.group(2) or ""), line.strip()


def _name(path):
    return os.path.basename(path)


@pytest.mark.parametrize("path", SOURCES, ids=_name)
def test_referenced_chapters_exist(path):
    bad = [f"line {i}: chapter {n} -- {line[:100]}" for i, kind, n, line in refs(path)
           if kind == "chapter" and n not in CHAPTERS]
    assert not bad, f"{_name(path)} refers to chapters the course does not have ({sorted(CHAPTERS)}):\n" + "\n".join(bad)


@pytest.mark.skipif(not os.path.exists(ARTICLE), reason="the article lies beside the checkout (shared/seed)")
@pytest.mark.parametrize("path", SOURCES, ids=_name)
def test_referenced_article_sections_exist(path):
    sections = article_sections(open(ARTICLE, encoding="utf-8").read())
    bad = [f"line {i}: §{s} -- {line[:100]}" for i, kind, s, line in refs(path)
           if kind == "section" and s not in sections]
    assert not bad, f"{_name(path)} cites sections the article does not have:\n" + "\n".join(bad)


@pytest.mark.parametrize("path", SOURCES, ids=_name)
def test_linked_chapters_exist_and_hold_the_topic(path):
    stems = {c.stem: c for c in CHAPTERS.values()}
    bad = []
    for i, kind, value, line in refs(path):
        if kind != "notebook":
            continue
        stem, topic = value
        if stem not in stems:
            bad.append(f"line {i}: {stem}.ipynb is not a chapter")
            continue
        target = os.path.join(ROOT, "chapters", "src", stem + ".py")
        if not os.path.exists(target):
            bad.append(f"line {i}: {stem}.ipynb is linked but has no source yet")
            continue
        body = open(target, encoding="utf-8").read()
        for word in re.findall(r"`([^`]+)`", topic):
            if word not in body:
                bad.append(f"line {i}: {stem} is cited for `{word}`, which it never mentions")
    assert not bad, f"{_name(path)}:\n" + "\n".join(bad)


# Where the course teaches a topic that earlier chapters point ahead to. A line that names one of
# these and refers to chapters must name the topic's home among them.
TOPIC_HOME = {"FSDP": 11, "fully_shard": 11, "tensor parallel": 11, "autocast": 8, "GradScaler": 8,
              "torch.profiler": 9, "memory_summary": 9, "DistributedSampler": 4, "1F1B": 7, "mp.spawn": 5}


@pytest.mark.parametrize("path", SOURCES, ids=_name)
def test_forward_references_point_to_the_topics_home(path):
    bad = []
    for i, line in enumerate(open(path, encoding="utf-8"), 1):
        named = {n for m in CHAPTER_REF.finditer(line) for n in chapter_numbers(m.group(1))}
        for topic, home in TOPIC_HOME.items():
            if named and topic in line and home not in named and CHAPTERS.get(home) is not None \
                    and int(_name(path)[:2]) != home:
                bad.append(f"line {i}: {topic} is chapter {home}'s, not chapter {sorted(named)} -- {line.strip()[:100]}")
    assert not bad, f"{_name(path)}:\n" + "\n".join(bad)


def test_the_detectors(tmp_path):
    assert chapter_numbers("6–7") == [6, 7] and chapter_numbers("09 and 10") == [9, 10]
    assert [m.group(1) for m in CHAPTER_REF.finditer("see chapters 8, 9 or 12 and Chapter 3")] == ["8, 9 or 12", "3"]
    assert article_sections("1. 引言\n2. 基础\n2.1 为什么\n7.3 PyTorch实现示例\n") == {"1", "2", "3", "4", "5", "6", "7",
                                                                                "2.1", "7.3"}
    src = tmp_path / "99_x.py"
    src.write_text("# see chapter 42, §7.9, and [07](07_pipeline_parallel.ipynb) (`no_such_word_anywhere`)\n")
    kinds = [(k, v) for _, k, v, _ in refs(str(src))]
    assert kinds == [("chapter", 42), ("section", "7.9"),
                     ("notebook", ("07_pipeline_parallel", "`no_such_word_anywhere`"))]
