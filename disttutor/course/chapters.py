"""What each chapter is, what it costs, and the words it teaches (every chapter).

Each chapter opens with ``disttutor.course.chapters.header(N)`` and ends with
``disttutor.course.chapters.glossary(N)``. The header says what the chapter needs,
which section of the Chinese article it follows (with the article's own
heading), how long it ran when it was last built (measured by
``scripts/build_notebooks.py``, stored in ``chapters/build_times.json``) and
where to turn when something fails. The glossary is drawn from one file,
``disttutor/course/glossary.yaml``, so every chapter uses the same words.

This module imports no torch.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Chapter", "CHAPTERS", "chapter", "header", "header_markdown", "glossary", "glossary_markdown",
           "terms", "BUILD_TIMES", "HEADER_CALL", "GLOSSARY_CALL"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_TIMES = os.path.join(ROOT, "chapters", "build_times.json")
GLOSSARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "glossary.yaml")

CPU_ONLY = "CPU only (GPUs optional: the same code picks NCCL and one GPU per rank)"


@dataclass(frozen=True)
class Chapter:
    number: int
    stem: str                      # chapters/<stem>.ipynb
    title: str
    sections: str                  # the article's sections, e.g. "§3"
    zh: tuple[str, ...]            # the article's headings, verbatim
    needs: str = CPU_ONLY

    @property
    def notebook(self) -> str:
        return f"chapters/{self.stem}.ipynb"


# The article's headings are quoted verbatim from shared/seed/article-zh.txt
# (tests/test_chapters_meta.py checks that each one occurs in it).
CHAPTERS: dict[int, Chapter] = {c.number: c for c in [
    Chapter(0, "00_setup", "Setup: your first distributed job", "—", ()),
    Chapter(1, "01_why_distributed", "Why distributed training", "§1, §2",
            ("1. 引言", "2. 分布式训练基础")),
    Chapter(2, "02_process_groups_collectives", "Process groups and collectives", "§3",
            ("3. PyTorch分布式训练核心概念",)),
    Chapter(3, "03_data_parallel", "DataParallel", "§4", ("4. 数据并行（DataParallel）",),
            needs="CPU only; the real nn.DataParallel path needs 2+ GPUs (the chapter says what runs without)"),
    Chapter(4, "04_ddp", "DistributedDataParallel", "§5.1, §5.2, §5.4",
            ("5. 分布式数据并行（DistributedDataParallel）",)),
    Chapter(5, "05_multi_node", "Several machines", "§5.3", ("5.3 多机训练扩展",)),
    Chapter(6, "06_model_parallel_rpc", "Model parallelism and RPC", "§6", ("6. 模型并行",)),
    Chapter(7, "07_pipeline_parallel", "Pipeline parallelism", "§7", ("7. 混合并行策略",)),
    Chapter(8, "08_performance", "Performance techniques", "§8", ("8. 性能优化技巧",)),
    Chapter(9, "09_profiling_troubleshooting", "Profiling and troubleshooting", "§9", ("9. 性能分析与调试",)),
    Chapter(10, "10_capstone_lm", "Capstone: a language model, trained and fault tolerant", "§10, §11.3",
            ("10. 实战案例：大规模语言模型训练",)),
    Chapter(11, "11_beyond_ddp", "Beyond DDP: ZeRO and FSDP", "§11",
            ("11. 总结与展望",)),
    Chapter(12, "12_tensor_sequence_expert", "Splitting one layer: tensor, sequence, context and expert parallelism",
            "—", ()),
    Chapter(13, "13_at_scale", "At scale: a cost model from your machine to 16,000 GPUs", "—", ()),
]}


def chapter(number: int) -> Chapter:
    if number not in CHAPTERS:
        raise ValueError(f"no chapter {number!r}; chapters are {sorted(CHAPTERS)}")
    return CHAPTERS[number]


def _build_times() -> dict:
    try:
        with open(BUILD_TIMES) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


HEADER_CALL = "disttutor.course.chapters.header({})"      # the header cell's call (the zh build finds it)
GLOSSARY_CALL = "disttutor.course.chapters.glossary({})"  # the last cell's call

_HEADER = {
    "en": {"title": "**Chapter {n} — {title}**", "needs": "needs", "runs": "runs", "article": "article",
           "cost": "about {s:.0f} s top to bottom on {cores} CPU cores, {gpus} GPUs, torch {torch} (measured)",
           "unmeasured": "not measured yet (this notebook has not been built by `python3 course.py execute`)",
           "fails": "| if something fails | run `disttutor doctor`; chapter 9 lists common errors |"},
    "zh": {"title": "**第 {n} 章 — {title}**", "needs": "需要", "runs": "运行", "article": "对应原文",
           "cost": "从头到尾约 {s:.0f} 秒（{cores} 个 CPU 核、{gpus} 块 GPU、torch {torch}，实测）",
           "unmeasured": "尚未测量（本 notebook 还没有用 `python3 course.py execute` 构建过）",
           "fails": "| 出了问题 | 运行 `disttutor doctor`；第 9 章列出了常见错误 |"},
}


def _card_text(number: int, key: str, english: str, lang: str) -> str:
    if lang == "en":
        return english
    from disttutor.course.translation import lookup

    # no fresh translation: the English, never an outdated Chinese
    return lookup(chapter(number).stem, key, english) or english


def header_markdown(number: int, build: dict | None = None, lang: str | None = None) -> str:
    """The chapter's opening card as Markdown (``build``: one entry of build_times.json)."""
    from disttutor.course.lang import checked

    lang = checked(lang)
    t = _HEADER[lang]
    c = chapter(number)
    build = build if build is not None else _build_times().get(c.stem)
    cost = (t["cost"].format(s=build["seconds"], cores=build["cores"], gpus=build["gpus"], torch=build["torch"])
            if build else t["unmeasured"])
    lines = [t["title"].format(n=c.number, title=_card_text(number, "chapter:title", c.title, lang)), "",
             "| | |", "|---|---|",
             f"| {t['needs']} | {_card_text(number, 'chapter:needs', c.needs, lang)} |",
             f"| {t['runs']} | {cost} |"]
    if c.zh:
        lines.append(f"| {t['article']} | {c.sections}: " + " / ".join(f"「{h}」" for h in c.zh) + " |")
    lines.append(t["fails"])
    return "\n".join(lines)


