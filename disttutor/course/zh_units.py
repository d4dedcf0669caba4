"""A chapter's units (what it shows a reader in words) and how far its translation is (see translation.py).

Kernel side; imports no torch.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from disttutor.course.translation import ROOT, SRC, Entry, file_of, read, sha

__all__ = ["Status", "units", "status", "entries", "path", "stem", "numbers", "chapter_of"]


def stem(number: int) -> str:
    from disttutor.course.chapters import chapter

    return chapter(number).stem


def path(number: int) -> str:
    return file_of(stem(number))


def _markdown_cells(number: int) -> list[tuple[str | None, str]]:
    """``[(id, English markdown)]`` of a chapter's source, in order (the build's own parser)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_build_notebooks", os.path.join(ROOT, "scripts", "build_notebooks.py"))
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    with open(os.path.join(SRC, stem(number) + ".py"), encoding="utf-8") as f:
        return [(c["id"], c["source"]) for c in build.parse(f.read()) if c["type"] == "markdown"]


def units(number: int, cells: list[tuple[str | None, str]] | None = None) -> dict[str, str]:
    """``{key: English}`` of everything a chapter shows a reader in words, in reading order.

    ``cells`` replaces the chapter's markdown cells (a test changes one to see the drift caught).
    """
    from disttutor.checks.registry import EXERCISES
    from disttutor.course.answers import ANSWERS
    from disttutor.course.chapters import chapter

    c = chapter(number)
    out = {}
    for cid, source in (_markdown_cells(number) if cells is None else cells):
        if cid is None:
            raise ValueError(f"chapter {number}: a markdown cell has no id (run `python scripts/translate.py ids`): "
                             f"{source[:60]!r}")
        out[cid] = source
        if len(out) == 1:  # the chapter's card (its header cell) comes right after its title cell
            out.update({"chapter:title": c.title, "chapter:needs": c.needs})
    for e in EXERCISES:
        if e.chapter == number:
            out[f"title:{e.id}"] = e.title
            out.update({f"hint:{e.id}:{i}": h for i, h in enumerate(e.hints, 1)})
    out.update({f"answer:{q}": ANSWERS[q]() for q in sorted(ANSWERS, key=_qorder) if chapter_of(q) == number})
    from disttutor.course.problems import all_problems

    for pid, p in all_problems().items():
        if p.chapter == number:  # templates: the Chinese keeps the same {placeholders}
            out[f"problem:{pid}:q"], out[f"problem:{pid}:w"] = p.question, p.working
    from disttutor.course.puzzles import all_puzzles

    for pid, z in all_puzzles().items():
        if z.chapter == number:  # templates too: question, explanation, each named wrong answer's message
            out[f"puzzle:{pid}:q"], out[f"puzzle:{pid}:w"] = z.question, z.explanation
            out.update({f"puzzle:{pid}:x{i}": w for i, w in enumerate(z.wrong.values(), 1)})
    return out


def _qorder(q: str) -> tuple[int, int]:
    n, k = q.split(".q")
    return int(n), int(k)


def chapter_of(question_or_exercise: str) -> int:
    return int(question_or_exercise.split(".")[0])


def entries(number: int) -> list[Entry]:
    return read(path(number))


@dataclass
class Status:
    number: int
    units: int
    translated: int
    missing: list[str]     # no entry, or an entry still marked todo
    stale: list[str]       # made from another English text
    orphans: list[str]     # entries for no unit (a cell removed, an id changed)
    notes: int             # zh-only translator's notes

    @property
    def ok(self) -> bool:
        return not (self.missing or self.stale or self.orphans)

    def problems(self) -> str:
        said = [f"{what}: {', '.join(keys)}" for what, keys in
                (("missing", self.missing), ("stale", self.stale), ("orphan", self.orphans)) if keys]
        return f"chapter {self.number}: " + "; ".join(said)


def status(number: int, english: dict[str, str] | None = None, entries: list[Entry] | None = None) -> Status:
    english = units(number) if english is None else english
    entries = read(path(number)) if entries is None else entries
    by_key = {e.key: e for e in entries if e.sha is not None}
    notes = [e for e in entries if e.sha is None]
    missing = [k for k in english if k not in by_key or by_key[k].todo]
    stale = [k for k in english if k in by_key and not by_key[k].todo and by_key[k].sha != sha(english[k])]
    orphans = [k for k in by_key if k not in english]
    orphans += [e.key for e in notes if not e.key.startswith("note:") or e.key[5:] not in english]
    return Status(number, len(english), len(english) - len(missing) - len(stale), missing, stale, orphans, len(notes))


def numbers() -> list[int]:
    from disttutor.course.chapters import CHAPTERS

    have = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(SRC, "[0-9][0-9]_*.py"))}
    return [n for n, c in sorted(CHAPTERS.items()) if c.stem in have]
