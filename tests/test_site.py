"""The course's static website (``python3 course.py site``), built for real and read in a real browser.

The site is built once (``python -m disttutor.course.site``, what ``course.py site`` runs once the
environment is installed) into a temporary folder. Without a browser: every chapter has its page
and its notebook copy, the last line printed is index.html's path, nothing from ``solutions/`` is
on the site, and no page gives away the build machine. With Chromium and playwright (the same
set-up as tests/test_browser.py: Debian's chromium, not playwright's download), every page is
served from 127.0.0.1 with every other address refused, so the site must read offline: each page
loads with no JavaScript error and no failed request, every widget of the notebook renders from
its saved state (counted against the notebook's widget outputs), every image loads, every
internal link (and its #fragment) resolves, and no page shows a widget repr or a machine path.

The Chinese edition (``zh/``) is checked the same way, for every chapter whose
``chapters/zh/NN_topic.ipynb`` exists (``DISTTUTOR_SITE_ZH=DIR`` reads them from DIR instead, to
try the site before the translations are in): its pages, its notebooks byte for byte, its widgets
counted against the zh notebook, its frame in Chinese, ``lang="zh"``; and every page's language
switch leads to its counterpart in the other edition, and is there exactly when that exists.
The live widgets (chapters 1, 2, 7, 13: their controls run the course's Python in the page, with
Pyodide) are checked without a browser (their panels on both editions' pages, the site's copy of the
modules answering with numpy, matplotlib and torch unimportable, the builder's rule for making one
live) and in Chromium, one page each: every move redraws the numbers the notebook's widget functions
give for the same inputs, and the first answer's time is measured (asserted on a quiet machine).
Wall time (2 loaded cores, both editions of 14 chapters): ~20-40 s to build, ~40-80 s for the browser,
~25-45 s more for the live widgets (Python starts once per page). At load average 10-20 (other jobs
on the same 2 cores) all of it runs 4-8 times as long.
"""
from __future__ import annotations

import functools
import glob
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import browser_check  # noqa: E402  (find_chromium, BAD: a widget repr or the manager's error)
from test_notebook_outputs import MACHINE_PATH  # noqa: E402  (what gives a build machine away)

NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "chapters", "[0-9][0-9]_*.ipynb")))
STEMS = [os.path.basename(p)[:-6] for p in NOTEBOOKS]
ZH_DIR = os.environ.get("DISTTUTOR_SITE_ZH") or os.path.join(ROOT, "chapters", "zh")
ZH_NOTEBOOKS = sorted(glob.glob(os.path.join(ZH_DIR, "[0-9][0-9]_*.ipynb")))
ZH_STEMS = [os.path.basename(p)[:-6] for p in ZH_NOTEBOOKS]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from disttutor.course.site import vendor

    cache = os.path.join(ROOT, ".site-cache")
    have = all(os.path.exists(os.path.join(cache, p.tarball))
               for p in (vendor.HTML_MANAGER, vendor.MATHJAX, vendor.PYODIDE))
    if not have and shutil.which("npm") is None:  # the renderers come from npm, once
        if os.environ.get("DISTTUTOR_REQUIRE_BROWSER"):
            pytest.fail("the site build needs npm once (apt-get install npm); .ci/run installs it")
        pytest.skip("the site build needs npm once (apt-get install npm)")
    out = str(tmp_path_factory.mktemp("site") / "site")
    t0 = time.monotonic()
    zh = ["--zh", ZH_DIR] if os.environ.get("DISTTUTOR_SITE_ZH") else []  # else the builder's default
    r = subprocess.run([sys.executable, "-m", "disttutor.course.site", "--out", out, *zh],
                       capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                           p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    print(f"build: {time.monotonic() - t0:.1f} s; {r.stdout.strip().splitlines()[-2]}")
    return out, r.stdout


def _edition(stems):
    return ["index.html", "glossary.html"] + [f"chapters/{s}.html" for s in stems]


def _pages(out):
    """Every page, relative to the site's root: the English edition, then the Chinese one (if any)."""
    return _edition(STEMS) + ["zh/" + p for p in _edition(ZH_STEMS) if ZH_STEMS]


def _read(out, rel):
    return open(os.path.join(out, rel), encoding="utf-8").read()


def test_every_chapter_has_a_page_and_its_notebook(site):
    out, stdout = site
    assert stdout.strip().splitlines()[-1] == os.path.join(out, "index.html")
    editions = (("", os.path.join(ROOT, "chapters"), STEMS, ".py"), ("zh/", ZH_DIR, ZH_STEMS, ".md"))
    for prefix, folder, stems, src in editions:
        for s in stems:
            assert os.path.isfile(os.path.join(out, prefix, "chapters", f"{s}.html")), prefix + s
            # The copy the page links is the committed notebook, byte for byte (outputs as verified),
            # and its source: the jupytext file, or for the Chinese edition the translation file.
            for copy, orig in ((f"{s}.ipynb", f"{s}.ipynb"), (f"src/{s}{src}", f"src/{s}{src}")):
                assert open(os.path.join(out, prefix, "notebooks", copy), "rb").read() == \
                    open(os.path.join(folder, orig), "rb").read(), prefix + copy
                assert f'href="../notebooks/{copy}"' in _read(out, f"{prefix}chapters/{s}.html"), prefix + copy
    if not ZH_STEMS:
        assert not os.path.exists(os.path.join(out, "zh")), "a Chinese edition without chapters"


def test_a_proof_cells_code_sits_behind_a_toggle_and_its_line_stays_in_view(site):
    """As in JupyterLab (jupyter.source_hidden): a proof cell's input is folded under a summary, its output shown."""
    out, _ = site
    for prefix, label in (("", "the check behind the line below"), ("zh/", "下面这行结论背后的检查")):
        page = _read(out, f"{prefix}chapters/04_ddp.html")
        folded = re.findall(r'<details class="dt-hidden-input"><summary>([^<]*)</summary>', page)
        # each edition's own notebook: the zh one prints the catalogue's Chinese for a catalogued line
        nb = json.load(open(os.path.join(ZH_DIR if prefix else os.path.join(ROOT, "chapters"), "04_ddp.ipynb")))
        proofs = [c for c in nb["cells"] if "proof" in c["metadata"].get("tags", [])]
        assert proofs and sum(label in f for f in folded) == len(proofs), (prefix, len(proofs), folded[:3])
        # the line a proof cell prints is outside the fold
        line = "".join(proofs[0]["outputs"][0]["text"]).strip().splitlines()[0]
        tail = page.split(label, 1)[1]
        assert html.escape(line[:30], quote=False) in tail.split("</details>", 1)[1][:20000], line


SWITCH = re.compile(r'<a\b[^>]*\bclass="dt-lang"[^>]*>')
CHAPTER_HREF = re.compile(r'href="([^"#]*?(\d\d_\w+)\.html)(?:#[^"]*)?"')


def test_each_page_switches_to_its_counterpart_in_the_other_language(site):
    out, _ = site
    pages = set(_pages(out))
    for rel in sorted(pages):
        zh = rel.startswith("zh/")
        text = _read(out, rel)
        lang = "zh" if zh else "en"
        assert f'<html lang="{lang}">' in text, f"{rel}: not <html lang={lang}>"
        other = rel[3:] if zh else "zh/" + rel
        links = SWITCH.findall(text)
        if other not in pages:  # a chapter not translated yet: no switch, rather than a dead link
            assert not links, f"{rel} switches to {links} but {other} does not exist"
            continue
        assert len(links) == 1, f"{rel}: {len(links)} language switches, want 1 (to {other})"
        href, to = (re.search(r'\b%s="([^"]*)"' % k, links[0]).group(1) for k in ("href", "hreflang"))
        target = os.path.normpath(os.path.join(os.path.dirname(rel), href))
        assert (target, to) == (other, "en" if zh else "zh"), f"{rel}: the switch leads to {target} ({to}), not {other}"


def test_the_search_index_holds_every_chapter_of_both_editions(site):
    out, _ = site
    js = _read(out, "assets/search-index.js")
    docs = json.loads(js[js.index("=") + 1:].strip().rstrip(";"))
    by_page = {}
    for d in docs:
        page = d["u"].split("#")[0]
        assert os.path.isfile(os.path.join(out, page)), f"search hit {d['u']} leads nowhere"
        assert d["l"] == ("zh" if page.startswith("zh/") else "en"), d["u"]  # site.js searches the page's own
        by_page[page] = by_page.get(page, 0) + 1
    for rel in _pages(out):
        if "chapters/" in rel:
            assert by_page.get(rel, 0) > 3, f"{rel}: {by_page.get(rel, 0)} sections in the search index"


def test_the_chinese_pages_frame_is_chinese_and_their_links_stay_in_chinese(site):
    """Frame words from the editions' labels; links between chapters (sidebar, prev/next, the markdown's
    own ``](04_ddp.ipynb)``) lead to the zh page where there is one, else to the English page."""
    from disttutor.course.site.edition import EN, ZH

    if not ZH_STEMS:
        pytest.skip(f"no Chinese chapter in {os.path.relpath(ZH_DIR, ROOT)} yet")
    out, _ = site
    frame = ("search", "side_chapters", "on_this_page", "source_file", "chapter_glossary", "as_committed")
    for s, nb_path in zip(ZH_STEMS, ZH_NOTEBOOKS):
        rel = f"zh/chapters/{s}.html"
        text = _read(out, rel)
        for f in frame:
            assert getattr(ZH.labels, f) in text, f"{rel}: no {f} label {getattr(ZH.labels, f)!r}"
            assert getattr(EN.labels, f) not in text, f"{rel}: English {f} label {getattr(EN.labels, f)!r}"
        nb = json.load(open(nb_path, encoding="utf-8"))
        ids = [c["metadata"].get("nbgrader", {}).get("grade_id", "") for c in nb["cells"]]
        for gid in (g for g in ids if g.startswith("exercise-")):
            banner = ZH.labels.exercise.format(id=gid[9:])
            assert f'<div class="dt-exercise" id="{gid}">{banner}</div>' in text, f"{rel}: {gid}'s banner"
        for note in re.findall(r'<p class="dt-needs-kernel">(.*?)</p>', text):
            assert note == ZH.labels.needs_kernel, f"{rel}: widget note {note[:40]!r}"
        n = 0
        for href, stem in CHAPTER_HREF.findall(SWITCH.sub("", text)):  # the switch leads to English, rightly
            target = os.path.normpath(os.path.join(os.path.dirname(rel), href))
            want = f"zh/chapters/{stem}.html" if stem in ZH_STEMS else f"chapters/{stem}.html"
            assert target == want, f"{rel} links chapter {stem} as {href} ({target}), not {want}"
            n += 1
        assert n >= len(ZH_STEMS), f"{rel}: only {n} chapter links (the sidebar alone has {len(ZH_STEMS)})"


def test_no_solution_and_no_machine_path_on_the_site(site):
    out, _ = site
    files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs]
    sol = sorted(glob.glob(os.path.join(ROOT, "solutions", "*.py")))
    assert sol, "no solutions/ to compare with"
    assert not {os.path.basename(p) for p in sol} & {os.path.basename(f) for f in files}
    # Lines a solution has and no notebook has: the worked answer, which must not be published. A notebook
    # "has" a line in its cells' source or in the committed outputs the course itself publishes (a plain
    # script shown with show_code shares generic lines such as `import torch.distributed.checkpoint as dcp`
    # with a solution, and is not a solution).
    def published(cell):
        outs = cell.get("outputs", [])
        return "".join(cell["source"]) + "".join(
            "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/markdown", "")) for o in outs)
    shown = "".join(published(c) for p in NOTEBOOKS for c in json.load(open(p, encoding="utf-8"))["cells"])
    secret = {ln.strip() for p in sol for ln in open(p, encoding="utf-8")
              if len(ln.strip()) > 40 and not ln.strip().startswith("#") and ln.strip() not in shown}
    assert secret, "no solution-only lines found: the check would be empty"
    # A translation file (zh/notebooks/src/*.md) holds the exercises' hints, in Chinese around their code,
    # which `hint("N.M")` shows every learner; a solution line a hint quotes is no leak there, and only there.
    from disttutor.checks.registry import EXERCISES
    hinted = {s for s in secret if any(s in h for e in EXERCISES for h in e.hints)}
    for f in files:
        if f.endswith((".html", ".js", ".ipynb", ".py", ".md")) and "/vendor/" not in f:
            text = open(f, encoding="utf-8").read()
            leaked = [s for s in (secret - hinted if f.endswith(".md") else secret) if s in text]
            assert not leaked, f"{os.path.relpath(f, out)} shows a solution line: {leaked[0]!r}"
            if f.endswith(".html"):
                # Embedded images' base64 left out: random letters can spell "/home/x" there.
                m = MACHINE_PATH.search(re.sub(r"data:[\w/+.-]+;base64,[\w/+=]+", "", text))
                assert out not in text, f"{os.path.relpath(f, out)} names the folder it was built in"
                assert not m, f"{os.path.relpath(f, out)} shows a machine path: {text[max(0, m.start() - 60):m.end() + 20]!r}"


