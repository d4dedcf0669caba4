"""Hints that teach without giving the answer away (issue 37): every exercise has exactly three hints
(a nudge, the idea, the path), and no hint contains a key line of the exercise's solution, a line of
Python assigning something, or a call with arguments that the solution makes. Reads files only (< 1 s)."""
from __future__ import annotations

import ast
import io
import os
import re
import sys
import tokenize

import pytest

from disttutor.checks.registry import EXERCISES, KINDS, Exercise

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import learner_view as lv  # noqa: E402  (scripts/learner_view.py: the printed line's word limit)

IDS = [e.id for e in EXERCISES]
MIN_KEY = 12  # shorter lines (`n = len(x)`, `f += 1`) are words a hint may need, not the answer
# lines that compute nothing: a definition, an import, a bare return/pass/yield, control flow alone, a print
SKIP = re.compile(r"^(?:def|class|@|import|from|pass$|print\(|try:$|else:$|finally:$|yield$|"
                  r"return$|return[A-Za-z_][\w,]*$|continue$|break$)")
# Python assigning something (`x = ...`, `self.a[i] += ...`), not a comparison (`==`, `<=`, `>=`, `!=`)
ASSIGNMENT = re.compile(r"(?<![\w.=!<>])[A-Za-z_]\w*(?:\.\w+|\[[^\]\s]*\])*\s*(?:=|\+=|-=|\*=|/=)(?!=)\s*\S+")


def squash(text: str) -> str:
    """Whitespace removed and one kind of quote: how a line of code is compared with a hint."""
    return re.sub(r"\s+", "", text).replace('"', "'")


def _functions(tree: ast.AST) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def key_lines(source: str) -> set[str]:
    """The lines of the solution's functions that compute something, squashed (comments, docstrings,
    definitions, imports, prints and bare returns left out)."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    inside = {ln for f in _functions(tree) for ln in range(f.body[0].lineno, f.end_lineno + 1)}
    code: dict[int, list[str]] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                        tokenize.ENDMARKER):
            continue
        code.setdefault(tok.start[0], []).append(tok.string)
    out = set()
    for ln, toks in code.items():
        line = squash("".join(toks)).rstrip(":")
        if ln in inside and ln not in docstrings and len(line) >= MIN_KEY and not SKIP.match(line):
            out.add(line)
    return out


def calls_with_arguments(source: str) -> set[str]:
    """Every call in the solution's functions that passes an argument, as written there, squashed."""
    tree = ast.parse(source)
    found = set()
    for f in _functions(tree):
        for node in ast.walk(f):
            if isinstance(node, ast.Call) and (node.args or node.keywords):
                seg = ast.get_source_segment(source, node)
                if seg and not seg.startswith(("print(", "super().__init__(")):
                    found.add(squash(seg))
    return found


def solution_source(e: Exercise) -> str:
    with open(os.path.join(ROOT, e.solution), encoding="utf-8") as f:
        return f.read()


def leaks(e: Exercise) -> list[str]:
    """What each hint of ``e`` gives away, one line per finding (empty: none)."""
    src = solution_source(e)
    keys, calls = key_lines(src), calls_with_arguments(src)
    found = []
    for k, text in enumerate(e.hints, 1):
        hint = squash(text.replace("`", ""))
        found += [f"{e.id} hint {k} contains the solution's line {line!r}" for line in sorted(keys) if line in hint]
        found += [f"{e.id} hint {k} contains the solution's call {c!r}" for c in sorted(calls) if c in hint]
        found += [f"{e.id} hint {k} assigns in Python: {m.group(0)!r}" for m in ASSIGNMENT.finditer(text)]
    return found


@pytest.mark.parametrize("ex_id", IDS)
def test_three_hints_a_nudge_the_idea_the_path(ex_id):
    e = next(x for x in EXERCISES if x.id == ex_id)
    assert len(e.hints) == 3, f"{e.id}: {len(e.hints)} hints; give three (a nudge, the idea, the path)"
    assert all(h.strip() and len(h) <= 400 for h in e.hints), f"{e.id}: a hint is empty or longer than 400 characters"
    assert e.kind in KINDS
    # the nudge is printed under the stub when the chapter runs: one line a learner reads at a glance
    first = f"Exercise {e.id}, hint 1/{len(e.hints)}: {e.hints[0]}"  # as hint(e.id) and the build print it
    assert lv.words(first) <= lv.MAX_LINE_WORDS, f"{e.id}: hint 1 prints {lv.words(first)} words: {first}"


@pytest.mark.parametrize("ex_id", IDS)
def test_no_hint_gives_the_solution_away(ex_id):
    e = next(x for x in EXERCISES if x.id == ex_id)
    assert key_lines(solution_source(e)), f"{e.id}: no key line found in {e.solution} (the test would see nothing)"
    problems = leaks(e)
    assert not problems, "\n".join(problems)


def test_the_leak_finder_catches_an_answer_in_a_hint():
    """The finder itself: a hint quoting a solution's line, one assigning, one calling as the solution does."""
    e = next(x for x in EXERCISES if x.id == "4.1")
    bad = Exercise(**{**e.__dict__, "hints": ("Look at the gradients.",
                                              "Call `dist.all_reduce( p.grad )`, it sums.",
                                              "then  p.grad.div_(world)  -- and world = the size")})
    got = leaks(bad)
    assert any("line 'dist.all_reduce(p.grad)'" in g for g in got), got
    assert any("call 'p.grad.div_(world)'" in g for g in got), got
    assert any("assigns in Python: 'world = the'" in g for g in got), got
    assert not leaks(Exercise(**{**e.__dict__, "hints": ("a >= b and a == c", "x <= y", "rank r != s")}))
