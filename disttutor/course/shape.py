"""The pieces every chapter shares: exercise cards, hints, answers on demand, predict-then-run.

A chapter's header cell imports them (``from disttutor.course.shape import answer, card, hint, reveal``):

* ``card("2.1")`` above an exercise's stub: its title, difficulty and time, from the registry;
* ``hint("2.1")`` under the stub: the next hint each time the cell runs (``hint("2.1", 2)`` asks for one);
* ``answer("2.q2")`` under a question: the worked answer, collapsed until the learner opens it
  (the texts are in :mod:`disttutor.course.answers`, numbers computed there);
* ``reveal("2.q1", my_prediction, measured, ...)`` after a ``predict`` cell: the prediction is
  recorded first, then compared with the run's measured result. With no prediction (the cell as the
  course ships it, and the headless build) the result stays collapsed and the learner is asked to
  predict first.

Kernel side; imports no torch.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from disttutor.course.lang import checked

__all__ = ["Shown", "answer", "card", "hint", "reveal", "reveal_in", "Reveal"]


class Shown(str):
    """A string that a notebook renders as Markdown and a terminal prints without quotes.

    It stays a ``str`` (tests and scripts compare it, ``in`` works), so ``hint`` keeps its contract.
    """

    def _repr_markdown_(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return str(self)


def _zh(chapter: int, key: str, english: str) -> str:
    from disttutor.course.chapters import chapter as card
    from disttutor.course.translation import lookup

    # no fresh translation: the English, never an outdated Chinese
    return lookup(card(chapter).stem, key, english) or english


_DIFFICULTY_ZH = {"warm-up": "热身", "core": "核心", "stretch": "进阶"}
# the exercise's kind (registry.KINDS): write distributed code, repair a broken program, or a small puzzle
_KIND_ZH = {"build": "动手实现", "fix": "修复程序", "puzzle": "小谜题"}


def hint(exercise_id: str, level: int | None = None, lang: str | None = None) -> Shown:
    """The next hint of an exercise (see :func:`disttutor.checks.registry.hint`), rendered."""
    from disttutor.checks.registry import exercise, hint as _hint

    text = _hint(exercise_id, level)
    if checked(lang) == "en":
        return Shown(text)
    e = exercise(exercise_id)
    n = int(text.split(", hint ", 1)[1].split("/", 1)[0]) if ", hint " in text else None
    if n is not None:
        return Shown(f"练习 {e.id}，提示 {n}/{len(e.hints)}：{_zh(e.chapter, f'hint:{e.id}:{n}', e.hints[n - 1])}")
    if "has no solutions" in text:
        return Shown(f"练习 {e.id}：没有更多提示了——这份课程副本不含 solutions/，请问你的老师。")
    return Shown(f"练习 {e.id}：没有更多提示了——参考答案是 {e.solution}（在课程的根目录下）。")


def card(exercise_id: str, lang: str | None = None) -> Shown:
    """The line above an exercise's stub: what it is, what kind, how hard, how long, how to get help."""
    from disttutor.checks.registry import exercise

    e = exercise(exercise_id)
    if checked(lang) == "zh":
        start = "下面有错误的程序" if e.broken else "下面的存根"
        return Shown(f"**练习 {e.id} — {_zh(e.chapter, f'title:{e.id}', e.title)}** · {_KIND_ZH[e.kind]} · "
                     f"*{_DIFFICULTY_ZH[e.difficulty]}* · "
                     f"约 {e.minutes} 分钟 · 修改{start}，然后运行它的检查 · 卡住了？它下面的 `hint(\"{e.id}\")` "
                     f"单元格共有 {len(e.hints)} 条提示，每运行一次给出下一条")
    start = "the broken program below" if e.broken else "the stub below"
    # Two lines (a markdown line break between them): each stays short enough to read at a glance.
    return Shown(f"**Exercise {e.id} — {e.title}** · {e.kind} · *{e.difficulty}* · about {e.minutes} min  \n"
                 f"Edit {start}, then run its check; stuck? `hint(\"{e.id}\")` under it gives "
                 f"{len(e.hints)} hints, one more each time it runs")


def _details(summary: str, body: str) -> str:
    # A collapsed block: the stored notebook carries the answer, but a reader sees it only on a click.
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"


def answer(question_id: str, lang: str | None = None) -> Shown:
    """The worked answer of a check-your-understanding question, collapsed until opened."""
    from disttutor.course.answers import ANSWERS

    if question_id not in ANSWERS:
        raise ValueError(f"no question {question_id!r}; questions are {', '.join(sorted(ANSWERS))}")
    if checked(lang) == "zh":
        body = _zh(int(question_id.split(".")[0]), f"answer:{question_id}", ANSWERS[question_id]())
        return Shown(_details(f"答案 {question_id}（先写下你自己的答案，再打开它）", body))
    return Shown(_details(f"Answer {question_id} (open it after you have written yours)", ANSWERS[question_id]()))


_PREDICTIONS: dict[str, object] = {}  # question id -> the first prediction made in this kernel


@dataclass(frozen=True)
class Reveal:
    question: str
    prediction: object          # the recorded (first) prediction, None if none was made
    measured: object
    verdict: str                # "none", "close", "off", "right", "wrong"
    text: str

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


