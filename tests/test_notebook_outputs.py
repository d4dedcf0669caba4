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


# A checked cell (nbval-check-output) must print the same text on any machine. Float rounding is
# what differs between machines (another CPU's vector unit, another BLAS kernel, another thread
# count), so a checked output may not show a number whose digits ARE rounding: a measured one in
# scientific notation below 1e-4 (a difference of 3.0e-08 is float32 noise, not a result; a tolerance
# written as a constant, "within 1e-05", is not measured and may stay), or a decimal with 7 or
# more significant digits (past float32's ~7.2: the last ones are noise). Print the verdict, or round
# coarser than the cell's assert guarantees, or move the number into an unchecked cell.
_NUMBER = re.compile(r"(?<![\w.])(\d+\.\d+|\d+)(?:e([-+]?\d+))?(?![\w.])")


def rounding_level_numbers(path: str) -> list[str]:
    nb = json.load(open(path, encoding="utf-8"))
    found = []
    for i, cell in enumerate(nb["cells"]):
        if "nbval-check-output" not in cell.get("metadata", {}).get("tags", []):
            continue
        for out in cell.get("outputs", []):
            for kind, text in _texts(out):
                for m in _NUMBER.finditer(text):
                    mantissa, exp = m.group(1), m.group(2)
                    digits = mantissa.replace(".", "").lstrip("0")
                    tiny = exp is not None and int(exp) <= -5 and "." in mantissa  # 1e-05: a constant
                    noisy = "." in mantissa and len(digits) >= 7
                    if tiny or noisy:
                        line = text[text.rfind("\n", 0, m.start()) + 1: text.find("\n", m.end()) % (len(text) + 1)]
                        found.append(f"cell {i} ({kind}): {m.group(0)} in {line.strip()[:100]!r}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_checked_cells_print_no_rounding_level_number(path):
    found = rounding_level_numbers(path)
    assert not found, ("checked cells print numbers whose digits are float rounding (they differ on another "
                       "machine; print a verdict or fewer digits, or untag the cell):\n" + "\n".join(found))


def test_the_rounding_detector_catches_what_it_is_for(tmp_path):
    """Chapter 8's old line is caught; exact integers, hashes, versions and 4-digit losses are not."""
    def cell(text, tagged=True):
        return {"cell_type": "code", "metadata": {"tags": ["nbval-check-output"] if tagged else []},
                "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]}
    nb = {"cells": [
        cell("static_graph=True : largest gradient difference vs one process 3.0e-08\n"),
        cell("loss 0.37850314\n"),
        cell("fp16 of 1e-8 * 2**16: 0.0006551742553710938\n", tagged=False),  # unchecked: allowed
        cell("torch 2.13.0, sha b00fd920cd12, 12345678 bytes, loss 1.4733, lr 1e-3, 395.155 MB\n"),
        cell("== single process, every step, within 1e-05: True\n"),
    ]}
    p = tmp_path / "nb.ipynb"
    p.write_text(json.dumps(nb))
    found = rounding_level_numbers(str(p))
    assert [f.split(":")[0] for f in found] == ["cell 0 (stream)", "cell 1 (stream)"], found
