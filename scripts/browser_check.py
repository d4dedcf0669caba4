"""Open every chapter in JupyterLab in a real (headless) Chromium and check what a learner sees.

    python scripts/browser_check.py                     # every chapter; run 00 and 01 end to end
    python scripts/browser_check.py --run 00 02 --only 00 02

For each committed chapter, opened as a learner opens it (not yet run):
  * every widget output renders as a widget (counted against the notebook file);
  * no output shows "Error displaying widget" or a widget's raw repr (``VBox(children=...``);
  * no JavaScript error (uncaught exception or console error) appears.
The chapters named by ``--run`` are then run top to bottom in the browser ("Run All Cells"): no
cell may fail, the errors above still may not appear, and in a chapter with a dropdown widget
changing the dropdown must change what the widget shows.

Why these settings: JupyterLab 4 renders cells lazily (windowing), so an unrendered output would
pass unseen; windowing mode "none" renders all of them. Autosave is off and the server serves a
temporary copy of the repository's notebooks, so running a chapter here never rewrites the
committed one. The server listens on loopback, on a port the OS picks, with a random token.

Chromium comes from the OS (Debian's ``chromium``; playwright's own browser download is not
needed): ``--chromium`` or ``$CHROMIUM`` or the first of chromium / chromium-browser /
google-chrome on PATH. Exit status 0 when every check passed, 1 otherwise, 2 when the browser or
playwright is missing.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from disttutor.contract.procs import PRCTL, die_with_parent  # noqa: E402  (torch-free)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# What a widget looks like when it is *not* rendered: its repr, or the manager's error.
BAD = re.compile(r"Error displaying widget|(?:VBox|HBox|Box|Tab|Accordion)\(children=|"
                 r"(?:IntProgress|FloatProgress|Dropdown|IntSlider|FloatSlider|Output)\((?:value|layout|description|outputs|children|index|max)")
# The notebook's code-cell models, in order (window.jupyterapp: the server exposes it).
CODE_CELLS = ("() => { const c = window.jupyterapp.shell.currentWidget.content.model.cells; "
              "return Array.from({length: c.length}, (_, i) => c.get(i)).filter(m => m.type === 'code')")
SETTINGS = {  # JUPYTERLAB_SETTINGS_DIR/<plugin>.jupyterlab-settings
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


def find_chromium(given: str | None) -> str | None:
    for c in (given, os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if c and (os.path.isfile(c) or shutil.which(c)):
            return c if os.path.isfile(c) else shutil.which(c)
    return None


def missing_browser_parts() -> list[str]:
    """What a browser test lacks here (Debian's chromium, the [browser] extra's playwright); [] if nothing.

    The tests skip on a non-empty answer, or fail where DISTTUTOR_REQUIRE_BROWSER is set (CI)."""
    missing = []
    if find_chromium(None) is None:
        missing.append("chromium (apt-get install chromium)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install -e '.[browser]')")
    return missing


def widget_outputs(path: str) -> int:
    nb = json.load(open(path))
    return sum(WIDGET_VIEW in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", []))


class Lab:
    """A JupyterLab server over a temporary copy of the course (notebooks copied, the rest linked)."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="disttutor-browser-")
        self.root = os.path.join(self.tmp, "course")
        os.makedirs(os.path.join(self.root, "chapters"))
        for name in os.listdir(ROOT):
            if name not in ("chapters", "workspace", ".git", ".venv") and not name.startswith("."):
                os.symlink(os.path.join(ROOT, name), os.path.join(self.root, name))
        for nb in glob.glob(os.path.join(ROOT, "chapters", "*.ipynb")):
            shutil.copy(nb, os.path.join(self.root, "chapters"))
        settings = os.path.join(self.tmp, "settings")
        for plugin, values in SETTINGS.items():
            os.makedirs(os.path.join(settings, os.path.dirname(plugin)), exist_ok=True)
            with open(os.path.join(settings, plugin + ".jupyterlab-settings"), "w") as f:
                json.dump(values, f)
        runtime = os.path.join(self.tmp, "runtime")
        env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=settings, JUPYTER_RUNTIME_DIR=runtime,
                   JUPYTERLAB_WORKSPACES_DIR=os.path.join(self.tmp, "workspaces"),
                   OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                   PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
        env["JUPYTER_DATA_DIR"] = os.path.join(self.tmp, "data")  # its own notebook-signature db
        # Trusted as `course.py lab` trusts a learner's fresh working copies: JupyterLab renders
        # widgets (an "unsafe" mime type) only in trusted notebooks; untrusted ones show the
        # text/plain fallback, which the build script makes a placeholder (tests/test_browser.py).
        subprocess.run([sys.executable, "-m", "jupyter", "trust", "--log-level=WARN",
                        *glob.glob(os.path.join(self.root, "chapters", "*.ipynb"))],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        self.token = secrets.token_hex(16)
        self.log = open(os.path.join(self.tmp, "lab.log"), "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
             "--ServerApp.port=0", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={self.root}", "--allow-root",
             # window.jupyterapp: run_all reads the cells' execution counts from the notebook's
             # model (a collapsed input, as a proof cell's is, shows no prompt in the page).
             "--LabApp.expose_app_in_browser=True"],
            cwd=self.root, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            # The server lives no longer than this script: killed outright (a test's timeout sends
            # SIGKILL, and no ``finally`` runs then), it would stay behind with PPID 1 -- seen once.
            # SIGTERM, so that the server still shuts its kernels down on its way out.
            preexec_fn=(lambda: die_with_parent(signal.SIGTERM)) if PRCTL else None)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # the server writes its port (OS-chosen) to the runtime dir
            info = glob.glob(os.path.join(runtime, f"jpserver-{self.proc.pid}.json"))
            if info:
                try:
                    self.port = json.load(open(info[0]))["port"]
                    break
                except (ValueError, KeyError):
                    pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({self.proc.returncode}): " + self.tail())
            time.sleep(0.3)
        else:
            self.close()
            raise RuntimeError("JupyterLab did not start within 90 s: " + self.tail())
        self.url = f"http://127.0.0.1:{self.port}"

    def tail(self, n: int = 5) -> str:
        self.log.flush()
        return " | ".join(open(self.log.name).read().strip().splitlines()[-n:])

    def close(self):
        if self.proc.poll() is None:  # the server shuts its kernels down on SIGTERM
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Page:
    """One notebook open in one browser page, with its JavaScript errors collected."""

    def __init__(self, browser, lab: Lab, rel: str):
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.page.on("console", self._console)
        # Generous limits: JupyterLab's first page load builds its bundles' cache (slow on 2 cores).
        self.page.goto(f"{lab.url}/lab/tree/{rel}?token={lab.token}&reset", timeout=180_000,
                       wait_until="domcontentloaded")
        self.page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=180_000)
        # The model fills in after the first cell shows: wait for all of the file's cells.
        self.cells = json.load(open(os.path.join(ROOT, rel)))["cells"]
        self.page.wait_for_function(
            f"() => window.jupyterapp?.shell.currentWidget?.content?.model?.cells.length === {len(self.cells)}",
            timeout=180_000)
        self.wait_idle(120)

    def _console(self, msg):
        # Resource loads refused offline (news, extension manager) are the network, not the page.
        if msg.type == "error" and "Failed to load resource" not in msg.text:
            self.errors.append(f"console: {msg.text.splitlines()[0][:200]}")

    def wait_idle(self, timeout_s: float):
        self.page.wait_for_function(
            "() => { const s = document.querySelector('.jp-Notebook-ExecutionIndicator, "
            ".jp-KernelStatus'); return s && !/busy|starting|connecting|unknown/i.test("
            "s.getAttribute('data-status') || s.textContent || ''); }", timeout=timeout_s * 1000)

    def widgets(self) -> tuple[int, int, list[str]]:
        """(widget outputs, rendered ones, texts of outputs that look wrong)."""
        return self.page.evaluate("""bad => {
            const re = new RegExp(bad);
            const outs = [...document.querySelectorAll('.jp-OutputArea-output')];
            // A drawn widget is a view whose top node carries .jupyter-widgets (the output then
            // has no data-mime-type); "Loading widget..." or an error is plain text.
            const views = outs.filter(o => o.querySelector(':scope > .jupyter-widgets')
                || /^(Loading widget|Error displaying widget)/.test(o.innerText || ''));
            const rendered = views.filter(o => o.querySelector(':scope > .jupyter-widgets'));
            const wrong = outs.map(o => o.innerText || '').filter(t => re.test(t)).map(t => t.slice(0, 120));
            return [views.length, rendered.length, wrong];
        }""", BAD.pattern)

    def settle(self, want: int, timeout_s: float = 60):
        """Wait until the expected number of widget outputs is drawn (the manager restores them
        from the notebook's stored state once the kernel is up)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            n, ok, wrong = self.widgets()
            if (n >= want and ok == n) or wrong:
                return n, ok, wrong
            time.sleep(0.5)
        return self.widgets()

    def run_all(self, timeout_s: float) -> str | None:
        """Run All Cells; None when every cell ran, else the failing cell's last output line.

        Run All stops at the first cell that raises, so "kernel idle but a cell never ran" is
        the failure signal (a cell ran when its model has an execution count; the counts stored
        in the notebook are cleared first) (tracebacks of deliberately crashed ranks are ordinary output here).
        """
        def click_run_all():
            self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
            self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()

        self.page.evaluate(CODE_CELLS + ".forEach(m => { m.executionCount = null; }); }")
        click_run_all()
        deadline, idle_since, clicks = time.monotonic() + timeout_s, None, 1
        time.sleep(2)
        while time.monotonic() < deadline:
            counts = self.page.evaluate(CODE_CELLS + ".map(m => m.executionCount); }")
            idle = self.page.evaluate("() => document.querySelector("
                                      "'.jp-Notebook-ExecutionIndicator')?.getAttribute('data-status')")
            done = [isinstance(c, int) for c in counts]
            if all(done):
                return None
            idle_since = (idle_since or time.monotonic()) if idle == "idle" else None
            if idle_since and time.monotonic() - idle_since > 5 and not any(done) and clicks < 3:
                # Not one cell ran, not even with an error (that would number it): the click landed
                # while the kernel was still starting (seen once under load). Click again.
                click_run_all()
                clicks, idle_since = clicks + 1, None
                time.sleep(2)
                continue
            if idle_since and time.monotonic() - idle_since > 5:
                last = done.index(False) - 1
                text = self.page.locator(".jp-CodeCell").nth(max(last, 0)).inner_text().strip().splitlines()
                return f"code cell {last + 1} failed: {text[-1][:150] if text else '?'}"
            time.sleep(1)
        return f"not finished after {timeout_s:.0f}s"

    def respond(self) -> str:
        """Change the first dropdown of a widget; the widget's output must change."""
        select = self.page.locator(".widget-dropdown select").first
        if not select.count():
            return "no dropdown"
        box = self.page.locator(".jp-OutputArea-output", has=select).first
        out = box.locator(".widget-output").last
        before = out.inner_html()
        options = select.locator("option").all_inner_texts()
        current = select.evaluate("s => s.options[s.selectedIndex].text")
        choice = next(o for o in options if o != current)
        select.select_option(label=choice)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and out.inner_html() == before:
            time.sleep(0.5)
        if out.inner_html() == before:
            raise AssertionError(f"changing the dropdown to {choice!r} changed nothing in the widget")
        return f"dropdown {current!r} -> {choice!r}: output changed"