def test_course_py_site_installs_the_site_extra_then_runs_this_builder(monkeypatch):
    from test_course import load_course

    course = load_course()
    calls = []
    monkeypatch.setattr(course, "EXTRAS", "dev")
    monkeypatch.setattr(course, "ensure_env", lambda force=None: calls.append(("env", course.EXTRAS)))
    monkeypatch.setattr(course, "run_forwarding", lambda cmd, **kw: calls.append(("run", cmd[1:])) or 0)
    assert course.site(["--out", "x"]) == 0
    assert calls == [("env", "dev,site"), ("run", ["-m", "disttutor.course.site", "--out", "x"])]
    toml = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    assert re.search(r"^site = \[", toml, re.M), "pyproject.toml has no [site] extra"


def test_the_publishing_workflow_runs_the_tested_command():
    wf = open(os.path.join(ROOT, ".github", "workflows", "pages.yml"), encoding="utf-8").read()
    runs = re.findall(r"^\s*run: (.+)$", wf, re.M)
    assert "python3 course.py site" in runs, runs  # the command these tests build the site with
    assert re.search(r"path: site/?$", wf, re.M), "the workflow must publish site/"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


PAGE_CHECK = """bad => {
    const re = new RegExp(bad);
    const views = [...document.querySelectorAll('div.jupyter-widgets.jp-OutputArea-output')];
    // Drawn: the manager put the view's node (class jupyter-widgets) into the output's subarea.
    const rendered = views.filter(v => v.querySelector(':scope > .widget-subarea > .jupyter-widgets'));
    const imgs = [...document.images];
    const broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80));
    const text = document.body.innerText;
    const wrong = (text.match(re) || []).slice(0, 1);
    const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
    const ids = [...document.querySelectorAll('[id], a[name]')].map(e => e.id || e.getAttribute('name'));
    return {views: views.length, rendered: rendered.length, images: imgs.length, broken, wrong, links, ids, text};
}"""


