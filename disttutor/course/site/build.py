"""Build the course's static website from the committed notebooks (nothing is executed).

    python -m disttutor.course.site [--out DIR] [--zh DIR]   # what `python3 course.py site` runs

Writes DIR (default ``site/`` in the repository): ``index.html`` (the landing page), one page per
chapter under ``chapters/``, ``glossary.html``, the notebooks and their jupytext sources under
``notebooks/`` (the pages link them), and ``assets/`` (styles, the search index, the widget
renderer, Pyodide and the course's modules for the live widgets: ``live.py``). The Chinese
edition is the same tree under ``zh/`` (``zh/index.html``, ``zh/chapters/``, ``zh/glossary.html``,
``zh/notebooks/`` with the translation files), for every
chapter whose ``chapters/zh/NN_topic.ipynb`` exists (``--zh DIR`` reads them from elsewhere);
each page's top bar links its counterpart in the other edition where there is one (``edition.py``
holds what differs, ``frame.py`` the links). Only chapters/*.ipynb, chapters/src/*.py,
chapters/zh/ and the course's metadata are read; ``solutions/`` is never read or copied. Prints
the path of ``index.html`` as its last line.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import re
import shutil
import sys
import time

from disttutor.course.site import live, notebook, vendor
from disttutor.course.site.edition import EN, ZH, Edition
from disttutor.course.site.frame import Frame, esc as _esc, pages_of

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # the repository


def _jinja():
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader(notebook.TEMPLATES), autoescape=False)


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


def build_chapter(fr: Frame, c, i, out, ex) -> tuple[list[dict], int]:
    import nbformat

    ed, L, rel = fr.ed, fr.ed.labels, f"chapters/{c.stem}.html"
    nb = nbformat.read(ed.notebook(c.stem), as_version=4)
    made = []

    def live_panel(source, state, model_id):
        sp = live.spec(source, state, model_id)
        if sp is None:
            return None
        live.strip_controls(state, model_id)
        made.append(sp["name"])
        return live.panel(sp, L)
    web = notebook.for_the_web(nb, link=lambda stem: fr.chapter_href(rel, stem), kernel_note=L.needs_kernel,
                               live=live_panel)
    src, title = ed.source(c.stem), fr.titles[c.number]
    dt = {"root": fr.root(rel), "home": fr.home(rel), "labels": L, "number": c.number, "title": title,
          "kicker": L.kicker.format(n=c.number) + (L.article.format(s=c.sections) if c.sections != "—" else ""),
          "zh": c.zh, "stem": c.stem, "ipynb": f"notebooks/{c.stem}.ipynb",
          "src": f"notebooks/src/{os.path.basename(src)}" if os.path.exists(src) else None,
          "widgets": bool(notebook.widget_views(nb)), "live": bool(made), "topbar": fr.topbar(rel),
          "sidebar": fr.sidebar(rel, c.number), "prevnext": fr.prevnext(i)}
    meta = {"name": L.page_title.format(n=c.number, title=title)}
    body, _ = ex.from_notebook_node(web, resources={"dt": dt, "metadata": meta})
    o = notebook.outline(body)
    body = body.replace("<!--DT-TOC-->", fr.toc(o.headings), 1)
    here = os.path.join(out, ed.prefix)
    with open(os.path.join(here, rel), "w", encoding="utf-8") as f:
        f.write(body)
    shutil.copy(ed.notebook(c.stem), os.path.join(here, "notebooks"))  # byte for byte: outputs as verified
    if dt["src"]:
        shutil.copy(src, os.path.join(here, "notebooks", "src"))
    docs = [{"t": f"{c.number}. {title}" + (f" — {s['title']}" if s["title"] else ""), "l": ed.lang,
             "u": ed.prefix + rel + (f"#{s['id']}" if s["id"] else ""), "x": s["text"][:4000]}
            for s in o.sections if s["text"] or s["title"]]
    return docs, len(notebook.widget_views(nb)), [f"{ed.prefix}{c.number}:{n}" for n in made]


def build_glossary(fr: Frame, out, page) -> list[dict]:
    from disttutor.course import chapters as cards  # the one glossary file, read as the chapters read it

    L, chapters = fr.ed.labels, fr.chapters
    parts, docs = [f"<h1>{L.glossary_title}</h1><p>{L.glossary_intro}</p>"], []
    head = "".join(f"<th>{h}</th>" for h in L.glossary_cols)
    for c in chapters:
        rows = cards.terms(c.number)
        if not rows:
            continue
        parts.append(f'<h2 id="chapter-{c.number}"><a href="chapters/{c.stem}.html">'
                     f'{L.glossary_chapter.format(n=c.number, title=_esc(fr.titles[c.number]))}</a></h2>'
                     f'<table class="dt-table"><thead><tr>{head}</tr></thead><tbody>')
        for e in rows:
            parts.append(f'<tr><td lang="zh">{_esc(e["zh"])}</td><td lang="en">{_esc(e["en"])}</td>'
                         f'<td>{_esc(e.get("note", ""))}</td></tr>')
            docs.append({"t": L.glossary_hit.format(zh=e["zh"], en=e["en"]), "l": fr.ed.lang,
                         "u": f"{fr.ed.prefix}glossary.html#chapter-{c.number}",
                         "x": f"{e['zh']} {e['en']} {e.get('note', '')} chapter {c.number}"})
        parts.append("</tbody></table>")
    for n in sorted({c.number for c in chapters} - {e["chapter"] for c in chapters for e in cards.terms(c.number)}):
        parts.append(f'<p id="chapter-{n}" class="dt-note">{L.glossary_none.format(n=n)}</p>')
    with open(os.path.join(out, fr.ed.prefix, "glossary.html"), "w", encoding="utf-8") as f:
        f.write(page(fr, "glossary.html", f"{L.glossary_title} — disttutor", "".join(parts)))
    return docs


def build_index(fr: Frame, out, page, env, all_chapters) -> None:
    times = {}
    try:
        times = json.load(open(os.path.join(ROOT, "chapters", "build_times.json")))
    except (OSError, ValueError):
        pass
    # The zh notebook is the English one's run (same code, same outputs): its time is the English one's.
    L, what = fr.ed.labels, readme_rows()
    rows = [{"number": c.number, "title": _esc(fr.titles[c.number]), "href": f"chapters/{c.stem}.html",
             "sections": c.sections, "zh": c.zh, "what": what.get(c.number, ""),
             "runs": L.runs.format(s=times[c.stem]["seconds"]) if c.stem in times else L.not_measured}
            for c in fr.chapters]
    machines = sorted({L.machine.format(**t) for t in times.values()})
    untranslated = [c.number for c in all_chapters if c not in fr.chapters]
    other = (fr.other.prefix + "index.html" if fr.other is not None and fr.other.prefix else None)
    body = env.get_template(fr.ed.index_template).render(chapters=rows, machine="; ".join(machines) or "—",
                                                         untranslated=untranslated, total=len(all_chapters),
                                                         zh_index=other)
    with open(os.path.join(out, fr.ed.prefix, "index.html"), "w", encoding="utf-8") as f:
        f.write(page(fr, "index.html", L.site, body))


def editions(zh: str | None = None) -> list[tuple[Edition, list]]:
    """Each edition that has chapters, with its chapter cards in order (the English one always)."""
    from disttutor.course.chapters import CHAPTERS

    out = []
    for ed in (EN, ZH if zh is None else dataclasses.replace(ZH, notebooks=os.path.abspath(zh))):
        stems = {os.path.basename(p)[:-6] for p in glob.glob(os.path.join(ed.notebooks, "[0-9][0-9]_*.ipynb"))}
        chapters = [c for _, c in sorted(CHAPTERS.items()) if c.stem in stems]
        missing = stems - {c.stem for c in chapters}
        if missing:
            raise SystemExit(f"course.py site: no chapter card for {sorted(missing)} in disttutor/course/chapters.py")
        if chapters or ed is EN:
            out.append((ed, chapters))
    return out


def build(out: str, cache: str, zh: str | None = None) -> str:
    eds = editions(zh)
    frames = []
    for ed, cs in eds:  # each edition's frame knows the other's pages: its language switch links them
        other = next(((o, pages_of(ocs)) for o, ocs in eds if o is not ed), (None, frozenset()))
        frames.append(Frame(ed, tuple(cs), *other))
    if os.path.isdir(out) and os.listdir(out):
        # Replaced whole (no stale page survives), but only a folder that holds a site already:
        # a mistyped --out must not delete a folder of the learner's.
        if not os.path.exists(os.path.join(out, "assets", "search-index.js")):
            raise SystemExit(f"course.py site: {out} is not empty and holds no site; pick another --out")
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "assets", "lab"))
    for fr in frames:
        for d in ("chapters", "notebooks/src"):
            os.makedirs(os.path.join(out, fr.ed.prefix, d), exist_ok=True)
    vendor.install(vendor.HTML_MANAGER, cache, os.path.join(out, "assets", "vendor", "html-manager"))
    vendor.install(vendor.MATHJAX, cache, os.path.join(out, "assets", "vendor", "mathjax"))
    vendor.install(vendor.PYODIDE, cache, os.path.join(out, "assets", "vendor", "pyodide"))
    live.package(out)
    exporters = {fr.ed.lang: notebook.exporter(fr.ed.lang) for fr in frames}
    # The lab template's CSS, once for every page of both editions (nbconvert would inline 250 kB into each).
    lab_static = next(os.path.join(p, "static") for p in exporters["en"].template_paths
                      if os.path.exists(os.path.join(p, "static", "index.css")))
    for css in ("index.css", "theme-light.css"):
        shutil.copy(os.path.join(lab_static, css), os.path.join(out, "assets", "lab"))
    for asset in ("site.css", "site.js", "live.js"):
        shutil.copy(os.path.join(HERE, "assets", asset), os.path.join(out, "assets"))
    env = _jinja()

    def page(fr, rel, title, body):
        return env.get_template("page.html.j2").render(title=_esc(title), body=body, root=fr.root(rel),
                                                       lang=fr.ed.lang, topbar=fr.topbar(rel), sidebar=fr.sidebar(rel),
                                                       nav=fr.ed.labels.side_chapters)
    docs, made = [], []
    for fr in frames:
        for i, c in enumerate(fr.chapters):
            d, _, m = build_chapter(fr, c, i, out, exporters[fr.ed.lang])
            docs, made = docs + d, made + m
        docs += build_glossary(fr, out, page)
        build_index(fr, out, page, env, frames[0].chapters)
    with open(os.path.join(out, "assets", "search-index.js"), "w", encoding="utf-8") as f:
        # A script, not a JSON file to fetch: fetch() is refused on file:// pages, a script is not.
        f.write("window.DT_SEARCH = " + json.dumps(docs, ensure_ascii=False, separators=(",", ":")) + ";\n")
    print(f"live widgets (edition chapter:widget): {' '.join(made) or 'none'}")
    return os.path.join(out, "index.html")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "site"), help="the site's folder (default: site/)")
    p.add_argument("--zh", default=None, help="the Chinese edition's notebooks (default: chapters/zh/)")
    p.add_argument("--cache", default=os.path.join(ROOT, ".site-cache"),
                   help="where the npm tarballs (widget renderer, MathJax, Pyodide) are kept (default: .site-cache/)")
    a = p.parse_args(argv)
    t0 = time.monotonic()
    try:
        index = build(os.path.abspath(a.out), os.path.abspath(a.cache), a.zh)
    except vendor.VendorError as e:
        print(f"course.py site: {e}", file=sys.stderr)
        return 1
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(a.out) for f in fs)
    print(f"site built in {time.monotonic() - t0:.1f} s: {size / 2**20:.1f} MiB in {os.path.relpath(a.out)}")
    print(index)
    return 0
