"""What the programs print, in Chinese too: one message catalogue for the Chinese edition.

The English edition's outputs are what the code printed; the Chinese edition carries the same run's
outputs (nothing is re-run) with every sentence the catalogue knows replaced by its Chinese.
``chapters/zh/src/messages/*.yaml`` hold one entry per message (one file a chapter, named by the
chapter that prints the message first; a message applies wherever it is printed)::

    - key: lost-rank
      en: "rank {rank}: killed by signal {signal}"
      zh: "rank {rank}：被信号 {signal} 终止"
      sha: 1f0c2a9e7b3d

``en`` is a template of what the code prints (``{name}`` stands for the part that changes from run
to run: a number, a rank, a time), ``zh`` its Chinese with the same placeholders, and ``sha`` pins
the English the Chinese was made from (``scripts/zh_messages.py sign KEY``). The tests fail when
an English template no longer matches anything the English notebooks print (the code's wording
changed: the entry is stale), when a Chinese template drops or adds a placeholder, or when ``sha``
is not the English's. Numbers, error messages (text in backticks, stderr) and code stay as they are.

Kernel side; imports no torch.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

from disttutor.course.translation import ZH_SRC, sha

__all__ = ["Message", "CATALOGUE", "read", "apply", "placeholders", "pattern"]

CATALOGUE = os.path.join(ZH_SRC, "messages")
_PH = re.compile(r"\{(\w+)\}")
_PROTECTED = re.compile(r"`[^`\n]*`")  # error texts and code, quoted in backticks: kept verbatim


@dataclass(frozen=True)
class Message:
    key: str
    en: str
    zh: str
    sha: str | None = None
    # One outcome of a verdict that prints one of several lines (a quiet machine's or a loaded one's): the
    # entries sharing a group are stale only when none of them matches what the notebooks print.
    group: str | None = None

    @property
    def signed(self) -> bool:
        return self.sha == sha(self.en)


def placeholders(template: str) -> list[str]:
    """The named placeholders of a template, backticked spans counted as ``_c0``, ``_c1`` ... in order."""
    return _PH.findall(_split_code(template))


def _split_code(template: str) -> str:
    """A template with each backticked span written as an implicit placeholder ``{_c0}``, ``{_c1}`` ..."""
    k = iter(range(1000))
    return _PROTECTED.sub(lambda m: "{_c%d}" % next(k), template)


def pattern(template: str) -> re.Pattern:
    """The regular expression an English template matches: literal text, each ``{name}`` a non-empty run
    of characters inside one line and one table cell (as short as possible; a placeholder that starts
    the template starts at a line or a cell, one that ends it runs to the end of its line or cell).
    A backticked span (code, an error text) matches any backticked span: it is kept as it was printed."""
    template = _split_code(template)
    parts, pos, seen = [], 0, set()
    found = list(_PH.finditer(template))
    for m in found:
        parts.append(re.escape(template[pos:m.start()]))
        name = m.group(1)
        if name in seen:
            parts.append(f"(?P={name})")
        elif name.startswith("_c"):
            parts.append(f"(?P<{name}>\\x00\\d+\\x00)")
        else:
            parts.append(f"(?P<{name}>[^\\n|]+?)")
            if m.start() == 0:
                parts.insert(0, "(?:^|(?<=\\|))")
            if m.end() == len(template):
                parts.append("(?=[ \\t]*(?:\\||$))")
        seen.add(name)
        pos = m.end()
    parts.append(re.escape(template[pos:]))
    return re.compile("".join(parts), re.M)


def files(path: str = CATALOGUE) -> list[str]:
    """The catalogue's files: ``path`` itself if it is a file, else its ``*.yaml`` files in order."""
    if os.path.isfile(path):
        return [path]
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".yaml")) if os.path.isdir(path) else []


def read(path: str = CATALOGUE) -> list[Message]:
    """Every entry of the catalogue (a directory of files, or one file); a key given twice is an error."""
    import yaml

    out = []
    for file in files(path):
        with open(file, encoding="utf-8") as f:
            raw = yaml.safe_load(f) or []
        out += [Message(str(e["key"]), str(e["en"]), str(e["zh"]), e.get("sha"), e.get("group")) for e in raw]
    keys = [m.key for m in out]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"{os.path.relpath(path)}: messages given twice: {', '.join(twice)}")
    return out


def write(messages: list[Message], path: str) -> None:
    """Write one catalogue file."""
    import yaml

    rows = [{"key": m.key, "en": m.en, "zh": m.zh, "sha": m.sha, **({"group": m.group} if m.group else {})}
            for m in messages]
    with open(path, "w", encoding="utf-8") as f:
        f.write("# What the programs print, in Chinese: see disttutor/course/messages.py.\n")
        yaml.safe_dump(rows, f, allow_unicode=True, sort_keys=False, width=1000)


def _stamp(path: str) -> tuple:
    return tuple((f, os.path.getmtime(f)) for f in files(path))


def titles() -> list[Message]:
    """Each exercise's title, as its checker prints it, with the chapter's signed translation of it (the
    translation units already pin it: no second copy of the Chinese here)."""
    import glob

    from disttutor.checks.registry import EXERCISES
    from disttutor.course.translation import read

    out = []
    for e in EXERCISES:
        files = glob.glob(os.path.join(ZH_SRC, f"{e.chapter:02d}_*.md"))
        entry = next((x for f in files for x in read(f) if x.key == f"title:{e.id}"), None)
        if entry is not None and not entry.todo and entry.sha == sha(e.title) and entry.text != e.title:
            out.append(Message(f"title:{e.id}", e.title, entry.text, sha(e.title)))
    return out


@functools.lru_cache(maxsize=4)
def _compiled(path: str, stamp: tuple):
    msgs = [m for m in read(path) if m.signed]
    if path == CATALOGUE:
        msgs += titles()
    # Longest English first: a sentence that contains a shorter message is translated whole.
    msgs.sort(key=lambda m: -len(m.en))
    return [(m, pattern(m.en)) for m in msgs if sorted(placeholders(m.en)) == sorted(placeholders(m.zh))]


def _hide(text: str) -> tuple[str, list[str]]:
    """``text`` with each backticked span replaced by a numbered marker, and the spans."""
    keep: list[str] = []

    def hide(m):
        keep.append(m.group(0))
        return f"\x00{len(keep) - 1}\x00"

    return _PROTECTED.sub(hide, text), keep


def apply(text: str, path: str = CATALOGUE) -> str:
    """``text`` with every catalogued English sentence replaced by its Chinese (backticked spans kept)."""
    if not text or not files(path):
        return text
    out, keep = _hide(text)
    for m, pat in _compiled(path, _stamp(path)):
        zh = _split_code(m.zh)
        out = pat.sub(lambda g: _fill(zh, g), out)
    return re.sub(r"\x00(\d+)\x00", lambda g: keep[int(g.group(1))], out)


def _fill(zh: str, g: re.Match) -> str:
    return _PH.sub(lambda p: g.group(p.group(1)), zh)


def used(messages: list[Message], texts: list[str]) -> dict[str, int]:
    """How many of ``texts`` each message's English matches (backticked spans matched as spans)."""
    hidden = [_hide(t)[0] for t in texts]
    return {m.key: sum(1 for t in hidden if pattern(m.en).search(t)) for m in messages}
