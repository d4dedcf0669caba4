"""What a learner reads in each committed chapter: the counts of the learner's page.

    python scripts/learner_view.py            # one row per chapter, and the course's total
    python scripts/learner_view.py 04 08      # some chapters
    python scripts/learner_view.py --lines 8  # also list the offending lines of chapter 8

A chapter has two layers (CONTRIBUTING.md, "The learner's page"): learner cells, and *proof* cells
(tag ``proof``, input collapsed) that check a claim and print one line. What a learner reads is the
markdown plus the code and printed output of the learner cells; proof cells are not counted as
reading. ``tests/test_learner_page.py`` enforces the rules this script counts. Standard library only.
"""
from __future__ import annotations

import ast
import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROOF = "proof"
# The course's plumbing a learner would not write (the learner's page keeps it out of learner cells).
PLUMBING = re.compile(r"\b(launch|check_\w+|format_table|show_code|deeper|quiet)\(")
# torch.distributed API a learner would write.
TORCH_API = re.compile(r"\b(dist\.\w+\(|init_process_group|DistributedDataParallel|DDP\(|fully_shard\(|"
                       r"PipelineStage\(|Schedule(GPipe|1F1B|Interleaved1F1B)\(|dcp\.(save|load)|"
                       r"torch\.distributed\b)")
# Words about how the course is built or tested, which never reach a learner.
INTERNAL = re.compile(r"\bissue \d+\b|\btests/|\btest_\w+\.py\b|\bbenchmarks/|\bnbval\b|\bCI\b|"
                      r"\bbuild machine\b|\bcommit [0-9a-f]{7,40}\b|\bpytest\b", re.I)
WORD = re.compile(r"[A-Za-z0-9_\u00c0-\uffff]+(?:['’.-][A-Za-z0-9_]+)*")
CJK = re.compile(r"[\u3400-\u9fff]")
MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.S)
MAX_LINE_WORDS = 25
MAX_SENTENCES = 3
# Raised from 4,000 / 45,000 when every chapter gained its derivations and one-line figure captions
# (draw, derive, then measure): math and problem cards are not counted as reading; their prose is.
# Exercise cards (card("N.M"): title, kind, difficulty, minutes) count as cards too, since the build
# exercises of every chapter were added; an exercise's markdown, hints and check output still count.
CHAPTER_WORDS = 4400
COURSE_WORDS = 49000


def notebooks(lang: str = "en") -> list[str]:
    folder = os.path.join(ROOT, "chapters", "zh" if lang == "zh" else "")
    return sorted(glob.glob(os.path.join(folder, "[0-9][0-9]_*.ipynb")))


def words(text: str) -> int:
    return len(WORD.findall(text)) + len(CJK.findall(text))