_REVEAL = {
    "en": {"measured": "Measured: **{shown}**.",
           "none": "**You made no prediction** for {q} (`my_prediction` is still `None`): write yours above, run it, "
                   "then rerun this cell; the result is below, collapsed.",
           "summary": "the measured result (open it only after predicting)",
           "changed": " (you changed it to {p!r} after the reveal: your first prediction counts)",
           "choice": "You predicted **({first}) {text}**{note}; the run shows **{shown}**: **{verdict}**.",
           "right": "right", "wrong": "wrong",
           "number": "You predicted **{first}**{note}; the run measured **{shown}**: {within}{factor}.",
           "within": "within {tol}", "not within": "not within {tol}", "factor": ", a factor {f:.2g} away"},
    "zh": {"measured": "测得：**{shown}**。",
           "none": "**你还没有做预测**（{q}）：`my_prediction` 仍是 `None`。把你的预测写进上面的单元格并运行，"
                   "再运行本单元格；结果在下面，已折叠。",
           "summary": "实测结果（做出预测之后再打开）",
           "changed": "（揭晓之后你改成了 {p!r}：以第一次的预测为准）",
           "choice": "你预测的是 **({first}) {text}**{note}；运行的结果是 **{shown}**：**{verdict}**。",
           "right": "猜对了", "wrong": "猜错了",
           "number": "你预测的是 **{first}**{note}；实测为 **{shown}**：{within}{factor}。",
           "within": "在 {tol} 的容差之内", "not within": "不在 {tol} 的容差之内", "factor": "，相差 {f:.2g} 倍"},
}


def reveal(question_id: str, prediction, measured, *, unit: str = "", rel_tol: float | None = None,
           choices: dict[str, str] | None = None, explain: str = "", lang: str | None = None) -> Reveal:
    """Compare a prediction with what the run measured, and say what it means.

    A number: ``rel_tol`` is how close counts as right (say why in the chapter: rounding, noise of a
    timed run); a choice: ``choices`` maps each letter to its text and ``measured`` is the letter
    the run shows. ``explain`` is what the result means, computed from the run by the caller. The
    first prediction for a question is recorded; changing it after the reveal does not count.
    """
    t = _REVEAL[checked(lang)]
    if choices is None and rel_tol is None:
        raise ValueError("give rel_tol (a number) or choices (a choice)")
    shown = f"{measured:.3g} {unit}".strip() if _is_number(measured) else f"{measured}"
    if choices is not None:
        shown = f"({measured}) {choices[measured]}"
    if prediction is None:
        body = t["measured"].format(shown=shown) + f"\n\n{explain}"
        text = t["none"].format(q=question_id) + "\n\n" + _details(t["summary"], body)
        return Reveal(question_id, None, measured, "none", text)
    if choices is not None and prediction not in choices:
        raise ValueError(f"{question_id}: predict one of {', '.join(map(repr, choices))}, got {prediction!r}")
    if choices is None and not _is_number(prediction):
        raise ValueError(f"{question_id}: predict a number, got {prediction!r}")
    first = _PREDICTIONS.setdefault(question_id, prediction)
    note = "" if first == prediction else t["changed"].format(p=prediction)
    if choices is not None:
        verdict = "right" if first == measured else "wrong"
        said = t["choice"].format(first=first, text=choices[first], note=note, shown=shown, verdict=t[verdict])
    else:
        off = abs(first - measured) <= rel_tol * abs(measured)
        verdict = "close" if off else "off"
        factor = (t["factor"].format(f=max(first, measured) / min(first, measured))
                  if first > 0 and measured > 0 and not off else "")
        said = t["number"].format(first=f"{first:.3g} {unit}".strip(), note=note, shown=shown,
                                  within=t["within" if off else "not within"].format(tol=f"{rel_tol:.0%}"), factor=factor)
    return Reveal(question_id, first, measured, verdict, f"{said}\n\n{explain}")


_LEGACY_NONE = (  # wordings of notebooks built before the line was shortened (they still read)
    "**You made no prediction** for {q}: `my_prediction` is still `None`. Write yours into the cell "
    "above, run it, then run this cell again; the result is below, collapsed.",
    "**You made no prediction** for {q} (`my_prediction` is still `None`):\nwrite yours into the "
    "cell above, run it, then run this cell again; the result is below, collapsed.",
    "**You made no prediction** for {q} (`my_prediction` is `None`): write yours above, run it, "
    "then rerun this cell; the result is below, collapsed.",
    "**You made no prediction** for {q}: write one into `my_prediction` above and run it, then run "
    "this cell again; the result is below, collapsed.")


def reveal_in(text: str, lang: str) -> str:
    """A stored reveal with no prediction (what a headless build shows), in another language.

    The Chinese edition carries the English run's outputs: the measured value and its explanation
    (computed from that run) are kept, the course's own words around them are translated.
    """
    en, t = _REVEAL["en"], _REVEAL[checked(lang)]
    m = None
    for none in (en["none"], *_LEGACY_NONE):  # a notebook built before the line was shortened reads too
        pattern = (re.escape(none).replace(re.escape("{q}"), "(?P<q>[0-9.q]+)") + re.escape("\n\n<details><summary>")
                   + re.escape(en["summary"]) + re.escape("</summary>\n\n")
                   + re.escape(en["measured"]).replace(re.escape("{shown}"), "(?P<shown>.*?)")
                   + "\n\n(?P<explain>.*)" + re.escape("\n\n</details>"))
        m = m or re.fullmatch(pattern, text, re.S)
    if m is None:
        raise ValueError("not a stored reveal without a prediction (rebuild the English chapter): " + text[:80])
    body = t["measured"].format(shown=m["shown"]) + f"\n\n{m['explain']}"
    return t["none"].format(q=m["q"]) + "\n\n" + _details(t["summary"], body)