def check(chapters: list[str], run: list[str], chromium: str, run_timeout: float) -> int:
    from playwright.sync_api import sync_playwright

    lab = Lab()
    failures = 0
    t0 = time.monotonic()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True,
                                         args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            for path in chapters:
                name = os.path.basename(path)
                want = widget_outputs(path)
                t = time.monotonic()
                try:
                    page = Page(browser, lab, f"chapters/{name}")
                except Exception as e:  # one readable line, then the next chapter
                    print(f"FAIL {name}: did not open: {str(e).splitlines()[0][:200]}", flush=True)
                    failures += 1
                    continue
                n, ok, wrong = page.settle(want)
                problems = [f"{len(wrong)} output(s) show a repr/error: {wrong[0]!r}"] if wrong else []
                if n != want or ok != n:
                    problems.append(f"{ok} of {want} widget outputs rendered")
                line = f"{name}: widgets {ok}/{want} rendered"
                if name[:2] in run:
                    try:
                        failed = page.run_all(run_timeout)
                        n2, ok2, wrong2 = page.settle(want, 30)
                        line += f"; ran all cells{' (FAILED)' if failed else ''}, widgets {ok2}/{n2} rendered"
                        if failed or wrong2 or ok2 != n2:
                            problems.append(f"after running: {failed or 'all cells ran'}; {wrong2[:1]}")
                        if n2:
                            line += "; " + page.respond()
                    except Exception as e:  # a timeout or a dead widget: one line, then the next chapter
                        problems.append(f"running it failed: {str(e).splitlines()[0][:200]}")
                problems += page.errors[:3]
                line += f"; JavaScript errors {len(page.errors)}; {time.monotonic() - t:.0f}s"
                print(("ok   " if not problems else "FAIL ") + line, flush=True)
                for p in problems:
                    print(f"     {p}", flush=True)
                failures += bool(problems)
                page.page.close()
            browser.close()
    finally:
        lab.close()
    print(f"{len(chapters)} chapter(s), {failures} failing, {time.monotonic() - t0:.0f}s", flush=True)
    return 1 if failures else 0


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through check()'s ``finally``: the server is closed


def main(argv=None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", default=None, help="chapter numbers to open (default: all)")
    p.add_argument("--run", nargs="*", default=["00", "01"], help="chapters to run end to end")
    p.add_argument("--chromium", default=None, help="path to chromium (default: $CHROMIUM or PATH)")
    p.add_argument("--run-timeout", type=float, default=240, help="seconds for one chapter's Run All")
    a = p.parse_args(argv)
    chromium = find_chromium(a.chromium)
    if chromium is None:
        print("no chromium found (apt-get install chromium, or --chromium PATH)")
        return 2
    try:
        import playwright  # noqa: F401
    except ImportError:
        print("playwright is not installed (pip install playwright; its browser download is not needed)")
        return 2
    chapters = sorted(glob.glob(os.path.join(ROOT, "chapters", "[0-9][0-9]_*.ipynb")))
    if a.only is not None:
        chapters = [c for c in chapters if os.path.basename(c)[:2] in a.only]
    return check(chapters, a.run, chromium, a.run_timeout)


if __name__ == "__main__":
    sys.exit(main())
