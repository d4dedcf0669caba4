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
that cell in the Chinese edition only. This module is the file format and the lookup the course's
cards use; :mod:`disttutor.course.zh_units` lists a chapter's units and how far their translation is.

Kernel side; imports no torch.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "chapters", "src")
ZH_SRC = os.path.join(ROOT, "chapters", "zh", "src")
_ENTRY = re.compile(r"^<!-- (?P<key>\S+) · (?:en:(?P<sha>[0-9a-f]{12})(?P<todo> · todo)?|(?P<note>zh-only)) -->$", re.M)
_MARK = re.compile(r'^# %% \[markdown\](?: id="(?P<id>[A-Za-z0-9-]+)")?')

__all__ = ["Entry", "sha", "file_of", "read", "write", "lookup"]


def sha(english: str) -> str:
    """The pin of an English text: whitespace at its ends does not count, every other character does."""
    return hashlib.sha256(english.strip().encode("utf-8")).hexdigest()[:12]


@dataclass
class Entry:
    key: str
    sha: str | None      # of the English it was made from; None for a zh-only note
    text: str            # the Chinese (or, while todo, the English to translate)
    todo: bool = False


def file_of(stem: str) -> str:
    """The translation file of the chapter ``chapters/src/<stem>.py``."""
    return os.path.join(ZH_SRC, stem + ".md")


def read(file: str) -> list[Entry]:
    """The entries of a translation file, in file order ([] when it does not exist)."""
    if not isinstance(file, str):  # the old read(number): say so, not "Bad file descriptor"
        raise TypeError(f"read() takes a translation file's path, got {file!r}; zh_units.entries(number) reads a chapter's")
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


def write(file: str, entries: list[Entry]) -> None:
    os.makedirs(os.path.dirname(file), exist_ok=True)
    parts = [HEAD.format(stem=os.path.basename(file)[:-3])]
    for e in entries:
        mark = f"<!-- {e.key} · zh-only -->" if e.sha is None else f"<!-- {e.key} · en:{e.sha}{' · todo' if e.todo else ''} -->"
        parts.append(f"{mark}\n{e.text}\n")
    with open(file, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))


def lookup(stem: str, key: str, english: str) -> str | None:
    """The Chinese for one unit, or None where there is no fresh translation of ``english`` (the caller
    shows the English then: a reader never sees a translation of a text that has since changed)."""
    e = next((e for e in read(file_of(stem)) if e.key == key), None)
    if e is None or e.todo or e.sha != sha(english):
        return None
    return e.text
