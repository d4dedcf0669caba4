"""Committed notebook outputs are for learners: no build-machine paths, no endless streams.

A learner opens a chapter before running it and reads what the build machine printed. Those
outputs must not show where the build ran (the repository's absolute path, a home directory, a
virtualenv's ``site-packages``, a launcher run directory under ``/tmp``) and no single stream may
scroll past a screen (more than 60 lines). Runs over every committed chapter, so chapters added
later are held to the same rule.
"""
from __future__ import annotations

import glob
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "chapters", "*.ipynb")))
MAX_STREAM_LINES = 60

# What gives away the build machine. The repository root is matched literally (wherever this
# checkout lies); the rest are places a path on the machine that built the notebook can point to.
_MACHINE_PATHS = [
    re.escape(ROOT),
    r"/root(?:/|\b)",
    r"/home/[\w.-]+",
    r"/Users/[\w.-]+",
    r"/tmp/disttutor-run-",
    r"/tmp/tmp\w+",
    r"site-packages",
    r"dist-packages",
    r"/\.venv/",
    r"/work/(?:main|wt|shared)\b",
]
MACHINE_PATH = re.compile("|".join(f"(?:{p})" for p in _MACHINE_PATHS))


def _texts(out: dict):
    """Every piece of text an output shows (streams, errors, text/plain/markdown/html data)."""
    if out.get("output_type") == "stream":
        yield "stream", "".join(out.get("text", ""))
    elif out.get("output_type") == "error":
        yield "error", "\n".join(out.get("traceback", []))
    for mime, value in (out.get("data") or {}).items():
        if mime.startswith("text/") or mime == "application/json":
            yield mime, value if isinstance(value, str) else "".join(value) if isinstance(value, list) \
                else json.dumps(value)


def _outputs(path: str):
    nb = json.load(open(path, encoding="utf-8"))
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            yield i, out


def machine_paths(path: str) -> list[str]:
    found = []
    for i, out in _outputs(path):
        for kind, text in _texts(out):
            for line in text.splitlines():
                m = MACHINE_PATH.search(line)
                if m:
                    found.append(f"cell {i} ({kind}): {m.group(0)!r} in {line.strip()[:120]!r}")
    return found


def long_streams(path: str) -> list[str]:
    found = []
    for i, out in _outputs(path):
        if out.get("output_type") == "stream":
            n = len("".join(out.get("text", "")).splitlines())
            if n > MAX_STREAM_LINES:
                found.append(f"cell {i}: {out.get('name', 'stream')} of {n} lines")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_no_build_machine_paths(path):
    found = machine_paths(path)
    assert not found, "outputs show the build machine's paths (print them relative):\n" + "\n".join(found)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_no_stream_longer_than_a_screen(path):
    found = long_streams(path)
    assert not found, (f"streams longer than {MAX_STREAM_LINES} lines (fold them, show a diff or a "
                       "summary):\n" + "\n".join(found))


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The detectors themselves: a path of this checkout, a venv path and a long stream are found."""
    nb = {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "stream", "name": "stdout", "text": [f"{ROOT}/chapters\n"]},
        {"output_type": "stream", "name": "stdout", "text": "x\n" * (MAX_STREAM_LINES + 1)},
        {"output_type": "execute_result", "data": {"text/plain": "'/opt/x/.venv/lib/python3.12/site-packages/torch'"}},
        {"output_type": "stream", "name": "stdout", "text": "chapters/00_setup.ipynb ok; 1/2 ranks\n"},
    ]}]}
    p = tmp_path / "nb.ipynb"
    p.write_text(json.dumps(nb))
    assert len(machine_paths(str(p))) == 2
    assert long_streams(str(p)) == ["cell 0: stdout of 61 lines"]
