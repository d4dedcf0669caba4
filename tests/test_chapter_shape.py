"""Every chapter has issue 22's shape, in its source and in its built notebook: an opening ("After this
chapter you can", 3 bullets) right after the header, a `takeaways` cell of at most 5 bullets, at least 3
`question` cells of which at least one is predict-then-run (a `predict` cell, then the run that reveals),
and above every exercise stub its card, under it exactly `hint("N.M")`. Plus the helpers' contracts
(answers on demand, a reveal that records the prediction first and hides the result without one)."""
from __future__ import annotations

import glob
import json
import os
import re
import sys

import pytest

from disttutor.checks.registry import EXERCISES, Exercise
from disttutor.course import shape
from disttutor.course.answers import ANSWERS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from build_notebooks import notebook_path, parse  # noqa: E402

SOURCES = sorted(glob.glob(os.path.join(ROOT, "chapters", "src", "[0-9][0-9]_*.py")))
BULLET = re.compile(r"^\s*[*-] ", re.M)


def notebook_cells(src: str) -> list[dict]:
    """A built notebook's cells in parse()'s shape: type, source, tags."""
    nb = json.load(open(notebook_path(src), encoding="utf-8"))
    return [{"type": c["cell_type"], "source": "".join(c["source"]), "tags": c.get("metadata", {}).get("tags", [])}
            for c in nb["cells"]]


def shape_problems(cells: list[dict], n: int) -> list[str]:
    """What chapter n's cells lack of the shape (empty: it has the shape)."""
    bad = []
    header = next((i for i, c in enumerate(cells) if "chapter-header" in c["tags"]), None)
    if header is None:
        return ["no chapter-header cell"]
    if "from disttutor.course.shape import" not in cells[header]["source"]:
        bad.append("the header cell does not import the shape helpers (answer, card, hint, reveal)")
    opening = cells[header + 1] if header + 1 < len(cells) else {"tags": [], "source": ""}
    if "opening" not in opening["tags"] or "After this chapter you can" not in opening["source"]:
        bad.append("the cell after the header is not the 'After this chapter you can' opening (tag 'opening')")
    elif len(BULLET.findall(opening["source"])) != 3:
        bad.append(f"the opening has {len(BULLET.findall(opening['source']))} bullets, not 3")
    take = [c for c in cells if "takeaways" in c["tags"]]
    if len(take) != 1 or take[0]["type"] != "markdown" or "Key takeaways" not in take[0]["source"]:
        bad.append(f"{len(take)} markdown cells tagged 'takeaways' with 'Key takeaways' (want 1)")
    elif not 1 <= len(BULLET.findall(take[0]["source"])) <= 5:
        bad.append(f"the takeaways have {len(BULLET.findall(take[0]['source']))} bullets (want 1 to 5)")
    questions = [i for i, c in enumerate(cells) if "question" in c["tags"]]
    if len(questions) < 3:
        bad.append(f"{len(questions)} cells tagged 'question' (want at least 3)")
    predicts = [i for i, c in enumerate(cells) if "predict" in c["tags"]]
    if not predicts:
        bad.append("no cell tagged 'predict'")
    for i in predicts:
        c, run = cells[i], cells[i + 1] if i + 1 < len(cells) else {"source": ""}
        if c["type"] != "code" or not re.match(r"my_prediction = None\b", c["source"].strip()):
            bad.append("a predict cell must start `my_prediction = None` (the build runs it untouched)")
        if f'reveal("{n}.q' not in run["source"] or "my_prediction" not in run["source"]:
            bad.append("the cell after a predict cell must run the experiment and reveal(...) with my_prediction")
        if not any(q < i for q in questions):
            bad.append("a predict cell has no question before it")
    for q in questions:
        ans = re.search(r'answer\("([\d.q]+)"\)', cells[q + 1]["source"]) if q + 1 < len(cells) else None
        if ans and ans.group(1) not in ANSWERS:
            bad.append(f"answer({ans.group(1)!r}) has no entry in disttutor/course/answers.py")
    for e in (e for e in EXERCISES if e.chapter == n):
        if e.broken:
            stub = [i for i, c in enumerate(cells) if c["type"] == "code" and re.search(rf"^def {e.stub}\(", c["source"], re.M)]
        else:
            stub = [i for i, c in enumerate(cells) if f'NotImplementedError("Exercise {e.id}:' in c["source"]]
        if not stub:
            bad.append(f"no stub for exercise {e.id}")
            continue
        i = stub[0]
        if cells[i - 1]["source"].strip() != f'card("{e.id}")':
            bad.append(f"exercise {e.id}: the cell above its stub is not card(\"{e.id}\") (difficulty and time)")
        if i + 1 >= len(cells) or cells[i + 1]["source"].strip() != f'hint("{e.id}")':
            bad.append(f"exercise {e.id}: the cell under its stub is not exactly hint(\"{e.id}\")")
    for c in cells:
        if c["type"] == "code" and re.search(r"print\(hint\(|checks\.hint\(", c["source"]):
            bad.append("an old hint pattern (print(hint(...)) or disttutor.checks.hint) is left")
    return bad


