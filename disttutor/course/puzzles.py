"""Puzzles, LLM-Training-Puzzles style: one small question (5-10 minutes), one exact answer, graded at once.

A chapter shows one puzzle per cell (tag ``puzzle``)::

    puzzle("2.z1", mine=None)           # <- your answer, then run the cell

The card shows a short snippet of real torch code where it helps, asks one thing, and takes an answer
checked exactly: a whole number, a list of numbers, a letter -- or a number within a stated tolerance.
A realistic wrong answer gets a message saying which slip gives it (``wrong``); the
explanation stays collapsed until the answer is right.

Puzzles are data, one module per chapter (``disttutor/course/puzzle_sets/chNN.py``). Question,
explanation and wrong-answer messages are *templates* whose ``{placeholders}`` ``values()`` fills, so
every number is computed and the Chinese edition translates the words once. A puzzle with ``expr`` is
*run*: its ``code`` is executed on 4 gloo ranks by ``disttutor.programs.puzzle_check`` (the tests do),
``expr`` is what each rank reports, and ``reads`` turns the ranks' reports into the answer, which must
equal ``values()[answer]``.

Kernel side; imports no torch.
"""
from __future__ import annotations

import json
import math
import string
from dataclasses import dataclass, field
from typing import Any, Callable

from disttutor.course.card_sets import load_sets, register_into
from disttutor.course.lang import checked

__all__ = ["Puzzle", "PUZZLES", "register", "puzzle", "puzzle_in", "all_puzzles", "render", "verdict", "MIME",
           "placeholders", "KINDS"]

MIME = "application/vnd.disttutor.puzzle+json"

#: What a puzzle asks (its label on the card).
KINDS = {
    "collective": ("predict a collective's output", "预测集体通信的结果"),
    "deadlock": ("find the hang", "找出卡住的地方"),
    "count": ("count them", "数一数"),
    "bucket": ("size a bucket", "算一算梯度桶"),
    "mesh": ("place a tensor on a mesh", "把张量放到设备网格上"),
    "group": ("which ranks form a group", "哪些 rank 组成一组"),
    "launch": ("what torchrun gives a process", "torchrun 给进程的编号"),
    "schedule": ("read a pipeline schedule", "读流水线调度"),
    "memory": ("count the bytes", "数一数字节"),
    "data": ("who reads which samples", "谁读哪些样本"),
}


@dataclass(frozen=True)
class Puzzle:
    id: str                                   # "N.zK"
    kind: str                                 # a key of KINDS
    question: str                             # Markdown template
    explanation: str                          # Markdown template, shown once the answer is right
    values: Callable[[], dict]                # every number of the templates, and the answer
    answer: str                               # key in values() of the answer: int, float, str or list
    code: str = ""                            # real torch code the card shows (no placeholders)
    expr: str = ""                            # run on 4 gloo ranks: what each rank reports after ``code``
    reads: Callable[[list], Any] | None = None  # the ranks' reports -> the answer (for ``expr``)
    hangs: bool = False                       # run in a group with a short timeout; a rank that waits reports True
    wrong: dict = field(default_factory=dict)  # key in values() of a realistic wrong answer -> Markdown template why
    rel_tol: float | None = None              # float answers only: how close counts (say why beside it)
    choices: tuple[str, ...] = ()             # str answers: the letters offered

    @property
    def chapter(self) -> int:
        return int(self.id.split(".")[0])

    def __post_init__(self):
        if ".z" not in self.id:
            raise ValueError(f"a puzzle id is 'N.zK', got {self.id!r}")
        if self.kind not in KINDS:
            raise ValueError(f"{self.id}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if bool(self.expr) != (self.reads is not None):
            raise ValueError(f"{self.id}: a run puzzle needs both expr and reads")


PUZZLES: dict[str, Puzzle] = {}


def register(*puzzles: Puzzle) -> None:
    register_into(PUZZLES, "puzzle", puzzles)


def _load() -> dict[str, Puzzle]:
    from disttutor.course import puzzle_sets

    return load_sets(puzzle_sets, PUZZLES)


def _order(pid: str) -> tuple[int, int]:
    n, k = pid.split(".z")
    return int(n), int(k)


def all_puzzles() -> dict[str, Puzzle]:
    return dict(sorted(_load().items(), key=lambda kv: _order(kv[0])))


def placeholders(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f}


def _same(p: Puzzle, mine, target) -> bool:
    """Exact for int, str (letters: case and spaces do not count) and lists; floats within rel_tol."""
    if isinstance(target, bool) or isinstance(mine, bool):
        return False
    if isinstance(target, str):
        return isinstance(mine, str) and mine.strip().lower() == target.strip().lower()
    if isinstance(target, (list, tuple)):
        return (isinstance(mine, (list, tuple)) and len(mine) == len(target)
                and all(_same(p, a, b) for a, b in zip(mine, target)))
    if not isinstance(mine, (int, float)) or not math.isfinite(mine):
        return False
    if isinstance(target, float) and p.rel_tol is not None:
        return abs(mine - target) <= p.rel_tol * abs(target)
    return mine == target  # an int: 6.0 is 6, 6.5 is not


def verdict(pid: str, mine) -> tuple[bool, int | None]:
    """(right?, index of the named wrong answer it is, or None)."""
    p = _load()[pid]
    vals = p.values()
    if _same(p, mine, vals[p.answer]):
        return True, None
    for i, key in enumerate(p.wrong):
        if _same(p, mine, vals[key]):
            return False, i
    return False, None


_T = {
    "en": {"title": "Puzzle {id}", "runs": "Every rank runs this (`rank = dist.get_rank()`, `world = dist.get_world_size()`):",
           "int": "Answer with a whole number.", "float": "Answer with a number.",
           "list": "Answer with a list of numbers, e.g. `[1, 2]`.", "str": "Answer with one letter: {choices}.",
           "none": "Write your answer in `mine` and rerun the cell.",
           "open": "why (open it after you have answered)",
           "right": "**{mine}: right.**", "wrong": "**{mine}: not yet.**",
           "again": "Try again before you open the explanation."},
    "zh": {"title": "小题 {id}", "runs": "每个 rank 都运行这段代码（`rank = dist.get_rank()`，`world = dist.get_world_size()`）：",
           "int": "答案是一个整数。", "float": "答案是一个数。",
           "list": "答案是一个数的列表，例如 `[1, 2]`。", "str": "答案是一个字母：{choices}。",
           "none": "把你的答案写进 `mine`，再运行本单元格。",
           "open": "为什么（先写下答案，再打开它）",
           "right": "**{mine}：对了。**", "wrong": "**{mine}：还不对。**",
           "again": "先再想一想，再打开解释。"},
}


def _text(p: Puzzle, key: str, english: str, lang: str) -> str:
    if lang == "en":
        return english
    from disttutor.course.chapters import chapter
    from disttutor.course.translation import lookup

    return lookup(chapter(p.chapter).stem, f"puzzle:{p.id}:{key}", english) or english


def _shape(x) -> str:
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, (list, tuple)):
        return "list"
    return {int: "int", float: "float", str: "str"}.get(type(x), "?")


