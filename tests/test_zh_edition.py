"""The Chinese edition (chapters/zh/): built from the English chapters and one translation file each.

What fails here: a markdown cell without a stable id; a missing, untranslated, stale or orphaned
translation; a zh notebook that is not what ``scripts/translate.py build`` makes from the English
notebook and its translations now; a zh code cell or output that differs from the English one (the
course's own cards excepted: they are rendered in Chinese); a glossary term translated two ways;
Markdown structure (headings, code blocks) lost in translation. It launches nothing (~10 s).
"""
from __future__ import annotations

import copy
import glob
import json
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import build_notebooks  # noqa: E402
import translate  # noqa: E402  (scripts/translate.py: the zh build)

from disttutor.course import lang, shape, translation as tr, zh_terms, zh_units as zu  # noqa: E402
from disttutor.course.chapters import _glossary  # noqa: E402

NUMBERS = zu.numbers()
SOURCES = sorted(glob.glob(os.path.join(ROOT, "chapters", "src", "[0-9][0-9]_*.py")))


def test_every_markdown_cell_has_a_stable_id_unique_in_the_course():
    seen = {}
    for src in SOURCES:
        n = int(os.path.basename(src)[:2])
        for c in build_notebooks.parse(open(src, encoding="utf-8").read()):
            if c["type"] != "markdown":
                continue
            assert c["id"], (f"{os.path.basename(src)}: a markdown cell has no id (run `python scripts/translate.py "
                             f"ids`): {c['source'][:60]!r}")
            assert re.fullmatch(rf"md-{n:02d}-\d\d+", c["id"]), f"{c['id']}: ids are md-{n:02d}-KK in chapter {n}"
            assert c["id"] not in seen, f"{c['id']} is used twice ({seen.get(c['id'])} and {os.path.basename(src)})"
            seen[c["id"]] = os.path.basename(src)


@pytest.mark.parametrize("n", NUMBERS)
def test_every_unit_is_translated_from_the_english_as_it_is_now(n):
    s = zu.status(n)
    assert s.ok, (s.problems() + f"\n`python scripts/translate.py stale {n}` shows the stale ones beside the English "
                  f"now; `stub {n}` adds the missing ones")
    assert s.translated == s.units


@pytest.mark.parametrize("n", NUMBERS)
def test_the_committed_zh_notebook_is_what_the_build_makes_now(n):
    path = translate.zh_path(n)
    assert os.path.exists(path), f"no {os.path.relpath(path, ROOT)}: run `python scripts/translate.py build {n}`"
    got = json.load(open(path, encoding="utf-8"))
    import nbformat

    want = json.loads(nbformat.writes(translate.build_zh(n)))  # as written: sources as lists of lines
    assert got == want, (f"{os.path.relpath(path, ROOT)} is out of date (its English chapter or translation changed): "
                         f"run `python scripts/translate.py build {n}`")


@pytest.mark.parametrize("n", NUMBERS)
def test_zh_code_cells_and_outputs_are_the_english_ones(n):
    en = json.load(open(translate.english_path(n), encoding="utf-8"))["cells"]
    zh = json.load(open(translate.zh_path(n), encoding="utf-8"))["cells"]
    en_code = [c for c in en if c["cell_type"] == "code"]
    zh_code = [c for c in zh if c["cell_type"] == "code"]
    assert [(c["id"], c["source"], c["metadata"], c["execution_count"]) for c in zh_code] == \
        [(c["id"], c["source"], c["metadata"], c["execution_count"]) for c in en_code], "a zh code cell differs"
    cards = 0
    for e, z in zip(en_code, zh_code):
        if translate.zh_outputs(e, n) is None:  # the English run's, with the catalogue's sentences in Chinese
            assert _joined(z["outputs"]) == _joined(translate.catalogued(e["outputs"])), \
                f"cell {e['id']}: its outputs differ from the English run's"
        else:  # a course card: the same kind of output, in Chinese
            cards += 1
            assert [o["output_type"] for o in z["outputs"]] == [o["output_type"] for o in e["outputs"]]
            assert _joined(z["outputs"]) == _joined(translate.catalogued(translate.zh_outputs(e, n)))
            md = "".join(next(o for o in z["outputs"] if "text/markdown" in o.get("data", {}))["data"]["text/markdown"])
            assert re.search(r"[\u4e00-\u9fff]", md), f"cell {e['id']}: the card is not in Chinese: {md[:80]!r}"
    assert cards >= 2, "the header and glossary cards at least"
    assert [c["id"] for c in zh if c["cell_type"] == "markdown" and not c["id"].startswith("zh-note-")] == \
        [c["id"] for c in en if c["cell_type"] == "markdown"]