@pytest.mark.parametrize("src", SOURCES, ids=os.path.basename)
def test_source_has_the_chapter_shape(src):
    n = int(os.path.basename(src)[:2])
    assert shape_problems(parse(open(src, encoding="utf-8").read()), n) == []


@pytest.mark.parametrize("src", SOURCES, ids=os.path.basename)
def test_built_notebook_has_the_chapter_shape(src):
    if not os.path.exists(notebook_path(src)):
        pytest.skip("not built yet")
    n = int(os.path.basename(src)[:2])
    cells = notebook_cells(src)
    assert shape_problems(cells, n) == []
    nb = json.load(open(notebook_path(src), encoding="utf-8"))
    # built untouched, every reveal says no prediction was made and keeps the result collapsed
    for c, nxt in zip(nb["cells"], nb["cells"][1:]):
        if "predict" in c.get("metadata", {}).get("tags", []):
            text = json.dumps(nxt.get("outputs", []))
            assert "You made no prediction" in text and "<details>" in text, f"chapter {n}: the reveal's output"


def test_shape_problems_names_each_missing_piece():
    """The checker fails a chapter that lacks a piece (here chapter 2's source, a piece removed at a time)."""
    src = next(s for s in SOURCES if os.path.basename(s).startswith("02_"))
    cells = parse(open(src, encoding="utf-8").read())
    assert shape_problems(cells, 2) == []
    drop = lambda tag: [c for c in cells if tag not in c["tags"]]  # noqa: E731
    assert any("opening" in p for p in shape_problems(drop("opening"), 2))
    assert any("takeaways" in p for p in shape_problems(drop("takeaways"), 2))
    assert any("'question'" in p for p in shape_problems(drop("question"), 2))
    assert any("predict" in p for p in shape_problems(drop("predict"), 2))
    no_hint = [c for c in cells if c["source"].strip() != 'hint("2.1")']
    assert any('hint("2.1")' in p for p in shape_problems(no_hint, 2))
    no_card = [c for c in cells if c["source"].strip() != 'card("2.1")']
    assert any('card("2.1")' in p for p in shape_problems(no_card, 2))
    six = [dict(c, source=c["source"] + "\n* one more\n* and another") if "takeaways" in c["tags"] else c
           for c in cells]
    assert any("bullets" in p for p in shape_problems(six, 2))