@pytest.mark.timeout(400)
def test_every_page_in_a_real_browser(site):
    missing = browser_check.missing_browser_parts()
    if missing:
        if os.environ.get("DISTTUTOR_REQUIRE_BROWSER"):
            pytest.fail("browser check required (DISTTUTOR_REQUIRE_BROWSER) but missing: " + ", ".join(missing))
        pytest.skip("site browser check needs " + " and ".join(missing))
    chromium = browser_check.find_chromium(None)
    from playwright.sync_api import sync_playwright
    out, _ = site
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=out))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    want = {f"chapters/{os.path.basename(p)[:-6]}.html": browser_check.widget_outputs(p) for p in NOTEBOOKS}
    want.update({f"zh/chapters/{os.path.basename(p)[:-6]}.html": browser_check.widget_outputs(p) for p in ZH_NOTEBOOKS})
    t0, problems, rows, seen_ids, links = time.monotonic(), [], [], {}, {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True,
                                         args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            for rel in _pages(out):
                page = browser.new_page(viewport={"width": 1300, "height": 900})
                errors, refused = [], []
                page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
                page.on("console", lambda m: m.type == "error" and errors.append(f"console: {m.text[:200]}"))
                page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url[:120]}"))

                def route(r, refused=refused):  # offline: only the site's own server answers
                    if r.request.url.startswith(base):
                        return r.continue_()
                    refused.append(r.request.url[:120])
                    return r.abort()
                page.route("**/*", route)
                page.goto(base + rel, wait_until="load", timeout=60_000)
                n = want.get(rel, 0)
                deadline = time.monotonic() + 30
                while True:  # the manager renders after load; MathJax typesets after that
                    info = page.evaluate(PAGE_CHECK, browser_check.BAD.pattern)
                    if (info["rendered"] >= n) or time.monotonic() > deadline:
                        break
                    time.sleep(0.3)
                page.wait_for_timeout(300)  # late errors (a typesetting call after rendering)
                info = page.evaluate(PAGE_CHECK, browser_check.BAD.pattern)
                seen_ids[rel] = set(info["ids"])
                for href in info["links"]:
                    if href.startswith(base):
                        links.setdefault(href, rel)
                if rel in want and (info["views"] != n or info["rendered"] != n):
                    problems.append(f"{rel}: {info['rendered']} of {n} widgets rendered ({info['views']} on the page)")
                if info["broken"]:
                    problems.append(f"{rel}: {len(info['broken'])} image(s) not loaded: {info['broken'][0]}")
                if info["wrong"]:
                    problems.append(f"{rel}: shows a widget repr/error: {info['wrong'][0][:80]!r}")
                m = MACHINE_PATH.search(info["text"])
                if m:
                    problems.append(f"{rel}: shows a machine path {m.group(0)!r}")
                problems += [f"{rel}: {e}" for e in errors[:3]] + [f"{rel}: needs the network: {u}" for u in refused[:3]]
                rows.append([rel, info["rendered"], n, info["images"], len(info["links"]), len(errors) + len(refused)])
                page.close()
            # Every internal link: the file is served, and its #fragment is an id on that page.
            checked = 0
            for href, where in sorted(links.items()):
                url = urllib.parse.urlsplit(href)
                path = urllib.parse.unquote(url.path).lstrip("/") or "index.html"
                if not os.path.isfile(os.path.join(out, path)):
                    problems.append(f"{where}: broken link {href[len(base):]}")
                elif url.fragment:
                    ids = seen_ids.get(path)
                    if ids is None:
                        ids = set(re.findall(r"""\bid=["']([^"']+)["']""", open(os.path.join(out, path), encoding="utf-8").read()))
                    # The browser tries the fragment as written, then percent-decoded (nbconvert's
                    # heading ids are percent-encoded already, the notebooks' own anchors are not).
                    if url.fragment not in ids and urllib.parse.unquote(url.fragment) not in ids:
                        problems.append(f"{where}: link to a missing anchor {href[len(base):]}")
                checked += 1
            # Search: a term from chapter 2 finds a section of chapter 2, and its link resolves.
            page = browser.new_page()
            page.goto(base + "index.html")
            page.fill("#dt-q", "all-reduce ring")
            first = page.locator("#dt-results a").first
            first.wait_for(timeout=10_000)
            hit = first.get_attribute("href")
            assert hit.startswith("chapters/") and os.path.isfile(os.path.join(out, hit.split("#")[0])), hit
            page.close()
            if ZH_STEMS:  # a zh page searches the zh edition first: a Chinese word finds a zh page
                page = browser.new_page()
                page.goto(base + "zh/index.html")
                page.fill("#dt-q", "分布式")
                first = page.locator("#dt-results a").first
                first.wait_for(timeout=10_000)
                hit = os.path.normpath(os.path.join("zh", first.get_attribute("href").split("#")[0]))
                assert hit.startswith("zh/chapters/") and os.path.isfile(os.path.join(out, hit)), hit
                page.close()
            browser.close()
    finally:
        server.shutdown()
    print(f"{'page':47} widgets  images  links  JS errors")
    for rel, ok, n, imgs, nl, ne in rows:
        print(f"{rel:47} {ok:>3}/{n:<3} {imgs:>7} {nl:>6} {ne:>10}")
    print(f"{len(rows)} pages, {checked} distinct internal links checked, {time.monotonic() - t0:.1f} s in the browser")
    assert not problems, "\n".join(problems[:20])
    assert sum(r[1] for r in rows) == sum(want.values()) > 0  # widgets exist and all were counted