def _joined(outs: list) -> list:
    """Outputs with every text joined (a notebook stores text as a list of lines or as one string)."""
    j = lambda t: "".join(t) if isinstance(t, list) else t  # noqa: E731
    out = []
    for o in outs:
        o = dict(o)
        if "text" in o:
            o["text"] = j(o["text"])
        if "data" in o:
            o["data"] = {k: j(v) if k.startswith("text/") else v for k, v in o["data"].items()}
        out.append(o)
    return out


CJK = "[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]"


def _headings(md: str) -> list[int]:
    body = re.sub(r"```.*?```", "", md, flags=re.S)
    return [len(m[1]) for m in re.finditer(r"^(#{1,6}) ", body, re.M)]


def _fences(md: str) -> list[str]:
    return re.findall(r"```.*?```", md, flags=re.S)


@pytest.mark.parametrize("n", NUMBERS)
def test_translations_keep_the_markdown_structure_and_every_code_block(n):
    english = zu.units(n)
    bad = []
    for e in zu.entries(n):
        if e.key not in english or e.todo:
            continue
        en = english[e.key]
        if _headings(e.text) != _headings(en):
            bad.append(f"{e.key}: headings {_headings(e.text)} vs the English {_headings(en)}")
        if _fences(e.text) != _fences(en):
            bad.append(f"{e.key}: a code block differs from the English one (code is never translated)")
        # a line break inside a Chinese paragraph renders as a stray space between two characters
        prose_lines = re.sub(r"```.*?```", "", e.text, flags=re.S).split("\n")
        for a, b in zip(prose_lines, prose_lines[1:]):
            if re.search(CJK + "$", a) and re.match(r"\s*" + CJK, b) and not a.lstrip().startswith(("|", "#")):
                bad.append(f"{e.key}: a line break inside a paragraph, after …{a[-12:]}")
                break
        if not re.search(r"[\u4e00-\u9fff]", e.text) and re.search(r"[A-Za-z]{3,} [a-z]{3,} [a-z]{3,}",
                                                                      zh_terms.prose(e.text)):  # English prose left
            bad.append(f"{e.key}: no Chinese in it: {e.text[:60]!r}")
    assert not bad, "\n".join(bad)


def test_the_glossary_gives_every_term_one_translation():
    assert zh_terms.glossary_problems(_glossary()) == []


@pytest.mark.parametrize("n", NUMBERS)
def test_the_chapter_writes_each_term_one_way_and_glosses_kept_english_terms(n):
    problems = zh_terms.text_problems(translate.chinese_units(n), _glossary())
    assert not problems, "\n".join(problems)


def test_the_term_rules_catch_a_second_translation_and_an_unglossed_first_use():
    g = [{"zh": "全归约", "en": "all-reduce", "chapter": 2, "keep": "all-reduce", "avoid": ["全局归约"]},
         {"zh": "微批次", "en": "micro-batch", "chapter": 7, "avoid": ["微批量"]}]
    ok = {"a": "每个 rank 调用 all-reduce（全归约）。", "b": "再做一次 all-reduce，把 4 个微批次的梯度相加。"}
    assert zh_terms.text_problems(ok, g) == []
    assert zh_terms.text_problems({"a": "全归约（all-reduce）之后"}, g) == []  # the other order
    assert zh_terms.text_problems({"a": "用 `all-reduce` 求和；再做 all-reduce（全归约）"}, g) == []  # code is not prose
    assert zh_terms.text_problems({"a": "## 为什么 all-reduce 够用\n\n每一步做一次 all-reduce（全归约）。"}, g) == []  # a heading names it
    assert zh_terms.text_problems({"chapter:title": "all-reduce 入门", "a": "all-reduce（全归约）"}, g) == []  # so does a title
    two = zh_terms.text_problems({"a": "all-reduce（全归约）", "b": "4 个微批量"}, g)
    assert len(two) == 1 and "'微批量'" in two[0] and "微批次" in two[0]
    bare = zh_terms.text_problems({"a": "每个 rank 调用 all-reduce。", "b": "all-reduce（全归约）"}, g)
    assert len(bare) == 1 and bare[0].startswith("a: first use of 'all-reduce'")
    assert zh_terms.glossary_problems(g + [{"zh": "全局归约", "en": "all-reduce (sum)", "chapter": 2}]) != []
    # the term's own gloss may name the rendering a reader meets elsewhere; anywhere else it is caught
    assert zh_terms.text_problems({"a": "all-reduce（全归约）", "b": "全归约（别处也写作全局归约）"}, g) == []
    assert len(zh_terms.text_problems({"a": "all-reduce（全归约）", "b": "全局归约（也叫全归约）"}, g)) == 1


