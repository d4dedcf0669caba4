"""Worked problems, "How to Scale Your Model" style: a question, the learner's number, the working.

A chapter shows one problem per cell (tag ``problem``)::

    problem("2.p1", mine=None)          # <- your number, then run the cell

The cell prints the question; with ``mine=None`` the worked answer stays collapsed, with a number
the learner is told whether it is within the problem's tolerance (pen-and-paper rounding, stated
per problem), then sees the working. A problem whose numbers come from the learner's own run takes
them as keywords (``problem("2.p4", mine, alpha=fit.alpha, bandwidth=fit.bandwidth)``): the working
is computed from them, so the text and the arithmetic cannot disagree.

Problems are data, one module per chapter (``disttutor/course/problem_sets/chNN.py``); their
question and working are *templates* (``{name}`` placeholders filled from ``values``), so the
Chinese edition translates the words once and fills in the same numbers. Hardware constants come
from :mod:`disttutor.scale.hardware` and :mod:`disttutor.links.presets`, each with its tag and
source; a problem names the ones it uses (``constants``) and the card prints them, tagged.

Kernel side; imports no torch.
"""
from __future__ import annotations

import json
import math
import string
from dataclasses import dataclass, field
from typing import Callable

from disttutor.course.card_sets import load_sets, register_into
from disttutor.course.lang import checked

__all__ = ["Problem", "PROBLEMS", "register", "problem", "problem_in", "MIME", "placeholders"]

MIME = "application/vnd.disttutor.problem+json"


@dataclass(frozen=True)
class Problem:
    id: str                                  # "N.pK"
    question: str                            # Markdown template
    working: str                             # Markdown template of the worked answer
    values: Callable[..., dict]              # numbers for both templates; run inputs as keywords
    answer: str | None = None                # key in values() of the number checked; None: read on demand
    unit: str = ""
    rel_tol: float | None = None             # how close counts (say why beside it)
    quantitative: bool = True                # works with numbers (hardware or the run), not recall
    run: tuple[str, ...] = ()                # keywords the learner's own run supplies
    constants: tuple = field(default=())     # hardware Constants used (tag and source printed)
    example: dict = field(default_factory=dict)  # a plausible run (the keywords in ``run``), for tests

    @property
    def chapter(self) -> int:
        return int(self.id.split(".")[0])

    def __post_init__(self):
        if ".p" not in self.id:
            raise ValueError(f"a problem id is 'N.pK', got {self.id!r}")
        if self.answer is not None and self.rel_tol is None:
            raise ValueError(f"{self.id}: a checked answer needs rel_tol")


PROBLEMS: dict[str, Problem] = {}


def register(*problems: Problem) -> None:
    register_into(PROBLEMS, "problem", problems)


def _load() -> dict[str, Problem]:
    from disttutor.course import problem_sets

    return load_sets(problem_sets, PROBLEMS)


def all_problems() -> dict[str, Problem]:
    return dict(sorted(_load().items(), key=lambda kv: _order(kv[0])))


def _order(pid: str) -> tuple[int, int]:
    n, k = pid.split(".p")
    return int(n), int(k)


def placeholders(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f}


_T = {
    "en": {"title": "Problem {id}", "run": "uses your run's numbers", "unit": " ({unit})",
           "none": "Write your answer in `mine` and rerun the cell; the worked answer is below, collapsed.",
           "open": "the worked answer (open it after you have written yours)",
           "right": "**{mine}{unit}: right**, within {tol} of {ans}.",
           "wrong": "**{mine}{unit}: not yet** ({tol} of {ans} counts; a factor {f:.2g} away). Try again before you read on.",
           "read": "Work it out, then open the answer.", "const": "Constants: "},
    "zh": {"title": "习题 {id}", "run": "用你自己运行得到的数", "unit": "（{unit}）",
           "none": "把你的答案写进 `mine` 再运行本单元格；答案在下面，已折叠。",
           "open": "答案（先写下你自己的答案，再打开它）",
           "right": "**{mine}{unit}：对了**，与 {ans} 相差在 {tol} 以内。",
           "wrong": "**{mine}{unit}：还不对**（与 {ans} 相差 {tol} 以内算对；现在差 {f:.2g} 倍）。先再算一遍，再往下读。",
           "read": "先自己算，再打开答案。", "const": "常数："},
}


