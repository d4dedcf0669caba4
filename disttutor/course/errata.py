"""The article's errata, one index: every correction box of the chapters, in one table (chapter 0).

A chapter corrects the article in a collapsible box whose summary starts "**The article says**"
(in the Chinese edition "**原文说**"); its first sentence says what is true today. This module reads
those boxes from the chapters' sources (or their signed translations), so the index can never
disagree with the boxes: article section (a § the box names, else the chapter's), what the article
says, what is true today, and the chapter and cell that show it. Kernel side; imports no torch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Erratum", "errata", "errata_markdown", "index", "ERRATA_CALL"]

ERRATA_CALL = "disttutor.course.errata.index()"  # the cell's call (the zh build finds it)
_BOX = re.compile(r"<details><summary><b>(?:The article says|原文说)</b>\s*(?P<says>.*?)</summary>\s*(?P<body>.*?)</details>",
                  re.S)
_SECTION = re.compile(r"§\s?\d+(?:\.\d+)*")
_SENTENCE = re.compile(r"(.+?(?:[。！？]|[.!?](?=\s|$)))\s*", re.S)
# The sentence that states the correction starts so; else the box's first sentence does.
_TODAY = re.compile(r"^(?:\*\*)?(?:Today|Actually|In fact|In torch|实际上|如今|现在|今天|事实上)")


@dataclass(frozen=True)
class Erratum:
    chapter: int
    cell: str        # the markdown cell's id (md-NN-KK)
    section: str     # the article's section
    says: str
    today: str


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _markdown(html: str) -> str:
    return re.sub(r"</?code>", "`", re.sub(r"</?b>", "**", html))


def errata(lang: str = "en") -> list[Erratum]:
    from disttutor.course import zh_units as zu
    from disttutor.course.chapters import chapter

    out = []
    for n in zu.numbers():
        cells = zu._markdown_cells(n)
        if lang == "zh":
            zh = {e.key: e.text for e in zu.entries(n)}
            cells = [(cid, zh.get(cid, src)) for cid, src in cells]
        for cid, src in cells:
            for m in _BOX.finditer(src):
                body = _one_line(m["body"])
                sentences = [s.strip() for s in _SENTENCE.findall(body)] or [body]
                first = next((s for s in sentences if _TODAY.match(s)), sentences[0])
                sec = _SECTION.search(m["says"] + " " + body)
                out.append(Erratum(n, cid, sec.group(0).replace(" ", "") if sec else chapter(n).sections,
                                   _markdown(_one_line(m["says"])), _markdown(first)))
    return out


_HEAD = {"en": "| article | the article says | today | shown in |\n|---|---|---|---|",
         "zh": "| 原文章节 | 原文说 | 今天 | 见 |\n|---|---|---|---|"}
_WHERE = {"en": "chapter {n} ({cell})", "zh": "第 {n} 章（{cell}）"}


def errata_markdown(lang: str | None = None) -> str:
    """The index as a Markdown table, in the notebook's language."""
    from disttutor.course.chapters import chapter
    from disttutor.course.lang import checked

    lang = checked(lang)
    rows = [_HEAD[lang]]
    for e in errata(lang):
        link = f"[{_WHERE[lang].format(n=e.chapter, cell=e.cell)}]({chapter(e.chapter).stem}.ipynb)"
        rows.append(f"| {e.section} | {e.says.replace('|', '/')} | {e.today.replace('|', '/')} | {link} |")
    return "\n".join(rows)


def index():
    """Display the index (chapter 0's cell)."""
    from IPython.display import Markdown

    return Markdown(errata_markdown())
