"""Screenshots of the built site for the docs: the landing page, chapter 7's bubble widget, a live widget.

    python -m disttutor.course.site.screenshots [--site site] [--out docs]

Headless Chromium from the OS (as scripts/browser_check.py finds it), the site read from disk
(file://, offline), except the live widget's page: Python in the page needs it served, so that one
comes from a local http.server, after a control was moved and the page's Python redrew (chapter 1's
calculator, on 32 devices). Each PNG is reduced to a 256-colour palette so the committed files stay small.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import sys
import threading

SHOTS = [  # (file, page, element scrolled to the top, or None)
    ("site-landing.png", "index.html", None),
    ("site-ch07-bubble-widget.png", "chapters/07_pipeline_parallel.html", "The-pipeline-bubble-widget"),
]


LIVE_SHOT = ("site-live-widget.png", "chapters/01_why_distributed.html", "n", "4")  # devices: 32


def live_shot(browser, site: str, out: str) -> str:
    """Chapter 1's calculator after its devices slider moved, drawn by the page's own Python."""
    name, rel, key, value = LIVE_SHOT
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=site))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/{rel}", wait_until="load")
        panel = page.locator(".dt-live")
        panel.locator(f'input[data-key="{key}"]').fill(value)
        page.wait_for_function("() => document.querySelector('.dt-live').dataset.state === 'ready'", timeout=120_000)
        path = os.path.join(out, name)
        panel.screenshot(path=path)
        page.close()
        return path
    finally:
        server.shutdown()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def chromium() -> str | None:
    for c in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if c and (os.path.isfile(c) or shutil.which(c)):
            return c if os.path.isfile(c) else shutil.which(c)
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--site", default="site")
    p.add_argument("--out", default="docs")
    a = p.parse_args(argv)
    exe = chromium()
    if exe is None:
        print("no chromium found (apt-get install chromium)")
        return 2
    from PIL import Image  # matplotlib's dependency
    from playwright.sync_api import sync_playwright

    os.makedirs(a.out, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox", "--disable-gpu"])
        for name, rel, anchor in SHOTS:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            page.goto("file://" + os.path.abspath(os.path.join(a.site, rel)), wait_until="load")
            page.wait_for_timeout(2000)  # widgets render and MathJax typesets after load
            if anchor:
                page.evaluate("id => document.getElementById(id).scrollIntoView()", anchor)
            path = os.path.join(a.out, name)
            page.screenshot(path=path)
            Image.open(path).convert("RGB").quantize(colors=256).save(path, optimize=True)
            print(f"{path}: {os.path.getsize(path) // 1024} KiB")
            page.close()
        path = live_shot(browser, a.site, a.out)
        Image.open(path).convert("RGB").quantize(colors=256).save(path, optimize=True)
        print(f"{path}: {os.path.getsize(path) // 1024} KiB")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
