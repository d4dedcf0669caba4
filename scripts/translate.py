"""The Chinese edition: translation files in, zh notebooks out (see disttutor/course/translation.py).

    python scripts/translate.py status              # per chapter: units, translated, missing, stale
    python scripts/translate.py stub [NN ...]       # add every missing unit to its file, English marked todo
    python scripts/translate.py stale NN            # the stale entries: the Chinese beside the English now
    python scripts/translate.py sign NN KEY [...]   # after updating them: pin them to the English now
    python scripts/translate.py build [NN ...]      # chapters/zh/NN_topic.ipynb from chapters/NN_topic.ipynb
    python scripts/translate.py check [NN ...]      # status, and the glossary's rules on the Chinese
    python scripts/translate.py ids                 # give every markdown cell of chapters/src a stable id

A zh notebook is the English notebook, executed once (``scripts/build_notebooks.py``), with its
markdown cells replaced by their translations and the course's own cards (header, exercise card,
hint, answer, prediction) rendered in Chinese. Its code cells and every other output are the
English notebook's: the same code, the same run. It never runs anything.
"""
from __future__ import annotations

import copy
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from disttutor.course import translation as tr, zh_units as zu  # noqa: E402  (the repository on the path first)

ZH = os.path.join(ROOT, "chapters", "zh")
# The course's cards are code cells whose whole source is one call; their output is re-rendered in Chinese.
_CALL = re.compile(r'^(?P<fn>card|hint|answer)\("(?P<arg>[^"]+)"\)$')


def _build_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_build_notebooks", os.path.join(ROOT, "scripts", "build_notebooks.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def english_path(number: int) -> str:
    return os.path.join(ROOT, "chapters", zu.stem(number) + ".ipynb")


def zh_path(number: int) -> str:
    return os.path.join(ZH, zu.stem(number) + ".ipynb")


def _markdown_output(md: str) -> dict:
    return {"text/markdown": md, "text/plain": md}


_BUILT = re.compile(r"about (?P<seconds>\d+) s top to bottom on (?P<cores>\d+) CPU cores, (?P<gpus>\d+) GPUs, "
                    r"torch (?P<torch>[^ )]+) \(measured\)")


def _build_of(outs: list) -> dict | None:
    """The build the English header reports (the run whose outputs the zh notebook carries), not
    chapters/build_times.json, which a later build of the English chapter may have changed."""
    text = "".join("".join(o.get("data", {}).get("text/markdown", "")) for o in outs)
    m = _BUILT.search(text)
    if m is None:
        return None
    return {"seconds": float(m["seconds"]), "cores": int(m["cores"]), "gpus": int(m["gpus"]), "torch": m["torch"]}


def zh_outputs(cell: dict, number: int) -> list | None:
    """The Chinese outputs of a course card cell, or None for any other cell (its outputs are kept)."""
    from disttutor.course import errata, problems, puzzles, shape
    from disttutor.course.chapters import GLOSSARY_CALL, HEADER_CALL, glossary_markdown, header_markdown

    src = "".join(cell["source"]).strip()
    outs = cell.get("outputs", [])
    if HEADER_CALL.format(number) in src:
        md = header_markdown(number, _build_of(outs), lang="zh")
    elif src.endswith(GLOSSARY_CALL.format(number)):
        md = glossary_markdown(number, lang="zh")
    elif src.endswith(errata.ERRATA_CALL):
        md = errata.errata_markdown(lang="zh")
    elif _CALL.match(src):
        m = _CALL.match(src)
        if m["fn"] == "hint":  # the build ran the cell once: the first hint
            md = shape.hint(m["arg"], 1, lang="zh")
        else:
            md = getattr(shape, m["fn"])(m["arg"], lang="zh")
    elif any(problems.MIME in o.get("data", {}) for o in outs):
        md = problems.problem_in(next(o["data"][problems.MIME] for o in outs if problems.MIME in o.get("data", {})), "zh")
    elif any(puzzles.MIME in o.get("data", {}) for o in outs):
        md = puzzles.puzzle_in(next(o["data"][puzzles.MIME] for o in outs if puzzles.MIME in o.get("data", {})), "zh")
    elif src.startswith("reveal(") or "\nreveal(" in src:
        md = None
        new = copy.deepcopy(outs)
        for o in new:
            if "text/markdown" in o.get("data", {}):
                en = "".join(o["data"]["text/markdown"])
                o["data"] = _markdown_output(shape.reveal_in(en, "zh"))
                md = True
        return new if md else None
    else:
        return None
    new = copy.deepcopy(outs)
    kinds = [o for o in new if o.get("output_type") in ("execute_result", "display_data") and "text/markdown" in o.get("data", {})]
    if len(kinds) != 1:
        raise SystemExit(f"chapter {number}: the card cell {src[:40]!r} has {len(kinds)} markdown outputs, not 1: "
                         "rebuild the English chapter")
    kinds[0]["data"] = _markdown_output(md)
    return new


