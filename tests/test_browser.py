"""What a learner sees when a chapter is opened, before and after running it.

Without a browser: every widget output of a committed chapter has its state stored and a
readable text/plain (a placeholder or the progress bar's last line, never a repr), which is what
GitHub and untrusted notebooks show. With Chromium and playwright: scripts/browser_check.py opens
every chapter in JupyterLab, checks that the widgets render with no error and no JavaScript
error, and runs chapters 0 and 1 end to end (the calculator's dropdown must change its output).
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import browser_check  # noqa: E402
import build_notebooks  # noqa: E402

NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "chapters", "[0-9][0-9]_*.ipynb")))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_widget_outputs_have_state_and_a_readable_text_form(path):
    nb = json.load(open(path))
    state = nb.get("metadata", {}).get("widgets", {}).get(build_notebooks.WIDGET_STATE, {}).get("state", {})
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if build_notebooks.WIDGET_VIEW not in data:
                continue
            where = f"{os.path.basename(path)} cell {i}"
            assert data[build_notebooks.WIDGET_VIEW]["model_id"] in state, \
                f"{where}: widget without stored state (JupyterLab: 'model not found'); rebuild it"
            text = "".join(data.get("text/plain", ""))
            assert not browser_check.BAD.search(text), f"{where}: text form is a repr: {text[:80]!r}"
            # A placeholder, or a finished-looking bar: "desc: 100%|██████████| 33/33 [...]".
            assert text == build_notebooks.PLACEHOLDER or re.search(r"\|[█ ]{10}\|", text), f"{where}: {text[:80]!r}"


def test_progress_text_is_where_the_bar_ended():
    state = {"a": {"state": {"_model_name": "HTMLModel", "value": "all-reduce x2: 100%"}},
             "b": {"state": {"_model_name": "FloatProgressModel", "value": 33, "max": 33}},
             "c": {"state": {"_model_name": "HTMLModel", "value": " 33/33 [00:05&lt;00:00, 6.1it/s]"}}}
    box = {"children": ["IPY_MODEL_a", "IPY_MODEL_b", "IPY_MODEL_c"]}
    assert build_notebooks._progress_text(state, box) == "all-reduce x2: 100%|██████████| 33/33 [00:05<00:00, 6.1it/s]"
    state["b"]["state"]["value"] = 11
    assert "|███       |" in build_notebooks._progress_text(state, box)
    assert build_notebooks._progress_text(state, {"children": ["IPY_MODEL_a"]}) is None  # not a bar


@pytest.mark.timeout(720)  # 8 chapters opened, 2 run, one JupyterLab; ~3-5 min on a loaded 2-core machine
def test_every_chapter_in_a_real_browser():
    missing = browser_check.missing_browser_parts()
    if missing:
        if os.environ.get("DISTTUTOR_REQUIRE_BROWSER"):
            pytest.fail("browser check required (DISTTUTOR_REQUIRE_BROWSER) but missing: " + ", ".join(missing))
        pytest.skip("browser check needs " + " and ".join(missing))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "browser_check.py")],
                       capture_output=True, text=True, timeout=700, cwd=ROOT)
    print(r.stdout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert re.search(rf"^{len(NOTEBOOKS)} chapter\(s\), 0 failing", r.stdout, re.M), r.stdout[-2000:]
