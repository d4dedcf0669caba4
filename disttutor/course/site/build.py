"""Build the course's static website from the committed notebooks (nothing is executed).

    python -m disttutor.course.site [--out DIR]      # what `python3 course.py site` runs

Writes DIR (default ``site/`` in the repository): ``index.html`` (the landing page), one page per
chapter under ``chapters/``, ``glossary.html``, the notebooks and their jupytext sources under
``notebooks/`` (the pages link them), and ``assets/`` (styles, the search index, the widget
renderer). Only chapters/*.ipynb, chapters/src/*.py and the course's metadata are read;
``solutions/`` is never read or copied. Prints the path of ``index.html`` as its last line.
"""
from __future__ import annotations

import argparse
import glob
import html
import json
import os
import re
import shutil
import sys
import time

from disttutor.course.site import notebook, vendor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # the repository


def _jinja():
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader(notebook.TEMPLATES), autoescape=False)


def _esc(s) -> str:
    return html.escape(str(s), quote=True)


def readme_rows() -> dict[int, str]:
    """README's chapter table, column "what you do", as HTML (backticks become code)."""
    rows = {}
    try:
        text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    except OSError:
        return rows
    for m in re.finditer(r"^\| (\d+) \| `[^`]+\.ipynb` \| [^|]* \| (.+) \|$", text, re.M):
        rows[int(m.group(1))] = re.sub(r"`([^`]+)`", r"<code>\1</code>", _esc(m.group(2)).replace("&#x27;", "'"))
    return rows


def topbar(root: str) -> str:
    return (f'<header class="dt-top"><a class="dt-brand" href="{root}index.html">disttutor</a>'
            f'<a href="{root}index.html#chapters">chapters</a><a href="{root}glossary.html">glossary</a>'
            '<span class="dt-search"><input type="search" id="dt-q" placeholder="search the course" '
            'aria-label="search the course" autocomplete="off"><span id="dt-results" hidden></span></span></header>')


def sidebar(chapters, root: str, current: int | None) -> str:
    here = ' class="dt-here"'
    items = "".join(
        f'<li{here if c.number == current else ""}><a href="{root}chapters/{c.stem}.html">'
        f'<span class="dt-num">{c.number}</span> {_esc(c.title)}</a></li>' for c in chapters)
    return f'<p class="dt-side-h">Chapters</p><ol class="dt-chapters">{items}</ol>'


def prevnext(chapters, i: int) -> str:
    prev = chapters[i - 1] if i > 0 else None
    nxt = chapters[i + 1] if i + 1 < len(chapters) else None
    left = (f'<a class="dt-prev" href="{prev.stem}.html">← {prev.number}. {_esc(prev.title)}</a>' if prev
            else '<a class="dt-prev" href="../index.html">← course home</a>')
    right = (f'<a class="dt-next" href="{nxt.stem}.html">{nxt.number}. {_esc(nxt.title)} →</a>' if nxt
             else '<a class="dt-next" href="../glossary.html">glossary →</a>')
    return f'<nav class="dt-prevnext">{left}{right}</nav>'


def toc(headings: list[dict]) -> str:
    rows = [h for h in headings if h["in_markdown"] and h["level"] in (1, 2, 3)]
    items = "".join(f'<li class="dt-l{h["level"]}"><a href="#{_esc(h["id"])}">{_esc(h["title"])}</a></li>'
                    for h in rows)
    return f'<p class="dt-side-h">On this page</p><ul class="dt-toc">{items}</ul>' if items else ""


def build_chapter(c, i, chapters, out, ex) -> tuple[list[dict], int]:
    import nbformat

    nb = nbformat.read(os.path.join(ROOT, "chapters", f"{c.stem}.ipynb"), as_version=4)
    web = notebook.for_the_web(nb)
    py = os.path.join(ROOT, "chapters", "src", f"{c.stem}.py")
    dt = {"root": "../", "number": c.number, "title": c.title, "zh": c.zh, "sections": c.sections,
          "stem": c.stem, "ipynb": f"notebooks/{c.stem}.ipynb",
          "py": f"notebooks/src/{c.stem}.py" if os.path.exists(py) else None,
          "widgets": bool(notebook.widget_views(nb)), "topbar": topbar("../"),
          "sidebar": sidebar(chapters, "../", c.number), "prevnext": prevnext(chapters, i)}
    body, _ = ex.from_notebook_node(web, resources={"dt": dt, "metadata": {"name": f"{c.number}. {c.title}"}})
    o = notebook.outline(body)
    body = body.replace("<!--DT-TOC-->", toc(o.headings), 1)
    with open(os.path.join(out, "chapters", f"{c.stem}.html"), "w", encoding="utf-8") as f:
        f.write(body)
    shutil.copy(os.path.join(ROOT, "chapters", f"{c.stem}.ipynb"), os.path.join(out, "notebooks"))
    if dt["py"]:
        shutil.copy(py, os.path.join(out, "notebooks", "src"))
    url = f"chapters/{c.stem}.html"
    docs = [{"t": f"{c.number}. {c.title}" + (f" — {s['title']}" if s["title"] else ""),
             "u": url + (f"#{s['id']}" if s["id"] else ""), "x": s["text"][:4000]}
            for s in o.sections if s["text"] or s["title"]]
    return docs, len(notebook.widget_views(nb))