def catalogued(outs: list) -> list:
    """A cell's outputs with every sentence the message catalogue knows in Chinese (stderr and errors kept)."""
    from disttutor.course import messages

    new = copy.deepcopy([dict(o) for o in outs])
    for o in new:
        if o.get("output_type") == "stream" and o.get("name") == "stdout":
            o["text"] = messages.apply("".join(o["text"]))
        elif o.get("output_type") in ("execute_result", "display_data"):
            for kind in ("text/plain", "text/markdown"):
                if kind in o.get("data", {}):
                    o["data"] = dict(o["data"])
                    o["data"][kind] = messages.apply("".join(o["data"][kind]))
    return new


def build_zh(number: int, entries: list[tr.Entry] | None = None) -> dict:
    """The zh notebook of a chapter (a dict), or SystemExit naming what is missing, stale or out of date."""
    import nbformat

    st = zu.status(number, entries=entries)
    if not st.ok:
        raise SystemExit(st.problems() + f" (python scripts/translate.py stale {number} / stub {number})")
    nb = nbformat.read(english_path(number), as_version=4)
    want = _build_module().parse(open(os.path.join(zu.SRC, zu.stem(number) + ".py"), encoding="utf-8").read())
    if [(c.cell_type, c.source) for c in nb.cells] != [(c["type"], c["source"]) for c in want]:
        raise SystemExit(f"chapters/{zu.stem(number)}.ipynb is stale: rebuild it (course.py execute) first")
    entries = {e.key: e for e in (zu.entries(number) if entries is None else entries)}
    cells = []
    for cell in nb.cells:
        cell = copy.deepcopy(cell)
        if cell.cell_type == "markdown":
            cell.source = entries[cell.id].text
        else:
            outs = zh_outputs(cell, number)  # a card in Chinese, or None
            outs = catalogued(cell.get("outputs", []) if outs is None else outs)
            cell.outputs = [nbformat.from_dict(o) for o in outs]
        cells.append(cell)
        note = entries.get(f"note:{cell.id}")
        if note is not None:  # a translator's note, after the cell it is about
            cells.append(nbformat.v4.new_markdown_cell(note.text, id=f"zh-note-{cell.id}",
                                                       metadata={"tags": ["zh-note"]}))
    nb.cells = cells
    nb.metadata["disttutor"] = {"lang": "zh", "from": f"chapters/{zu.stem(number)}.ipynb"}
    return nb


def cmd_build(numbers: list[int]) -> int:
    import nbformat

    os.makedirs(ZH, exist_ok=True)
    for n in numbers:
        nbformat.write(build_zh(n), zh_path(n))
        print(f"chapters/zh/{zu.stem(n)}.ipynb")
    return 0


def cmd_status(numbers: list[int]) -> int:
    rows = [zu.status(n) for n in numbers]
    print("| chapter | units | translated | missing | stale | orphan | notes |")
    print("|---|---|---|---|---|---|---|")
    for s in rows:
        print(f"| {s.number} | {s.units} | {s.translated} | {len(s.missing)} | {len(s.stale)} | {len(s.orphans)} | {s.notes} |")
    bad = [s for s in rows if not s.ok]
    for s in bad:
        print(s.problems())
    return 1 if bad else 0