_ACCEPTS = {"int": ("int", "float"), "float": ("int", "float"), "list": ("list",), "str": ("str",)}


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    return f"{x}"


def render(pid: str, mine=None, lang: str = "en") -> str:
    """The card's Markdown: kind, question, code, what form the answer takes, verdict, explanation."""
    p = _load().get(pid)
    if p is None:
        mine_ch = [k for k in all_puzzles() if k.split(".")[0] == pid.split(".")[0]]
        raise ValueError(f"no puzzle {pid!r}; this chapter's are {', '.join(mine_ch) or 'none'}")
    vals = p.values()
    t = _T[lang]
    shape = _shape(vals[p.answer])
    if mine is not None and _shape(mine) not in _ACCEPTS[shape]:
        raise ValueError(f"puzzle {pid}: {t[shape].format(choices=', '.join(p.choices))} Got {mine!r}.")
    kind = KINDS[p.kind][0 if lang == "en" else 1]
    parts = [f"**{t['title'].format(id=pid)}** · *{kind}*", _text(p, "q", p.question, lang).format(**vals)]
    if p.code:
        block = f"```python\n{p.code.strip()}\n```"
        parts.append(f"{t['runs']}\n\n{block}" if p.expr else block)
    parts.append(t[shape].format(choices=", ".join(p.choices)))
    explanation = _text(p, "w", p.explanation, lang).format(**vals)
    if mine is None:
        parts.append(t["none"])
    else:
        ok, which = verdict(pid, mine)
        parts.append(t["right" if ok else "wrong"].format(mine=_fmt(mine)))
        if ok:
            parts.append(explanation)
            return "\n\n".join(parts)
        if which is not None:
            key = list(p.wrong)[which]
            parts.append(_text(p, f"x{which + 1}", p.wrong[key], lang).format(**vals))
        parts.append(t["again"])
    parts.append(f"<details><summary>{t['open']}</summary>\n\n{explanation}\n\n</details>")
    return "\n\n".join(parts)


class Card:
    """What ``puzzle`` returns: Markdown for the notebook, and the inputs for another language."""

    def __init__(self, pid: str, mine, lang: str):
        self.pid, self.mine, self.lang = pid, mine, lang
        self.text = render(pid, mine, lang)

    def _repr_mimebundle_(self, include=None, exclude=None):
        data = {"pid": self.pid, "mine": self.mine}
        return {"text/markdown": self.text, "text/plain": self.text, MIME: json.loads(json.dumps(data))}

    def __repr__(self) -> str:
        return self.text


def puzzle(pid: str, mine=None, lang: str | None = None) -> Card:
    """Show puzzle ``pid``; ``mine`` is your answer (None until you have one)."""
    return Card(pid, mine, checked(lang))


def puzzle_in(data: dict, lang: str) -> str:
    """A stored card (its MIME data), rendered in another language."""
    return render(data["pid"], data.get("mine"), checked(lang))


def snippets() -> list[dict]:
    """What ``disttutor.programs.puzzle_check`` runs: every run puzzle's id, code, expr and whether it hangs."""
    return [{"id": pid, "code": p.code, "expr": p.expr, "hangs": p.hangs}
            for pid, p in all_puzzles().items() if p.expr]
