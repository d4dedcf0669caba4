"""Screenshots of the built site for the docs: the landing page and chapter 7's bubble widget.

    python -m disttutor.course.site.screenshots [--site site] [--out docs]

Headless Chromium from the OS (as scripts/browser_check.py finds it), the site read from disk
(file://, offline); each PNG is reduced to a 256-colour palette so the committed files stay small.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

SHOTS = [  # (file, page, element scrolled to the top, or None)
    ("site-landing.png", "index.html", None),
    ("site-ch07-bubble-widget.png", "chapters/07_pipeline_parallel.html", "The-pipeline-bubble-widget"),
]


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
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
