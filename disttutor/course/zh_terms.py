"""The glossary's rules on the Chinese edition: every term one way, field terms in English glossed once.

``disttutor/course/glossary.yaml`` is the one place for the course's terms. In the Chinese edition:

* a term is written as its ``zh``; none of its ``avoid`` renderings appears anywhere;
* a term with ``keep:`` (DDP, all-reduce, rank...) is written as that English word, as Chinese
  engineers write it, and at its first use in each chapter (a heading or the card's title may
  only name it; then the first sentence using it counts) its Chinese stands right beside it ("all-reduce（全归约）", or "全归约（all-reduce）");
* the glossary itself gives each English term one Chinese and each Chinese term one English.

Code (fenced blocks, inline code) and link targets are not prose and are not checked.
Kernel side; imports no torch.
"""
from __future__ import annotations

import re

NEAR = 30  # characters either side of a kept word's first use within which its Chinese must stand

__all__ = ["prose", "glossary_problems", "text_problems"]


def prose(markdown: str) -> str:
    """The words of a Markdown text: code blocks, inline code, HTML tags and link targets removed."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"`[^`\n]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "] ", text)
    return re.sub(r"<[^>\n]+>", " ", text)


def _word(token: str) -> re.Pattern:
    # an English word inside Chinese text: no ASCII letter, digit, "_" or "-" glued to either side;
    # a word spelt with capitals (DDP, ZeRO) is that spelling only ("Zero Bubble" is not ZeRO)
    flags = 0 if any(ch.isupper() for ch in token) else re.I
    # ("ZeRO-2" is a use of ZeRO: a hyphen and a digit may follow)
    return re.compile(rf"(?<![A-Za-z0-9_-]){re.escape(token)}(?![A-Za-z0-9_]|-[A-Za-z_])", flags)


def _key(en: str) -> str:
    return re.sub(r"\s*\(.*?\)", "", en).strip().lower()


def glossary_problems(entries) -> list[str]:
    """Terms the glossary itself translates two ways."""
    out = []
    by_en: dict[str, set] = {}
    by_zh: dict[str, set] = {}
    for e in entries:
        by_en.setdefault(_key(e["en"]), set()).add(e["zh"])
        by_zh.setdefault(e["zh"], set()).add(_key(e["en"]))
        for a in e.get("avoid", []):
            if any(a == f["zh"] for f in entries):
                out.append(f"{e['zh']}: avoids {a}, which is another term's Chinese")
    out += [f"'{en}' has two Chinese terms: {', '.join(sorted(zh))}" for en, zh in by_en.items() if len(zh) > 1]
    out += [f"{zh} stands for two English terms: {', '.join(sorted(en))}" for zh, en in by_zh.items() if len(en) > 1]
    return out


def text_problems(units: dict[str, str], entries) -> list[str]:
    """``units``: one chapter's Chinese, ``{key: text}`` in reading order. What breaks the rules, with where."""
    out = []
    texts = {k: prose(v) for k, v in units.items()}
    for e in entries:
        # The term's own gloss may name an avoided rendering ("集体通信（NCCL 的中文名里叫集合通信）"): a reader
        # meets it once, beside the term, as what they may see elsewhere.
        glossed = {k: re.sub(re.escape(e["zh"]) + r"（[^）]*）", e["zh"], t) for k, t in texts.items()}
        for a in e.get("avoid", []):
            out += [f"{k}: writes {a!r}; the glossary's term is {e['zh']!r}" for k, t in glossed.items() if a in t]
        keep = e.get("keep")
        if not keep:
            continue
        for k, m in ((k, m) for k, t in texts.items() if k != "chapter:title" for m in _word(keep).finditer(t)):
            t = texts[k]
            if e["zh"] in t[max(0, m.start() - NEAR):m.end() + NEAR]:
                break  # glossed at its first use
            line = t[t.rfind("\n", 0, m.start()) + 1:m.start()]
            if re.match(r"#{1,6} ", line):
                continue  # a heading names the term; the first sentence using it glosses it
            out.append(f"{k}: first use of {keep!r} in the chapter without its Chinese beside it "
                       f"(write {keep}（{e['zh']}）): …{t[max(0, m.start() - 20):m.end() + 20]!s}…")
            break
    return out