def chinese_units(number: int) -> dict[str, str]:
    """A chapter's Chinese in reading order (translated entries only)."""
    have = {e.key: e for e in zu.entries(number)}
    out = {}
    for key in zu.units(number):
        e = have.get(key)
        if e is not None and not e.todo:
            out[key] = e.text
        note = have.get(f"note:{key}")
        if note is not None:
            out[note.key] = note.text
    return out


def cmd_check(numbers: list[int]) -> int:
    from disttutor.course import zh_terms
    from disttutor.course.chapters import _glossary

    bad = cmd_status(numbers)
    problems = zh_terms.glossary_problems(_glossary())
    for n in numbers:
        problems += [f"chapter {n}: {p}" for p in zh_terms.text_problems(chinese_units(n), _glossary())]
    for p in problems:
        print(p)
    return 1 if bad or problems else 0


def cmd_stub(numbers: list[int]) -> int:
    for n in numbers:
        english = zu.units(n)
        have = {e.key: e for e in zu.entries(n)}
        out = []
        for key, en in english.items():  # in reading order; a unit's translation and its notes stay together
            out.append(have.pop(key, None) or tr.Entry(key, tr.sha(en), en, todo=True))
            note = have.pop(f"note:{key}", None)
            if note:
                out.append(note)
        out += list(have.values())  # orphans kept (status names them) so no translation is lost silently
        tr.write(zu.path(n), out)
        s = zu.status(n)
        print(f"{os.path.relpath(zu.path(n), ROOT)}: {s.units} units, {len(s.missing)} to translate")
    return 0


def cmd_stale(number: int) -> int:
    english = zu.units(number)
    for e in zu.entries(number):
        if e.sha is not None and not e.todo and e.key in english and e.sha != tr.sha(english[e.key]):
            print(f"=== {e.key}: the English now ===\n{english[e.key]}\n=== the Chinese (made from older English) ===\n{e.text}\n")
    return 0


def cmd_sign(number: int, keys: list[str]) -> int:
    english = zu.units(number)
    entries = zu.entries(number)
    unknown = [k for k in keys if k not in english]
    if unknown:
        print(f"no unit {', '.join(unknown)} in chapter {number}")
        return 2
    for e in entries:
        if e.key in keys:
            e.sha, e.todo = tr.sha(english[e.key]), False
    tr.write(zu.path(number), entries)
    return 0


def cmd_ids() -> int:
    """Give each markdown cell without an id the next free ``md-NN-KK``; the committed notebook's cells
    get the same ids (nothing else in it changes: no rerun)."""
    import nbformat

    for n in zu.numbers():
        src = os.path.join(zu.SRC, zu.stem(n) + ".py")
        lines = open(src, encoding="utf-8").read().split("\n")
        used = {int(m[1]) for m in re.finditer(rf'id="md-{n:02d}-(\d+)"', "\n".join(lines))}
        k = 0
        for i, line in enumerate(lines):
            if line.startswith("# %% [markdown]") and ' id="' not in line:
                k += 1
                while k in used:
                    k += 1
                lines[i] = line.replace("# %% [markdown]", f'# %% [markdown] id="md-{n:02d}-{k:02d}"', 1)
        open(src, "w", encoding="utf-8").write("\n".join(lines))
        ids = [cid for cid, _ in zu._markdown_cells(n)]
        nbp = english_path(n)
        nb = nbformat.read(nbp, as_version=4)
        md = [c for c in nb.cells if c.cell_type == "markdown"]
        if len(md) != len(ids):
            raise SystemExit(f"{nbp}: {len(md)} markdown cells, the source has {len(ids)}: rebuild it first")
        for c, cid in zip(md, ids):
            c.id = cid
        nbformat.write(nb, nbp)
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("status", "stub", "stale", "sign", "build", "ids", "check"):
        print(__doc__)
        return 2
    cmd, rest = argv[0], argv[1:]
    nums = [int(a) for a in rest if a.isdigit()] if cmd not in ("sign",) else []
    if cmd == "ids":
        return cmd_ids()
    if cmd == "stale":
        return cmd_stale(int(rest[0]))
    if cmd == "sign":
        return cmd_sign(int(rest[0]), rest[1:])
    nums = nums or zu.numbers()
    return {"status": cmd_status, "stub": cmd_stub, "build": cmd_build, "check": cmd_check}[cmd](nums)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