def test_every_exercise_has_a_kind_a_difficulty_and_a_time():
    for e in EXERCISES:
        assert e.difficulty in ("warm-up", "core", "stretch") and e.minutes > 0, e.id
        text = shape.card(e.id, lang="en")
        assert e.difficulty in text and f"about {e.minutes} min" in text and f'hint("{e.id}")' in text
        assert f"** · {e.kind} · *{e.difficulty}*" in text, text
        assert {"build": "动手实现", "fix": "修复程序", "puzzle": "小谜题"}[e.kind] in shape.card(e.id, lang="zh")
    args = ("9.9", 9, "t", "s", "m:f", "solutions/x.py", ("a", "b", "c"))
    with pytest.raises(ValueError, match="difficulty must be one of"):
        Exercise(*args, minutes=5, kind="build")
    with pytest.raises(ValueError, match="minutes must be a positive"):
        Exercise(*args, difficulty="core", kind="build")
    with pytest.raises(ValueError, match="kind must be one of build, fix, puzzle"):
        Exercise(*args, difficulty="core", minutes=5)
    with pytest.raises(ValueError, match="a 'fix' exercise starts from a broken program"):
        Exercise(*args, difficulty="core", minutes=5, kind="fix")
    with pytest.raises(ValueError, match="give three hints"):
        Exercise(*args[:-1], ("a", "b"), difficulty="core", minutes=5, kind="build")


def test_hint_renders_and_goes_further(monkeypatch):
    from disttutor.checks import registry

    monkeypatch.setattr(registry, "_SHOWN", {})
    first, second = shape.hint("2.1"), shape.hint("2.1")
    assert isinstance(first, str) and first._repr_markdown_() == first and repr(first) == first
    assert first.startswith("Exercise 2.1, hint 1/") and second.startswith("Exercise 2.1, hint 2/")
    assert shape.hint("2.1", 1).startswith("Exercise 2.1, hint 1/")


def test_hint_without_solutions_says_ask_the_teacher(monkeypatch, tmp_path):
    from disttutor.checks import registry

    monkeypatch.setattr(registry, "ROOT", str(tmp_path))  # a classroom copy: no solutions/ folder
    last = len(registry.exercise("1.1").hints) + 1  # the step after the last hint
    assert "ask your teacher" in registry.hint("1.1", last) and "solutions/" not in registry.hint("1.1", last)


def test_answers_are_collapsed_and_every_one_is_used():
    used = set()
    for src in SOURCES:
        used |= set(re.findall(r'answer\("([\d.q]+)"\)', open(src, encoding="utf-8").read()))
    assert used == set(ANSWERS), f"unused answers {set(ANSWERS) - used}, missing {used - set(ANSWERS)}"
    for qid in ANSWERS:
        text = shape.answer(qid)
        assert text.startswith("<details>") and text.rstrip().endswith("</details>") and len(text) > 200, qid
    assert "112.0 GB" in shape.answer("1.q2") and "1.750 GiB" in shape.answer("2.q2")  # computed, as taught
    with pytest.raises(ValueError, match="no question"):
        shape.answer("2.q9")


def test_reveal_records_the_first_prediction_and_hides_the_result_without_one(monkeypatch):
    monkeypatch.setattr(shape, "_PREDICTIONS", {})
    none = shape.reveal("x.q1", None, 10.0, rel_tol=0)
    assert none.verdict == "none" and "You made no prediction" in none.text and "<details>" in none.text
    assert shape.reveal("x.q1", 10, 10.0, rel_tol=0).verdict == "close"
    changed = shape.reveal("x.q1", 12, 10.0, rel_tol=0)   # changed after the reveal: the first one counts
    assert changed.prediction == 10 and changed.verdict == "close" and "first prediction counts" in changed.text
    off = shape.reveal("x.q2", 30, 10.0, rel_tol=0.25)
    assert off.verdict == "off" and "factor 3" in off.text
    ch = {"a": "waits", "b": "ends"}
    assert shape.reveal("x.q3", "a", "b", choices=ch).verdict == "wrong"
    with pytest.raises(ValueError, match="predict one of"):
        shape.reveal("x.q4", "z", "b", choices=ch)
    with pytest.raises(ValueError, match="predict a number"):
        shape.reveal("x.q5", "ten", 10.0, rel_tol=0.1)
