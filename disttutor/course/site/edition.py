"""The site's two editions, English and Chinese: where each one's notebooks are, and its frame's words.

Everything that differs between ``index.html`` and ``zh/index.html`` (or ``chapters/04_ddp.html``
and ``zh/chapters/04_ddp.html``) is here; the builder and the templates take an ``Edition`` and
never ask which language it is. The English edition is the site's root; the Chinese edition is
the same tree under ``zh/``, built from ``chapters/zh/NN_topic.ipynb`` (made by
``scripts/translate.py build`` from the English notebook and ``chapters/zh/src/NN_topic.md``),
for the chapters whose zh notebook exists. A chapter's Chinese title is its translation file's
``chapter:title`` entry, looked up as the course's own cards look it up (``translation.lookup``,
in ``chapters/zh/src/``); the English title while that entry is missing or stale.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@dataclass(frozen=True)
class Labels:
    """The frame's words. ``{n}``, ``{title}``, ``{s}``, ``{id}``... are filled in by the builder."""

    site: str            # the landing page's <title>
    chapters: str        # top bar
    glossary: str        # top bar
    search: str          # the search box's placeholder
    nothing: str         # search: "nothing found for “q”", q appended
    side_chapters: str   # sidebar heading
    on_this_page: str    # sidebar heading
    home: str            # prev link of the first chapter
    glossary_next: str   # next link of the last chapter
    page_title: str      # a chapter's <title>
    kicker: str          # "Chapter {n}"
    article: str         # " · article {s}"
    source: str          # the card's source line, before the notebook link
    source_file: str     # the link to the notebook's source (jupytext .py / translation .md)
    chapter_glossary: str
    as_committed: str
    exercise: str        # the banner over an exercise stub: {id}
    proof_code: str      # the toggle over a proof cell's collapsed code (the line it prints stays shown)
    folded_code: str     # the toggle over other collapsed code (a "deeper" cell)
    needs_kernel: str    # under a widget whose controls call Python (HTML)
    live_note: str       # under a live widget's controls, until a control is moved (HTML)
    live_texts: tuple    # (key, text) pairs live.js shows: loading, ready ({ms}), error ({e}), file
    glossary_title: str  # <title> and <h1> of the glossary page
    glossary_intro: str  # HTML
    glossary_chapter: str  # "Chapter {n} — {title}"
    glossary_cols: tuple[str, str, str]
    glossary_none: str   # "Chapter {n} introduces no new glossary terms."
    glossary_hit: str    # a search result's title for a term: {zh} {en}
    runs: str            # "{s:.0f} s"
    not_measured: str
    machine: str         # {cores} {gpus} {torch}


@dataclass(frozen=True)
class Edition:
    lang: str            # <html lang>
    name: str            # what a link to this edition says (the language switch)
    prefix: str          # its folder in the site ("" is the site's root)
    notebooks: str       # the folder of its committed notebooks, NN_topic.ipynb (``dataclasses.replace``
                         # it to build from another folder: a test, a try before the zh notebooks exist)
    source_ext: str      # a notebook's source is <notebooks>/src/<stem><source_ext>
    index_template: str
    labels: Labels
    title_of: Callable[[object], str]  # a chapter card -> its title in this edition

    def notebook(self, stem: str) -> str:
        return os.path.join(self.notebooks, f"{stem}.ipynb")

    def source(self, stem: str) -> str:
        """The file the notebook is built from: the jupytext source, or the chapter's translation file."""
        return os.path.join(self.notebooks, "src", stem + self.source_ext)


