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
from dataclasses import dataclass

__all__ = ["Shown", "answer", "card", "hint", "reveal", "Reveal"]


class Shown(str):
    """A string that a notebook renders as Markdown and a terminal prints without quotes.

    It stays a ``str`` (tests and scripts compare it, ``in`` works), so ``hint`` keeps its contract.
    """

    def _repr_markdown_(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return str(self)


def hint(exercise_id: str, level: int | None = None) -> Shown:
    """The next hint of an exercise (see :func:`disttutor.checks.registry.hint`), rendered."""
    from disttutor.checks.registry import hint as _hint

    return Shown(_hint(exercise_id, level))


def card(exercise_id: str) -> Shown:
    """The line above an exercise's stub: what it is, how hard, how long, how to get help."""
    from disttutor.checks.registry import exercise

    e = exercise(exercise_id)
    start = "the broken program below" if e.broken else "the stub below"
    return Shown(f"**Exercise {e.id} — {e.title}** · *{e.difficulty}* · about {e.minutes} min · "
                 f"edit {start}, then run its check · stuck? the cell `hint(\"{e.id}\")` under it gives "
                 f"{len(e.hints)} hints, one more each time it runs")


def _details(summary: str, body: str) -> str:
    # A collapsed block: the stored notebook carries the answer, but a reader sees it only on a click.
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"


def answer(question_id: str) -> Shown:
    """The worked answer of a check-your-understanding question, collapsed until opened."""
    from disttutor.course.answers import ANSWERS

    if question_id not in ANSWERS:
        raise ValueError(f"no question {question_id!r}; questions are {', '.join(sorted(ANSWERS))}")
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


def reveal(question_id: str, prediction, measured, *, unit: str = "", rel_tol: float | None = None,
           choices: dict[str, str] | None = None, explain: str = "") -> Reveal:
    """Compare a prediction with what the run measured, and say what it means.

    A number: ``rel_tol`` is how close counts as right (say why in the chapter: rounding, noise of a
    timed run); a choice: ``choices`` maps each letter to its text and ``measured`` is the letter
    the run shows. ``explain`` is what the result means, computed from the run by the caller. The
    first prediction for a question is recorded; changing it after the reveal does not count.
    """
    if choices is None and rel_tol is None:
        raise ValueError("give rel_tol (a number) or choices (a choice)")
    shown = f"{measured:.3g} {unit}".strip() if _is_number(measured) else f"{measured}"
    if choices is not None:
        shown = f"({measured}) {choices[measured]}"
    if prediction is None:
        body = f"Measured: **{shown}**.\n\n{explain}"
        text = (f"**You made no prediction** for {question_id}: `my_prediction` is still `None`. Write yours "
                "into the cell above, run it, then run this cell again; the result is below, collapsed.\n\n"
                + _details("the measured result (open it only after predicting)", body))
        return Reveal(question_id, None, measured, "none", text)
    if choices is not None and prediction not in choices:
        raise ValueError(f"{question_id}: predict one of {', '.join(map(repr, choices))}, got {prediction!r}")
    if choices is None and not _is_number(prediction):
        raise ValueError(f"{question_id}: predict a number, got {prediction!r}")
    first = _PREDICTIONS.setdefault(question_id, prediction)
    note = ("" if first == prediction else
            f" (you changed it to {prediction!r} after the reveal: your first prediction counts)")
    if choices is not None:
        verdict = "right" if first == measured else "wrong"
        said = f"You predicted **({first}) {choices[first]}**{note}; the run shows **{shown}**: **{verdict}**."
    else:
        off = abs(first - measured) <= rel_tol * abs(measured)
        verdict = "close" if off else "off"
        factor = (f", a factor {max(first, measured) / min(first, measured):.2g} away"
                  if first > 0 and measured > 0 and not off else "")
        said = (f"You predicted **{first:.3g} {unit}**{note}; the run measured **{shown}**: "
                + ("within " if off else "not within ") + f"{rel_tol:.0%}{factor}.")
    return Reveal(question_id, first, measured, verdict, f"{said}\n\n{explain}")