def test_a_changed_english_cell_marks_its_translation_stale_and_the_build_refuses():
    n = 4
    cells = [(cid, src) for cid, src in zu._markdown_cells(n)]
    cid, src = cells[3]
    changed = cells[:3] + [(cid, src.replace(".", ";", 1))] + cells[4:]  # one character of one cell
    s = zu.status(n, english=zu.units(n, cells=changed))
    assert s.stale == [cid] and not s.missing and not s.orphans, s
    added = cells + [("md-04-99", "A new paragraph.")]
    s = zu.status(n, english=zu.units(n, cells=added))
    assert s.missing == ["md-04-99"] and not s.stale
    entries = [e for e in zu.entries(n) if e.key != cid]  # a translation lost: missing, and the build refuses
    with pytest.raises(SystemExit, match=f"missing: {cid}"):
        translate.build_zh(n, entries=entries)
    stale = [copy.copy(e) for e in zu.entries(n)]
    for e in stale:
        if e.key == cid:
            e.sha = "0" * 12  # made from another English text
    with pytest.raises(SystemExit, match=f"stale: {cid}"):
        translate.build_zh(n, entries=stale)


def test_the_translation_file_round_trips_and_rejects_a_key_given_twice(tmp_path):
    entries = zu.entries(4)
    f = tmp_path / "04_ddp.md"
    tr.write(str(f), entries)
    assert [(e.key, e.sha, e.text, e.todo) for e in tr.read(str(f))] == \
        [(e.key, e.sha, e.text, e.todo) for e in entries]
    f.write_text(f.read_text(encoding="utf-8") + f"\n<!-- {entries[0].key} · en:{entries[0].sha} -->\n又一次\n",
                 encoding="utf-8")
    with pytest.raises(ValueError, match="given twice"):
        tr.read(str(f))


def test_zh_chapter_0_says_what_stays_english():
    notes = [e for e in zu.entries(0) if e.sha is None]
    assert notes, "chapter 0 of the zh edition has no note on what stays English"
    text = " ".join(e.text for e in notes)
    assert "英文" in text and "--lang zh" in text, text[:200]


def test_the_cards_speak_the_notebooks_language(tmp_path, monkeypatch):
    monkeypatch.delenv("DISTTUTOR_LANG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert lang.current() == "en"
    (tmp_path / "zh").mkdir()
    monkeypatch.chdir(tmp_path / "zh")  # JupyterLab runs a kernel in its notebook's folder: chapters/zh/
    assert lang.current() == "zh"
    assert shape.card("4.1").startswith("**练习 4.1 — ")
    assert shape.answer("4.q2").startswith("<details><summary>答案 4.q2")
    first = shape.hint("4.1", 1)
    assert first.startswith("练习 4.1，提示 1/3：") and re.search(r"[\u4e00-\u9fff]", first[12:]), first
    assert shape.hint("4.1", 4).endswith("参考答案是 solutions/ex4_1_naive_ddp.py（在课程的根目录下）。")
    monkeypatch.setenv("DISTTUTOR_LANG", "en")  # an explicit choice wins
    assert shape.card("4.1").startswith("**Exercise 4.1 — ")
    monkeypatch.setenv("DISTTUTOR_LANG", "fr")
    with pytest.raises(ValueError, match="languages are en, zh"):
        lang.current()


def test_a_stored_reveal_reads_in_chinese_with_the_runs_own_value_and_explanation():
    en = shape.reveal("4.q1", None, 12, rel_tol=0, explain="12 buckets were all-reduced.", lang="en").text
    zh = shape.reveal_in(en, "zh")
    assert zh == shape.reveal("4.q1", None, 12, rel_tol=0, explain="12 buckets were all-reduced.", lang="zh").text
    assert "**12**" in zh and "12 buckets were all-reduced." in zh and "你还没有做预测" in zh
    with pytest.raises(ValueError, match="rebuild the English chapter"):
        shape.reveal_in("You predicted **3**", "zh")


def test_a_zh_notebook_is_graded_as_the_english_one(tmp_path):
    """Same cells, same grade_ids: `disttutor grade` finds the learner's code in a zh notebook too
    (exercise 1.1: its checker runs no ranks)."""
    import shutil
    import subprocess

    for who, src in (("zh", translate.zh_path(1)), ("en", translate.english_path(1))):
        (tmp_path / "class" / who).mkdir(parents=True)
        shutil.copy(src, tmp_path / "class" / who)
    r = subprocess.run([sys.executable, "-m", "disttutor.course.grade", str(tmp_path / "class"), "--exercises", "1.1"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)))
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith(("zh ", "en "))}
    assert set(rows) == {"zh", "en"}, r.stdout + r.stderr
    assert rows["zh"].split(None, 1)[1] == rows["en"].split(None, 1)[1] and "still a stub" in rows["zh"], rows