EN_LABELS = Labels(
    site="disttutor — PyTorch distributed training, hands-on",
    chapters="chapters", glossary="glossary", search="search the course", nothing="nothing found for ",
    side_chapters="Chapters", on_this_page="On this page", home="← course home", glossary_next="glossary →",
    page_title="{n}. {title}", kicker="Chapter {n}", article=" · article {s}", source="Source: ",
    source_file="jupytext source", chapter_glossary="glossary of this chapter",
    as_committed="outputs as committed (measured when the chapter was built; nothing here was re-run)",
    exercise="<strong>Exercise {id}</strong> — in the notebook this cell is yours to write; here it is the "
             "stub you start from (the solutions are not on this site).",
    proof_code="the check behind the line below (code)", folded_code="code (folded)",
    needs_kernel="This widget is drawn from the state saved when the chapter was built; its controls call "
                 "Python. <strong>Run the notebook to use this widget.</strong>",
    live_note="<strong>Live:</strong> move a control and the course's own Python (the code this widget "
              "runs in the notebook) runs in your browser and redraws. Until then the figure below is the one "
              "saved when the chapter was built.",
    live_texts=(("loading", "loading Python… (Pyodide, in your browser: a few seconds, once per page)"),
                ("ready", "computed in your browser by the course's Python in {ms} ms"),
                ("error", "could not run Python in this browser: {e}"),
                ("file", "Live widgets need the site served over http (python3 -m http.server in the site's "
                         "folder); opened as a file, this page shows the saved figure.")),
    glossary_title="Glossary · 术语表",
    glossary_intro="Every term of the course in Chinese and English, in the chapter that introduces it "
                   "(<code>disttutor/course/glossary.yaml</code>; each chapter ends with its part of this "
                   "table). The Chinese follows the article's usage where it uses the term; the note says "
                   "where it does not.",
    glossary_chapter="Chapter {n} — {title}", glossary_cols=("中文", "English", "note"),
    glossary_none="Chapter {n} introduces no new glossary terms.", glossary_hit="glossary: {zh} — {en}",
    runs="{s:.0f} s", not_measured="not measured", machine="{cores} CPU cores, {gpus} GPUs, torch {torch}")

ZH_LABELS = Labels(
    site="disttutor — PyTorch 分布式训练实战",
    chapters="章节", glossary="术语表", search="搜索课程", nothing="没有找到：",
    side_chapters="章节", on_this_page="本页目录", home="← 课程首页", glossary_next="术语表 →",
    page_title="第 {n} 章 {title}", kicker="第 {n} 章", article=" · 原文 {s}", source="源文件：",
    source_file="翻译文件", chapter_glossary="本章术语",
    as_committed="输出为提交时的结果（构建本章时实测，与英文版是同一次运行；此处没有重新运行）",
    exercise="<strong>练习 {id}</strong> — 在 notebook 里，这个单元格由你来写；这里显示的是你开始时的"
             "桩代码（本站不提供答案）。",
    proof_code="下面这行结论背后的检查（代码）", folded_code="代码（已折叠）",
    needs_kernel="这个小部件（widget）按构建本章时保存的状态绘制；它的控件要调用 Python。"
                 "<strong>运行 notebook 才能使用它。</strong>",
    live_note="<strong>实时：</strong>移动任一控件，课程自己的 Python 代码（这个小部件在 notebook 里运行的同一份代码）"
              "就会在你的浏览器里运行并重绘。在此之前，下面是构建本章时保存的图。",
    live_texts=(("loading", "正在加载 Python…（Pyodide，在你的浏览器里运行：每页一次，需要几秒钟）"),
                ("ready", "由课程的 Python 在你的浏览器里计算，用时 {ms} 毫秒"),
                ("error", "无法在此浏览器中运行 Python：{e}"),
                ("file", "实时小部件需要通过 http 访问本站（在站点目录里运行 python3 -m http.server）；"
                         "以文件方式打开时，本页只显示保存的图。")),
    glossary_title="术语表 · Glossary",
    glossary_intro="课程中的每个术语，中英对照，列在引入它的那一章下（<code>disttutor/course/glossary.yaml</code>；"
                   "每章末尾列出本章的部分）。原文用到某个术语时，中文沿用原文的说法；原文没有用时，备注会说明。",
    glossary_chapter="第 {n} 章 — {title}", glossary_cols=("中文", "English", "备注"),
    glossary_none="第 {n} 章没有引入新术语。", glossary_hit="术语表：{zh} — {en}",
    runs="{s:.0f} 秒", not_measured="未测量", machine="{cores} 个 CPU 核、{gpus} 块 GPU、torch {torch}")


def _zh_title(card) -> str:
    from disttutor.course import translation

    return translation.lookup(card.stem, "chapter:title", card.title) or card.title


EN = Edition("en", "English", "", os.path.join(ROOT, "chapters"), ".py", "index_body.html.j2", EN_LABELS,
             lambda card: card.title)
ZH = Edition("zh", "中文", "zh/", os.path.join(ROOT, "chapters", "zh"), ".md", "index_body_zh.html.j2", ZH_LABELS,
             _zh_title)
