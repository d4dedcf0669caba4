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
Wall time: ~15-30 s to build, ~20-40 s for the browser on the loaded 2-core machine.
"""
from __future__ import annotations

import functools
import glob
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


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from disttutor.course.site import vendor

    cache = os.path.join(ROOT, ".site-cache")
    have = all(os.path.exists(os.path.join(cache, p.tarball)) for p in (vendor.HTML_MANAGER, vendor.MATHJAX))
    if not have and shutil.which("npm") is None:  # the renderers come from npm, once
        if os.environ.get("DISTTUTOR_REQUIRE_BROWSER"):
            pytest.fail("the site build needs npm once (apt-get install npm); .ci/run installs it")
        pytest.skip("the site build needs npm once (apt-get install npm)")
    out = str(tmp_path_factory.mktemp("site") / "site")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "disttutor.course.site", "--out", out],
                       capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                           p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    print(f"build: {time.monotonic() - t0:.1f} s; {r.stdout.strip().splitlines()[-2]}")
    return out, r.stdout


def _pages(out):
    return ["index.html", "glossary.html"] + [f"chapters/{s}.html" for s in STEMS]


def test_every_chapter_has_a_page_and_its_notebook(site):
    out, stdout = site
    assert stdout.strip().splitlines()[-1] == os.path.join(out, "index.html")
    for s in STEMS:
        assert os.path.isfile(os.path.join(out, "chapters", f"{s}.html")), s
        # The copy the page links is the committed notebook, byte for byte (outputs as verified).
        assert open(os.path.join(out, "notebooks", f"{s}.ipynb"), "rb").read() == \
            open(os.path.join(ROOT, "chapters", f"{s}.ipynb"), "rb").read(), s


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
    for f in files:
        if f.endswith((".html", ".js", ".ipynb", ".py")) and "/vendor/" not in f:
            text = open(f, encoding="utf-8").read()
            leaked = [s for s in secret if s in text]
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
            assert "chapters/" in hit and os.path.isfile(os.path.join(out, hit.split("#")[0])), hit
            page.close()
            browser.close()
    finally:
        server.shutdown()
    print(f"{'page':44} widgets  images  links  JS errors")
    for rel, ok, n, imgs, nl, ne in rows:
        print(f"{rel:44} {ok:>3}/{n:<3} {imgs:>7} {nl:>6} {ne:>10}")
    print(f"{len(rows)} pages, {checked} distinct internal links checked, {time.monotonic() - t0:.1f} s in the browser")
    assert not problems, "\n".join(problems[:20])
    assert sum(r[1] for r in rows) == sum(want.values()) > 0  # widgets exist and all were counted