def _text(p: Problem, key: str, lang: str) -> str:
    english = getattr(p, key)
    if lang == "en":
        return english
    from disttutor.course.chapters import chapter
    from disttutor.course.translation import lookup

    return lookup(chapter(p.chapter).stem, f"problem:{p.id}:{key[0]}", english) or english


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.3g}"
    return f"{x}"


def render(pid: str, mine=None, given: dict | None = None, lang: str = "en") -> str:
    """The card's Markdown: question, constants, verdict (if a number was given), working."""
    p = _load().get(pid)
    if p is None:
        raise ValueError(f"no problem {pid!r}; this chapter's are "
                         f"{', '.join(k for k in all_problems() if k.split('.')[0] == pid.split('.')[0]) or 'none'}")
    given = dict(given or {})
    missing = [k for k in p.run if k not in given]
    if missing:
        raise ValueError(f"problem {pid} takes your run's {', '.join(missing)}: pass them as keywords")
    vals = p.values(**given)
    t = _T[lang]
    head = f"**{t['title'].format(id=pid)}**" + (f" · *{t['run']}*" if p.run else "")
    parts = [head, _text(p, "question", lang).format(**vals)]
    if p.constants:
        parts.append(t["const"] + "; ".join(f"{c.value:.4g} {c.unit} (*{c.tag}*: {c.source})" for c in p.constants))
    working = _text(p, "working", lang).format(**vals)
    unit = t["unit"].format(unit=p.unit) if p.unit else ""
    if p.answer is not None and mine is not None:
        if not isinstance(mine, (int, float)) or isinstance(mine, bool) or not math.isfinite(mine):
            raise ValueError(f"problem {pid}: `mine` is a number, got {mine!r}")
        ans = vals[p.answer]
        ok = abs(mine - ans) <= p.rel_tol * abs(ans)
        f = max(abs(mine), abs(ans)) / max(min(abs(mine), abs(ans)), 1e-300)
        parts.append(t["right" if ok else "wrong"].format(mine=_fmt(mine), unit=unit, tol=f"{p.rel_tol:.0%}",
                                                          ans="the answer" if not ok else _fmt(ans), f=f))
        if ok:
            parts.append(working)
            return "\n\n".join(parts)
    else:
        parts.append(t["none"] if p.answer is not None else t["read"])
    parts.append(f"<details><summary>{t['open']}</summary>\n\n{working}\n\n</details>")
    return "\n\n".join(parts)


class Card:
    """What ``problem`` returns: Markdown for the notebook, and the inputs for another language."""

    def __init__(self, pid: str, mine, given: dict, lang: str):
        self.pid, self.mine, self.given, self.lang = pid, mine, given, lang
        self.text = render(pid, mine, given, lang)

    def _repr_mimebundle_(self, include=None, exclude=None):
        data = {"pid": self.pid, "mine": self.mine, "given": self.given}
        return {"text/markdown": self.text, "text/plain": self.text, MIME: json.loads(json.dumps(data))}

    def __repr__(self) -> str:
        return self.text


def problem(pid: str, mine=None, lang: str | None = None, **given) -> Card:
    """Show problem ``pid``; ``mine`` is your number (None until you have one)."""
    return Card(pid, mine, given, checked(lang))


def problem_in(data: dict, lang: str) -> str:
    """A stored card (its MIME data), rendered in another language with the same numbers."""
    return render(data["pid"], data.get("mine"), data.get("given") or {}, checked(lang))
