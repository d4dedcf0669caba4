"""The Chinese edition's translations: one file per chapter, each entry keyed and pinned to its English.

A chapter's English texts (its *units*) are its markdown cells (keyed by their stable id in
``chapters/src/NN_topic.py``), its card's title and needs, its exercises' titles and hints, and
its questions' worked answers. ``chapters/zh/src/NN_topic.md`` holds one entry per unit::

    <!-- md-04-07 · en:3f2a9c1b2d4e -->
    DDP 在每个进程里保存一份完整的模型副本……

The hash is of the English text the entry was translated from. When the English changes, the
hash no longer matches and the entry is *stale*: ``scripts/translate.py stale NN`` shows it, the
translator updates the Chinese and signs it (``scripts/translate.py sign NN KEY``), and the
test (tests/test_zh_edition.py) fails until then. An entry marked ``· todo`` holds English still
to translate; an entry ``<!-- note:md-00-02 · zh-only -->`` is a translator's note, shown after
that cell in the Chinese edition only.

Kernel side; imports no torch.
"""
from __future__ import annotations

import glob
import hashlib
import os
import re
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "chapters", "src")
ZH_SRC = os.path.join(ROOT, "chapters", "zh", "src")
_ENTRY = re.compile(r"^<!-- (?P<key>\S+) · (?:en:(?P<sha>[0-9a-f]{12})(?P<todo> · todo)?|(?P<note>zh-only)) -->$", re.M)
_MARK = re.compile(r'^# %% \[markdown\](?: id="(?P<id>[A-Za-z0-9-]+)")?')

__all__ = ["Entry", "Status", "sha", "units", "read", "write", "status", "text", "chapter_of"]


def sha(english: str) -> str:
    """The pin of an English text: whitespace at its ends does not count, every other character does."""
    return hashlib.sha256(english.strip().encode("utf-8")).hexdigest()[:12]


@dataclass
class Entry:
    key: str
    sha: str | None      # of the English it was made from; None for a zh-only note
    text: str            # the Chinese (or, while todo, the English to translate)
    todo: bool = False


def stem(number: int) -> str:
    from disttutor.course.chapters import chapter

    return chapter(number).stem


def path(number: int) -> str:
    return os.path.join(ZH_SRC, stem(number) + ".md")


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
    out = {"chapter:title": c.title, "chapter:needs": c.needs}
    for cid, source in (_markdown_cells(number) if cells is None else cells):
        if cid is None:
            raise ValueError(f"chapter {number}: a markdown cell has no id (run `python scripts/translate.py ids`): "
                             f"{source[:60]!r}")
        out[cid] = source
    for e in EXERCISES:
        if e.chapter == number:
            out[f"title:{e.id}"] = e.title
            out.update({f"hint:{e.id}:{i}": h for i, h in enumerate(e.hints, 1)})
    out.update({f"answer:{q}": ANSWERS[q]() for q in sorted(ANSWERS, key=_qorder) if chapter_of(q) == number})
    return out


def _qorder(q: str) -> tuple[int, int]:
    n, k = q.split(".q")
    return int(n), int(k)


def chapter_of(question_or_exercise: str) -> int:
    return int(question_or_exercise.split(".")[0])


def read(number: int, file: str | None = None) -> list[Entry]:
    """The entries of a chapter's translation file, in file order ([] when it does not exist)."""
    file = file or path(number)
    if not os.path.exists(file):
        return []
    with open(file, encoding="utf-8") as f:
        body = f.read()
    marks = list(_ENTRY.finditer(body))
    out = []
    for m, nxt in zip(marks, marks[1:] + [None]):
        text = body[m.end():nxt.start() if nxt else len(body)].strip("\n").rstrip()
        out.append(Entry(m["key"], m["sha"], text, bool(m["todo"])))
    keys = [e.key for e in out]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"{os.path.relpath(file, ROOT)}: entries given twice: {', '.join(twice)}")
    return out


HEAD = ("<!-- The Chinese edition of chapters/src/{stem}.py: one entry per English text, keyed as the English is,\n"
        "     with the hash of the English it was translated from. See disttutor/course/translation.py;\n"
        "     `python scripts/translate.py status` tells what is missing or stale. -->\n")


def write(number: int, entries: list[Entry], file: str | None = None) -> None:
    file = file or path(number)
    os.makedirs(os.path.dirname(file), exist_ok=True)
    parts = [HEAD.format(stem=stem(number))]
    for e in entries:
        mark = f"<!-- {e.key} · zh-only -->" if e.sha is None else f"<!-- {e.key} · en:{e.sha}{' · todo' if e.todo else ''} -->"
        parts.append(f"{mark}\n{e.text}\n")
    with open(file, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))


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
    entries = read(number) if entries is None else entries
    by_key = {e.key: e for e in entries if e.sha is not None}
    notes = [e for e in entries if e.sha is None]
    missing = [k for k in english if k not in by_key or by_key[k].todo]
    stale = [k for k in english if k in by_key and not by_key[k].todo and by_key[k].sha != sha(english[k])]
    orphans = [k for k in by_key if k not in english]
    orphans += [e.key for e in notes if not e.key.startswith("note:") or e.key[5:] not in english]
    return Status(number, len(english), len(english) - len(missing) - len(stale), missing, stale, orphans, len(notes))


def text(number: int, key: str) -> str | None:
    """The Chinese for one unit of a chapter, or None where there is no fresh translation (the caller
    shows the English then: a reader never sees a translation of text that has since changed)."""
    english = units(number).get(key)
    e = next((e for e in read(number) if e.key == key), None)
    if english is None or e is None or e.todo or e.sha != sha(english):
        return None
    return e.text


def numbers() -> list[int]:
    from disttutor.course.chapters import CHAPTERS

    have = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(SRC, "[0-9][0-9]_*.py"))}
    return [n for n, c in sorted(CHAPTERS.items()) if c.stem in have]
