"""The Chinese edition's message catalogue (what the programs print): status, what is left, signing.

    python scripts/zh_messages.py share            # per zh chapter: English words printed / Chinese characters
    python scripts/zh_messages.py todo 9 [--top 40] # the English output lines of chapter 9, most words first
    python scripts/zh_messages.py sign KEY [KEY ...] # pin each entry to its English as it is now
    python scripts/zh_messages.py check            # unsigned, unused, placeholder or term problems

Entries live in chapters/zh/src/messages/NN.yaml (see disttutor/course/messages.py). After editing
one, sign the entries and rebuild the zh chapters (python scripts/translate.py build).
"""
from __future__ import annotations

import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from disttutor.course import messages as M  # noqa: E402
from disttutor.course import zh_units as zu  # noqa: E402
from disttutor.course.translation import sha  # noqa: E402

ENGLISH = re.compile(r"[A-Za-z][A-Za-z'’-]*")
CHINESE = re.compile(r"[\u3400-\u9fff]")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
# What stays English by design: a printed line of code or a command, and an error's own text.
CODE_LINE = re.compile(r"^\s*(?:\[rank \d+\]\s*)?(?:[A-Za-z_][\w.]*(?:\[[^\]]*\])*\s*(?:=|\+=|-=)(?!=)|"
                       r"(?:dist|torch|nn|os|sys|F|np|disttutor)\.\w+|torchrun\b|python3?\b|srun\b|sbatch\b|"
                       r"import\b|from\b|def\b|for\b|if\b|return\b|with\b|print\(|#|\"\"\"|"
                       r"\w+(?:\s*,\s*[\w.\[\]]+)+\s*=(?!=)|[a-z_]\w*(?:\.\w+)*\([^)]*\)?\s*(?:#.*)?$)")
ERROR_TEXT = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Warning|Interrupt)\b:?.*$")


def _glossary_terms_out(text: str) -> str:
    """The glossary card's English column is English by design (its notes are not): left out."""
    if "| 中文 | English |" not in text:
        return text
    rows = []
    for ln in text.splitlines():
        cells = ln.split("|")
        rows.append("|".join(cells[:2] + cells[3:]) if ln.startswith("|") and len(cells) > 3 else ln)
    return "\n".join(rows)


def words(text: str) -> int:
    """English words, identifiers (snake_case, CONSTANTS, names with digits) and acronyms not counted."""
    return sum(1 for w in ENGLISH.findall(text) if not (w.isupper() and len(w) > 1))


SCRIPT = re.compile(r"^\s*(?:#!|apiVersion:)")  # a printed script or manifest: code, whole


def prose(text: str) -> str:
    """The words of ``text`` a translation could change: no code, commands, identifiers or error texts."""
    if SCRIPT.match(text):
        return ""
    # Math ($...$, $$...$$: the same symbols in both editions) and HTML markup (a card's <details>) are
    # not words a translation could change.
    text = re.sub(r"</?[A-Za-z][^>\n]*>", " ", re.sub(r"\$\$.+?\$\$|\$[^$\n]+\$", " ", text, flags=re.S))
    text = re.sub(r"\b\w*(?:_\w*|\d\w*[A-Za-z]\w*)\b", " ", CODE.sub(" ", _glossary_terms_out(text)))
    return "\n".join(ERROR_TEXT.sub(" ", ln) for ln in text.splitlines() if not CODE_LINE.match(ln))


def _texts(cell: dict) -> list[str]:
    """What a code cell shows a reader in words: stdout and rich text (stderr and errors excluded)."""
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream" and o.get("name") == "stdout":
            out.append("".join(o["text"]))
        elif o.get("output_type") in ("execute_result", "display_data"):
            d = o.get("data", {})
            t = d.get("text/markdown") or d.get("text/plain")
            if t and not any(k.startswith(("image/", "application/vnd.jupyter.widget")) for k in d):
                out.append("".join(t))
    return out


def outputs(path: str) -> list[str]:
    cells = json.load(open(path, encoding="utf-8"))["cells"]
    return [t for c in cells if c["cell_type"] == "code" for t in _texts(c)]


def share(number: int) -> tuple[int, int]:
    """(English words printed in outputs, code and backticked error texts excluded; Chinese characters
    on the page) of a zh chapter."""
    path = os.path.join(ROOT, "chapters", "zh", zu.stem(number) + ".ipynb")
    cells = json.load(open(path, encoding="utf-8"))["cells"]
    md = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    outs = outputs(path)
    english = sum(words(prose(t)) for t in outs)
    chinese = len(CHINESE.findall(md)) + sum(len(CHINESE.findall(t)) for t in outs)
    return english, chinese


def cmd_share() -> int:
    tot = [0, 0]
    print("| ch | English words printed | Chinese characters | share |\n|---|---|---|---|")
    for n in zu.numbers():
        e, c = share(n)
        tot[0] += e
        tot[1] += c
        print(f"| {n} | {e:,} | {c:,} | {e / c:.1%} |")
    print(f"| all | {tot[0]:,} | {tot[1]:,} | {tot[0] / tot[1]:.1%} |")
    return 0


def cmd_todo(number: int, top: int) -> int:
    path = os.path.join(ROOT, "chapters", "zh", zu.stem(number) + ".ipynb")
    lines = {}
    for t in outputs(path):
        for ln in ([] if SCRIPT.match(t) else t.splitlines()):
            n = words(prose(ln))
            if n >= 3:
                lines[ln] = lines.get(ln, 0) + n
    for ln, n in sorted(lines.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{n:4d}  {ln[:160]}")
    return 0


def check() -> list[str]:
    msgs = M.read()
    out = []
    texts = [t for n in zu.numbers() for t in outputs(os.path.join(ROOT, "chapters", zu.stem(n) + ".ipynb"))]
    counts = M.used(msgs, texts)
    for m in msgs:
        if not m.signed:
            out.append(f"{m.key}: not signed for its English as it is now (scripts/zh_messages.py sign {m.key})")
        if sorted(M.placeholders(m.en)) != sorted(M.placeholders(m.zh)):
            out.append(f"{m.key}: the Chinese has placeholders {M.placeholders(m.zh)}, the English {M.placeholders(m.en)}")
        if not CHINESE.search(m.zh):
            out.append(f"{m.key}: no Chinese in its zh")
        if counts[m.key] == 0 and not (m.group and any(counts[o.key] for o in msgs if o.group == m.group)):
            out.append(f"{m.key}: its English matches nothing the English notebooks print (stale: the code's wording changed?)")
    return out


def cmd_sign(keys: list[str]) -> int:
    known = {m.key for m in M.read()}
    unknown = [k for k in keys if k not in known]
    if unknown:
        print(f"no message {', '.join(unknown)}")
        return 2
    for file in M.files():
        msgs = M.read(file)
        if any(m.key in keys for m in msgs):
            M.write([M.Message(m.key, m.en, m.zh, sha(m.en), m.group) if m.key in keys else m for m in msgs], file)
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("share", "todo", "sign", "check"):
        print(__doc__)
        return 2
    if argv[0] == "share":
        return cmd_share()
    if argv[0] == "todo":
        top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 40
        return cmd_todo(int(argv[1]), top)
    if argv[0] == "sign":
        return cmd_sign(argv[1:])
    found = check()
    print("\n".join(found) or "the catalogue is signed, used and consistent")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
