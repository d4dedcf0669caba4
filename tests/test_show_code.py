"""show_code: a chapter quotes a program's ``# [teach NAME]`` region from the installed file."""
from __future__ import annotations

import os
import pkgutil
import sys

import pytest

import disttutor
from disttutor.course.source import show_code, teach_regions

PROGRAM = '''"""A tiny module."""
import os

def step(x):
    # [teach step]
    y = x + 1          # the line a learner reads
    # [teach inner]
    z = y * 2
    # [/teach inner]
    return z
    # [/teach step]
'''


@pytest.fixture()
def module(tmp_path, monkeypatch):
    pkg = tmp_path / "teachpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "prog.py").write_text(PROGRAM)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "teachpkg.prog"
    sys.modules.pop("teachpkg", None)


def test_a_region_is_quoted_dedented_without_its_markers(module):
    q = show_code(module, "step")
    assert q.lines == ["y = x + 1          # the line a learner reads", "z = y * 2", "return z"]
    assert (q.first, q.last) == (6, 10) and q.caption().startswith("teachpkg/prog.py, lines 6-10")
    assert "```python\ny = x + 1" in q._repr_markdown_()
    assert show_code(module, "inner").lines == ["z = y * 2"]
    assert teach_regions(module) == ["step", "inner"]


def test_a_missing_region_names_the_regions_there_are(module):
    with pytest.raises(LookupError, match=r"no single region '# \[teach nope\]'.*regions: step, inner"):
        show_code(module, "nope")
    with pytest.raises(LookupError, match="no Python source"):
        show_code("teachpkg.absent")


def test_showing_a_program_does_not_import_it(module):
    show_code(module, "step")
    assert module not in sys.modules     # the kernel never imports a rank-side program to quote it


def test_every_region_in_the_package_opens_and_closes_once():
    root = os.path.dirname(disttutor.__file__)
    bad = []
    for info in pkgutil.walk_packages([root], "disttutor."):
        if info.ispkg:
            continue
        for name in teach_regions(info.name):
            try:
                show_code(info.name, name)
            except LookupError as e:
                bad.append(str(e))
    assert not bad, bad


def test_deeper_folds_lines_under_a_summary():
    from disttutor.course.source import deeper

    d = deeper("a <title>", ["x = 1"], ["y < 2"])
    md = d._repr_markdown_()
    assert md.startswith("<details><summary><b>Deeper:</b> a &lt;title&gt;</summary>") and md.endswith("</details>")
    assert "y &lt; 2" in md and repr(d) == "Deeper: a <title>\nx = 1\ny < 2"