def header(number: int):
    """Display the chapter's opening card (call it in the chapter's first code cell).

    In a zh kernel it also turns on the Chinese of what the programs print (:mod:`~disttutor.course.zh_output`)."""
    from IPython.display import Markdown

    from disttutor.course.lang import current

    if current() == "zh":
        from disttutor.course import zh_output

        zh_output.install()
    return Markdown(header_markdown(number))


@lru_cache(maxsize=1)
def _glossary() -> tuple[dict, ...]:
    import yaml

    with open(GLOSSARY, encoding="utf-8") as f:
        entries = yaml.safe_load(f)
    for e in entries:
        missing = {"zh", "en", "chapter"} - set(e)
        if missing:
            raise ValueError(f"glossary entry {e!r} lacks {sorted(missing)}")
    return tuple(entries)


def terms(number: int) -> list[dict]:
    """Glossary entries a chapter introduces, in file order."""
    chapter(number)
    return [e for e in _glossary() if e["chapter"] == number]


def glossary_markdown(number: int, lang: str | None = None) -> str:
    from disttutor.course.lang import checked

    rows = terms(number)
    if checked(lang) == "zh":
        if not rows:
            return f"*第 {number} 章没有引入新的术语。*"
        out = [f"**术语表 — 第 {number} 章**（中文 ↔ English）", "", "| 中文 | English | 说明 |", "|---|---|---|"]
    elif not rows:
        return f"*Chapter {number} introduces no new glossary terms.*"
    else:
        out = [f"**Glossary — chapter {number}** (中文 ↔ English)", "", "| 中文 | English | note |", "|---|---|---|"]
    out += [f"| {e['zh']} | {e['en']} | {e.get('note', '')} |" for e in rows]
    return "\n".join(out)


def glossary(number: int):
    """Display the chapter's zh↔en glossary (call it in the chapter's last cell)."""
    from IPython.display import Markdown

    return Markdown(glossary_markdown(number))