def _source(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def is_proof(cell: dict) -> bool:
    return PROOF in cell.get("metadata", {}).get("tags", [])


def printed(cell: dict) -> str:
    """The text a code cell shows: its streams and plain-text/markdown results (not images, not errors)."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream" and out.get("name") == "stdout":
            parts.append("".join(out.get("text", "")))
        elif out.get("output_type") in ("execute_result", "display_data"):
            data = out.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data or "image/png" in data:
                continue
            text = data.get("text/markdown") or data.get("text/plain") or ""
            parts.append("".join(text) if isinstance(text, list) else text)
    return "\n".join(parts)


def long_literals(source: str, min_words: int = 8) -> list[str]:
    """String literals (f-strings' text included) of ``min_words`` words or more in a code cell."""
    try:
        tree = ast.parse("\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if len(text.split()) >= min_words and not text.lstrip().startswith(("import ", "def ", "#")):
            found.append(text)
    return found


def _prose(text: str) -> str:
    """Printed text without its table rows (a row is a record, not a sentence)."""
    return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("|"))


def sentences(text: str) -> int:
    return len(re.findall(r"[.!?](?:\s|$)", text))


EXERCISE_CARD = re.compile(r'^card\("\d+\.\d+"\)$')


def _exercise(cell: dict) -> bool:
    """A worked problem's, a puzzle's or an exercise's card (tags problem, puzzle; the cell ``card("N.M")``,
    whose title, kind, difficulty and minutes head the stub): an exercise, not reading."""
    return (bool({"problem", "puzzle"} & set(cell.get("metadata", {}).get("tags", [])))
            or bool(EXERCISE_CARD.match(_source(cell).strip())))


def chapter_view(path: str) -> dict:
    nb = json.load(open(path))
    cells = nb["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    learner = [c for c in code if not is_proof(c)]
    proof = [c for c in code if is_proof(c)]
    # Worked problems (tag problem) are exercises, and math ($...$) is read as formulas: neither is
    # counted as reading.
    md_words = sum(words(MATH.sub(" ", _source(c))) for c in cells if c["cell_type"] == "markdown")
    out_words = sum(words(printed(c)) for c in learner if not _exercise(c))
    first_api = next((i for i, c in enumerate(cells) if c["cell_type"] == "code" and TORCH_API.search(_source(c))),
                     None)
    first_launch = next((i for i, c in enumerate(cells) if c["cell_type"] == "code"
                         and re.search(r"\blaunch\(", _source(c))), None)
    learner_text = [(i, _source(c)) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]
    learner_text += [(i, printed(c)) for i, c in enumerate(cells) if c in learner]
    # A worked problem's card is an exercise (its question, constants and working), not a printed line to read.
    reading = [c for c in learner if not _exercise(c)]
    long_lines = [(i, ln) for i, c in enumerate(cells) if c in reading
                  for ln in printed(c).splitlines() if words(ln) > MAX_LINE_WORDS and not CJK.search(ln)
                  and not ln.lstrip().startswith("|")]  # a table row is a record, not a sentence
    return {
        "chapter": os.path.basename(path)[:2],
        "cells": len(cells),
        "code": len(code),
        "proof": len(proof),
        "proof_shown": sum(1 for c in proof if not c.get("metadata", {}).get("jupyter", {}).get("source_hidden")),
        "plumbing": sum(1 for c in learner if PLUMBING.search(_source(c))),
        "literals": sum(len(long_literals(_source(c))) for c in learner),
        "internal": [(i, m.group(0)) for i, t in learner_text for m in INTERNAL.finditer(t)],
        "long_lines": long_lines,
        "wordy_cells": [i for i, c in enumerate(cells) if c in reading and sentences(_prose(printed(c))) > MAX_SENTENCES],
        "proof_lines": [(i, len([ln for ln in printed(c).splitlines() if ln.strip()])) for i, c in enumerate(cells)
                        if c in proof],
        "md_words": md_words,
        "out_words": out_words,
        "words": md_words + out_words,
        "first_api": None if first_api is None else round(100 * first_api / len(cells)),
        "first_api_cell": first_api,
        "first_launch_cell": first_launch,
    }


def table(views: list[dict]) -> str:
    head = ("ch", "cells", "code", "proof", "plumbing", "8+ word literals", "internal refs", "lines > 25 words",
            "cells > 3 sentences", "words (md + printed)", "first torch API at")
    rows = [head, tuple("---" for _ in head)]
    for v in views:
        rows.append((v["chapter"], v["cells"], v["code"], v["proof"], v["plumbing"], v["literals"], len(v["internal"]),
                     len(v["long_lines"]), len(v["wordy_cells"]), f'{v["words"]:,} ({v["md_words"]:,} + {v["out_words"]:,})',
                     "none" if v["first_api"] is None else f'{v["first_api"]} %'))
    tot = lambda k: sum(v[k] if isinstance(v[k], int) else len(v[k]) for v in views)  # noqa: E731
    rows.append(("all", tot("cells"), tot("code"), tot("proof"), tot("plumbing"), tot("literals"), tot("internal"),
                 tot("long_lines"), tot("wordy_cells"), f'{tot("words"):,} ({tot("md_words"):,} + {tot("out_words"):,})',
                 ""))
    return "\n".join("| " + " | ".join(str(x) for x in r) + " |" for r in rows)


def main(argv: list[str]) -> int:
    show = "--lines" in argv
    args = [a for a in argv if a != "--lines"]
    paths = [p for p in notebooks() if not args or os.path.basename(p)[:2] in args]
    views = [chapter_view(p) for p in paths]
    print(table(views))
    if show:
        for v in views:
            for i, ref in v["internal"]:
                print(f"ch{v['chapter']} cell {i}: internal reference {ref!r}")
            for i, ln in v["long_lines"]:
                print(f"ch{v['chapter']} cell {i}: {words(ln)} words: {ln[:100]}")
            for i in v["wordy_cells"]:
                print(f"ch{v['chapter']} cell {i}: prints more than {MAX_SENTENCES} sentences")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