def build_glossary(chapters, out, page) -> list[dict]:
    from disttutor.course import chapters as cards  # the one glossary file, read as the chapters read it

    parts, docs = ['<h1>Glossary · 术语表</h1><p>Every term of the course in Chinese and English, in the '
                   'chapter that introduces it (<code>disttutor/course/glossary.yaml</code>; each chapter ends with '
                   'its part of this table). The Chinese follows the article\'s usage where it uses the term; '
                   'the note says where it does not.</p>'], []
    for c in chapters:
        rows = cards.terms(c.number)
        if not rows:
            continue
        parts.append(f'<h2 id="chapter-{c.number}"><a href="chapters/{c.stem}.html">Chapter {c.number} — '
                     f'{_esc(c.title)}</a></h2><table class="dt-table"><thead><tr><th>中文</th><th>English</th>'
                     '<th>note</th></tr></thead><tbody>')
        for e in rows:
            parts.append(f'<tr><td lang="zh">{_esc(e["zh"])}</td><td>{_esc(e["en"])}</td>'
                         f'<td>{_esc(e.get("note", ""))}</td></tr>')
            docs.append({"t": f"glossary: {e['zh']} — {e['en']}", "u": f"glossary.html#chapter-{c.number}",
                         "x": f"{e['zh']} {e['en']} {e.get('note', '')} chapter {c.number}"})
        parts.append("</tbody></table>")
    for n in {c.number for c in chapters} - {e["chapter"] for c in chapters for e in cards.terms(c.number)}:
        parts.append(f'<p id="chapter-{n}" class="dt-note">Chapter {n} introduces no new glossary terms.</p>')
    with open(os.path.join(out, "glossary.html"), "w", encoding="utf-8") as f:
        f.write(page(title="Glossary — disttutor", body="".join(parts)))
    return docs


def build_index(chapters, out, page, env) -> None:
    times = {}
    try:
        times = json.load(open(os.path.join(ROOT, "chapters", "build_times.json")))
    except (OSError, ValueError):
        pass
    what = readme_rows()
    rows = [{"number": c.number, "title": _esc(c.title), "href": f"chapters/{c.stem}.html", "sections": c.sections,
             "zh": c.zh, "what": what.get(c.number, ""),
             "runs": f"{times[c.stem]['seconds']:.0f} s" if c.stem in times else "not measured"} for c in chapters]
    machines = sorted({f"{t['cores']} CPU cores, {t['gpus']} GPUs, torch {t['torch']}" for t in times.values()})
    body = env.get_template("index_body.html.j2").render(chapters=rows, machine="; ".join(machines) or "—")
    with open(os.path.join(out, "index.html"), "w", encoding="utf-8") as f:
        f.write(page(title="disttutor — PyTorch distributed training, hands-on", body=body))


def build(out: str, cache: str) -> str:
    from disttutor.course.chapters import CHAPTERS

    stems = {os.path.basename(p)[:-6] for p in glob.glob(os.path.join(ROOT, "chapters", "[0-9][0-9]_*.ipynb"))}
    chapters = [c for _, c in sorted(CHAPTERS.items()) if c.stem in stems]
    missing = stems - {c.stem for c in chapters}
    if missing:
        raise SystemExit(f"course.py site: no chapter card for {sorted(missing)} in disttutor/course/chapters.py")
    if os.path.isdir(out) and os.listdir(out):
        # Replaced whole (no stale page survives), but only a folder that holds a site already:
        # a mistyped --out must not delete a folder of the learner's.
        if not os.path.exists(os.path.join(out, "assets", "search-index.js")):
            raise SystemExit(f"course.py site: {out} is not empty and holds no site; pick another --out")
        shutil.rmtree(out)
    for d in ("chapters", "notebooks/src", "assets/lab"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    vendor.install(vendor.HTML_MANAGER, cache, os.path.join(out, "assets", "vendor", "html-manager"))
    vendor.install(vendor.MATHJAX, cache, os.path.join(out, "assets", "vendor", "mathjax"))
    ex = notebook.exporter()
    # The lab template's CSS, once for every page (nbconvert would inline 250 kB into each).
    lab_static = next(os.path.join(p, "static") for p in ex.template_paths
                      if os.path.exists(os.path.join(p, "static", "index.css")))
    for css in ("index.css", "theme-light.css"):
        shutil.copy(os.path.join(lab_static, css), os.path.join(out, "assets", "lab"))
    for asset in ("site.css", "site.js"):
        shutil.copy(os.path.join(HERE, "assets", asset), os.path.join(out, "assets"))
    env = _jinja()

    def page(title, body, root=""):
        return env.get_template("page.html.j2").render(title=_esc(title), body=body, root=root,
                                                       topbar=topbar(root), sidebar=sidebar(chapters, root, None))
    docs = []
    for i, c in enumerate(chapters):
        d, _ = build_chapter(c, i, chapters, out, ex)
        docs += d
    docs += build_glossary(chapters, out, page)
    build_index(chapters, out, page, env)
    with open(os.path.join(out, "assets", "search-index.js"), "w", encoding="utf-8") as f:
        # A script, not a JSON file to fetch: fetch() is refused on file:// pages, a script is not.
        f.write("window.DT_SEARCH = " + json.dumps(docs, ensure_ascii=False, separators=(",", ":")) + ";\n")
    return os.path.join(out, "index.html")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "site"), help="the site's folder (default: site/)")
    p.add_argument("--cache", default=os.path.join(ROOT, ".site-cache"),
                   help="where the widget renderer's npm tarball is kept (default: .site-cache/)")
    a = p.parse_args(argv)
    t0 = time.monotonic()
    try:
        index = build(os.path.abspath(a.out), os.path.abspath(a.cache))
    except vendor.VendorError as e:
        print(f"course.py site: {e}", file=sys.stderr)
        return 1
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(a.out) for f in fs)
    print(f"site built in {time.monotonic() - t0:.1f} s: {size / 2**20:.1f} MiB in {os.path.relpath(a.out)}")
    print(index)
    return 0