# --- Live widgets (site/live.py, assets/live.js): the controls run the course's Python in the browser ---

LIVE = {"01_why_distributed": "memory", "02_process_groups_collectives": "costmodel", "07_pipeline_parallel": "pipeline",
        "13_at_scale": "planner"}
MEASURES = {"02_process_groups_collectives"}  # also holds a widget that runs ranks: it keeps "run the notebook"


def _live_panels(text):
    """The data-live of every live panel on a page (``{"name", "fixed"}``), in order."""
    from html.parser import HTMLParser

    class P(HTMLParser):
        found = []

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "div" and a.get("class") == "dt-live":
                self.found.append(json.loads(a["data-live"]))
    p = P()
    p.found = []
    p.feed(text)
    return p.found


def _saved_widget(stem, folder=None):
    """The notebook's live widget as saved: (cell source, widget state, model id)."""
    from disttutor.course.site import notebook

    nb = json.load(open(os.path.join(folder or os.path.join(ROOT, "chapters"), f"{stem}.ipynb"), encoding="utf-8"))
    state = notebook.widget_state(nb)
    for c in nb["cells"]:
        for o in c.get("outputs", []):
            if notebook.WIDGET_VIEW in o.get("data", {}):
                mid = o["data"][notebook.WIDGET_VIEW]["model_id"]
                if notebook.needs_kernel(state, mid):
                    return "".join(c["source"]), state, mid, nb
    raise AssertionError(f"{stem}: no widget with controls")


def test_live_widgets_are_on_their_pages_and_run_without_numpy_matplotlib_or_torch(site, tmp_path):
    """Chapters 1, 2, 7 and 13 (both editions, the same data, each in its language) carry a live panel
    instead of the "run the notebook" line; chapter 2's second widget measures on ranks and keeps that line.
    The course's modules on the site are the repository's, byte for byte, and answer with numpy,
    matplotlib, torch and ipywidgets unimportable (as in Pyodide, which has none of them). A few
    seconds (13-29 s at load average 13-17)."""
    import zipfile

    from disttutor.course.site.edition import EN, ZH

    out, stdout = site
    assert "live widgets (edition chapter:widget): 1:memory 2:costmodel 7:pipeline 13:planner" in stdout, stdout[-500:]
    for prefix, stems in (("", STEMS), ("zh/", ZH_STEMS)):
        for stem in stems:
            text = _read(out, f"{prefix}chapters/{stem}.html")
            names = [d["name"] for d in _live_panels(text)]
            assert names == ([LIVE[stem]] if stem in LIVE else []), f"{prefix}{stem}: live panels {names}"
            if stem in LIVE:
                assert "assets/live.js" in text and ("dt-needs-kernel" in text) == (stem in MEASURES), f"{prefix}{stem}"
                if prefix:  # the same widget as the English page's (same data), in the page's language
                    assert _live_panels(text) == _live_panels(_read(out, f"chapters/{stem}.html")), stem
                    assert ZH.labels.live_note in text and EN.labels.live_note not in text, stem
    assert "dt-needs-kernel" in _read(out, "chapters/02_process_groups_collectives.html")  # measures: not live
    for f in ("pyodide.js", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"):
        assert os.path.getsize(os.path.join(out, "assets", "vendor", "pyodide", f)) > 1000, f
    with zipfile.ZipFile(os.path.join(out, "assets", "live", "disttutor.zip")) as z:
        names = z.namelist()
        assert "disttutor/viz/web.py" in names and "disttutor/scale/planner.py" in names, names
        for n in names:
            assert z.read(n) == open(os.path.join(ROOT, n), "rb").read(), f"{n} differs from the repository's"
        z.extractall(tmp_path / "course")
    probe = (
        "import importlib.abc, sys\n"
        "class No(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in ('numpy', 'matplotlib', 'torch', 'ipywidgets', 'IPython'):\n"
        "            raise ImportError('not in the browser: ' + name)\n"
        "sys.meta_path.insert(0, No())\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "import json\n"
        "from disttutor.viz import web\n"
        "assert web.__file__.startswith(sys.argv[2]), web.__file__  # the site's copy, not the repository's\n"
        "args = json.loads(sys.argv[1])\n"
        "print(json.dumps({k: json.loads(web.run(k, json.dumps(a)))['kind'] for k, a in args.items()}))\n")
    from disttutor.course.site import live
    args = {}
    for stem, name in LIVE.items():
        src, state, mid, _ = _saved_widget(stem)
        sp = live.spec(src, state, mid)
        args[name] = {"labels": {c["key"]: c["labels"][c["index"]] if "labels" in c else str(c["value"])
                                 for c in sp["controls"]}, "fixed": sp["fixed"]}
    r = subprocess.run([sys.executable, "-I", "-c", probe, json.dumps(args), str(tmp_path / "course")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout) == {"memory": "stacked", "costmodel": "loglog", "pipeline": "gantt", "planner": "hbars"}


# The first answer starts Python in the page: Pyodide compiles its 9.6 MB WebAssembly binary and
# imports the standard library and the course's modules. Measured on this 2-core machine: 4.9-8.7 s
# with a few other jobs running, ~40 s at load average 13-16 (other agents' test runs on the same 2
# cores). A timing claim is asserted only on a quiet machine (disttutor.contract.machine.quiet: load
# under half the cores, before and after the page), and there the budget is FIRST_ANSWER_S, about 2x
# the worst measured with some load: a page that starts Python more than once, or hangs, fails it.
# On any machine, loaded or not: Python is fetched once per page, and a later move (which only calls
# the Python: 2-370 ms measured, loaded) answers in under a quarter of the first one's time.
FIRST_ANSWER_S = 15.0
READ_PANEL = """p => ({state: p.dataset.state, runs: +(p.dataset.runs || 0), ms: +(p.dataset.ms || 0),
    status: p.querySelector('.dt-live-status').innerText,
    table: (p.querySelector('.dt-live-table') || {}).textContent || null,
    error: (p.querySelector('.dt-live-error') || {}).textContent || null,
    title: [...p.querySelectorAll('svg .dt-live-title')].map(t => t.textContent).join('\\n'),
    values: [...p.querySelectorAll('svg .dt-live-value')].map(t => t.textContent),
    saved: [...p.closest('.jp-Cell').querySelectorAll('.jp-OutputArea-output')]
             .filter(o => o.querySelector('.jupyter-widgets') && !o.hidden).length})"""


# Records each (state, status) the panel goes through, in order, from the moment it is installed.
SEEN = """p => { window.dtSeen = [];
    new MutationObserver(() => {
        const now = [p.dataset.state, p.querySelector('.dt-live-status').textContent];
        const last = window.dtSeen[window.dtSeen.length - 1];
        if (!last || last[0] !== now[0] || last[1] !== now[1]) window.dtSeen.push(now);
    }).observe(p, {attributes: true, childList: true, subtree: true, characterData: true}); }"""


def _expected(name, kw):
    """What the notebook's widget shows for these inputs: its own functions, figure and printed table."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from disttutor.launcher.results import format_table
    from disttutor.viz import alphabeta, memory, pipeline, scale

    if name == "costmodel":
        rows, fig = alphabeta.model_view(**kw)
        ax = fig.axes[0]
        want = {"table": format_table(rows), "title": ax.get_title(), "error": None,
                "values": [t.get_text() for t in ax.texts]}  # each line's time for the largest message
    elif name == "memory":
        rows, fig = memory.calculator_view(**kw)
        ax = fig.axes[0]
        want = {"table": format_table(rows), "title": ax.get_title(), "error": None,
                "values": [t.get_text() for t in ax.texts[:len(rows)]]}  # the bars' totals, then the device line
    elif name == "pipeline":
        try:
            spec = pipeline.widget_spec(**kw)
        except ValueError as e:  # the widget prints this line and draws nothing
            return {"table": None, "title": "", "values": [], "error": f"not drawable: {e}"}
        fig = pipeline.theory_figure(spec)
        want = {"table": None, "title": fig.axes[0].get_title(), "error": None,
                "values": [t.get_text() for t in fig.axes[1].texts]}  # peak activations per rank
    else:
        rows, fig = scale.planner_view(**kw)
        if fig is None:
            return {"table": None, "title": "", "values": [], "error": scale.NO_FIT}
        ax = fig.axes[0]
        want = {"table": format_table(rows), "title": ax.get_title(), "error": None,
                "values": [t.get_text().strip() for t in ax.texts]}  # tok/s/GPU and MFU per layout
    plt.close(fig)
    return want


MOVES = {  # (keyword, option label or slider value) in order; each waits for its answer
    "memory": [("n", "32"), ("precision", "fp32"), ("preset", "GPT 70B-like (80 x 8192)"), ("seq", "4096")],
    "costmodel": [("n", "64"), ("alpha_us", "1"), ("gb_s", "450"), ("n", "2")],
    "pipeline": [("m", "16"), ("schedule", "gpipe"), ("schedule", "interleaved"), ("v", "2"), ("m", "6")],
    "planner": [("n_gpus", "1024"), ("hw", "H200"), ("seq", "131072"), ("n_gpus", "8")],
}


def _move(panel, c, label):
    key = f'[data-key="{c["key"]}"]'
    if c["kind"] == "select":
        panel.locator(f"select{key}").select_option(label=label)
    elif c["kind"] == "toggle":
        panel.locator(f'{key} button[value="{label}"]').click()
    else:  # a range input: a selection slider's position is the label's index
        panel.locator(f"input{key}").fill(str(c["labels"].index(label)) if "labels" in c else label)


@pytest.mark.timeout(600)  # ~25-45 s; 300 s seen at load average 17-20 (Python starts once per page)
def test_live_widgets_redraw_from_the_course_python_in_a_real_browser(site):
    """Each live widget in Chromium, offline: nothing of Python loads before a control is touched; the
    first touch shows "loading Python…"; then every move redraws, and the page's table, title and numbers equal the notebook's widget functions'
    for the same inputs (computed here); Python's files are fetched once per page, a later move answers
    in under a quarter of the first one's time, and on a quiet machine the first answer comes within
    FIRST_ANSWER_S; no JavaScript error. The planner runs at the chapter's calibrated efficiency, read
    back from its saved table: checked against the efficiency the chapter prints. ~25-45 s (Python
    starts once per page: ~5-9 s; 210 s at load average 15)."""
    missing = browser_check.missing_browser_parts()
    if missing:
        if os.environ.get("DISTTUTOR_REQUIRE_BROWSER"):
            pytest.fail("browser check required (DISTTUTOR_REQUIRE_BROWSER) but missing: " + ", ".join(missing))
        pytest.skip("live widget check needs " + " and ".join(missing))
    from playwright.sync_api import sync_playwright

    from disttutor.contract.machine import quiet
    from disttutor.course.site import live
    from disttutor.course.site.edition import EN, ZH
    from disttutor.viz import web

    out, _ = site
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=out))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    pages = [("", s) for s in LIVE]  # the zh pages run the same live.js on the same data (checked above)
    t0, rows, problems, timings = time.monotonic(), [], [], []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=browser_check.find_chromium(None), headless=True,
                                         args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            # One context, as one reader: the first page starts Python cold, the later ones find Pyodide
            # in the browser's cache (and its compiled WebAssembly in V8's code cache).
            context = browser.new_context(viewport={"width": 1300, "height": 900})
            for prefix, stem in pages:
                rel, name = f"{prefix}chapters/{stem}.html", LIVE[stem]
                src, state, mid, nb = _saved_widget(stem)
                by_label, cs = {v: k for k, v in web.BY_NAME[name].controls.items()}, {}
                for c in live.controls(state, mid):
                    cs[by_label[c["label"]]] = dict(c, key=by_label[c["label"]])
                kw = {k: web.value(c["labels"][c["index"]]) if "labels" in c else c["value"] for k, c in cs.items()}
                fixed = _live_panels(_read(out, rel))[0]["fixed"]
                if name == "planner":  # the page's efficiency is the chapter's: printed to 2 decimals there
                    printed = re.search(r"efficiency = ([\d.]+) of peak", json.dumps(nb["cells"])).group(1)
                    assert abs(fixed["efficiency"] - float(printed)) <= 0.005, (fixed, printed)
                page = context.new_page()
                was_quiet = quiet()
                errors, asked = [], []
                page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
                page.on("console", lambda m: m.type == "error" and not m.text.startswith("Failed to load resource")
                        and errors.append(f"console: {m.text[:200]}"))
                page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url[:120]}"))
                page.on("response", lambda r: r.status >= 400 and not r.url.endswith("/favicon.ico")
                        and errors.append(f"HTTP {r.status}: {r.url[:120]}"))
                page.on("request", lambda r: asked.append(r.url))
                page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(base) else
                           (errors.append(f"needs the network: {r.request.url[:120]}"), r.abort()))
                page.goto(base + rel, wait_until="load", timeout=60_000)
                panel = page.locator(".dt-live")
                page.wait_for_function("() => document.querySelector('.jp-Cell .widget-subarea .jupyter-widgets')",
                                       timeout=30_000)
                before = panel.evaluate(READ_PANEL)
                early = [u for u in asked if "/pyodide/" in u or "/live/" in u]
                if before["state"] != "idle" or early or before["saved"] != 1:
                    problems.append(f"{rel}: before any move: {before['state']}, saved outputs {before['saved']}, "
                                    f"fetched {early[:2]}")
                first = first_ms = None
                for k, (key, label) in enumerate(MOVES[name], 1):
                    kw[key] = web.value(label)
                    if k == 1:  # every state the panel shows, as it shows it: reading it after the move races
                        panel.evaluate(SEEN)  # with Pyodide's start, which can hold the page's thread for seconds
                    t = time.monotonic()
                    _move(panel, cs[key], label)
                    page.wait_for_function(f"() => +(document.querySelector('.dt-live').dataset.runs || 0) >= {k}"
                                           " || document.querySelector('.dt-live').dataset.state === 'error'",
                                           timeout=180_000)
                    wall = time.monotonic() - t
                    first = first or wall
                    got = panel.evaluate(READ_PANEL)
                    if k == 1:  # Python takes seconds to start: the panel said so meanwhile, before its answer
                        seen = page.evaluate("() => window.dtSeen")
                        if not seen or seen[0] != ["loading", dict(EN.labels.live_texts)["loading"]]:
                            problems.append(f"{rel}: while Python starts: {seen[:2]}")
                    want = _expected(name, {**kw, **fixed})
                    for field in ("table", "title", "values", "error"):
                        if got[field] != want[field]:
                            problems.append(f"{rel} after {key}={label}: {field} {got[field]!r} != {want[field]!r}")
                    first_ms = first_ms or got["ms"]  # the page's own clock: from the move to the drawing
                    if k > 1 and got["ms"] > first_ms / 4:
                        problems.append(f"{rel}: move {k} ({key}={label}) took {got['ms']} ms, the first {first_ms} ms")
                    if got["saved"]:
                        problems.append(f"{rel}: the saved output still shows beside the drawing")
                    rows.append((rel, f"{key}={label}", wall, got["ms"]))
                fetched = [u for u in asked if u.endswith(("pyodide.asm.wasm", "disttutor.zip"))]
                if len(fetched) != 2:
                    problems.append(f"{rel}: Python's files fetched {len(fetched)} times, want once each: {fetched}")
                calm = was_quiet and quiet()
                if calm and first > FIRST_ANSWER_S:
                    problems.append(f"{rel}: the first answer took {first:.1f} s on a quiet machine "
                                    f"> {FIRST_ANSWER_S} s")
                timings.append(f"{rel}: first answer {first:.1f} s ({'quiet' if calm else 'loaded'} machine, "
                               f"load {os.getloadavg()[0]:.1f})")
                status = panel.evaluate("p => p.querySelector('.dt-live-status').innerText")
                ready = dict((ZH if prefix else EN).labels.live_texts)["ready"].split("{")[0]
                if not status.startswith(ready):
                    problems.append(f"{rel}: status {status!r}")
                problems += [f"{rel}: {e}" for e in errors[:3]]
                page.close()
            browser.close()
    finally:
        server.shutdown()
    print(f"{'page':40} {'move':42} {'answer s':>8} {'page ms':>8}")
    for rel, move, wall, ms in rows:
        print(f"{rel:40} {move:42} {wall:8.2f} {ms:8.0f}")
    print("\n".join(timings))
    print(f"{len(pages)} pages, {len(rows)} moves, {time.monotonic() - t0:.1f} s in the browser")
    assert not problems, "\n".join(problems[:20])
    assert len(rows) == sum(len(MOVES[LIVE[s]]) for _, s in pages)


def test_a_widget_is_live_only_where_its_python_reprints_the_saved_output():
    """The builder makes a widget live only if every saved control maps to its function and that
    function, at the saved values, prints the saved table again: a renamed control, or a saved table the
    Python no longer prints (here one digit changed), keeps the saved widget with its "run the notebook"
    line. The planner's efficiency is read back from its saved table. ~1 s, no browser."""
    import copy

    from disttutor.course.site import live

    src, state, mid, _ = _saved_widget("01_why_distributed")
    assert live.spec(src, state, mid)["name"] == "memory"
    assert live.spec("print('no widget')", state, mid) is None
    renamed = copy.deepcopy(state)
    next(m for m in renamed.values() if m["state"].get("description") == "devices")["state"]["description"] = "GPUs"
    assert live.spec(src, renamed, mid) is None
    changed = copy.deepcopy(state)
    out = next(o for m in changed.values() if m["model_name"] == "OutputModel"
               for o in m["state"]["outputs"] if o["output_type"] == "stream")
    assert "395.155" in out["text"]
    out["text"] = out["text"].replace("395.155", "395.156")
    assert live.spec(src, changed, mid) is None
    src, state, mid, _ = _saved_widget("13_at_scale")
    sp = live.spec(src, state, mid)
    assert sp["name"] == "planner" and 0 < sp["fixed"]["efficiency"] < 1, sp
