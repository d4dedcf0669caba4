"""Chapter prose lives in markdown cells: a markdown heading written as a comment inside a code cell.

A missing ``# %% [markdown]`` marker in a chapter source turns the section below it into ``#``
comments of the previous code cell: the learner sees no rendered heading or text, and nothing else
fails (chapter 4's "## 8. DDP's pros and cons" was lost that way). A code cell has no reason to
hold a line like ``# ## Title``, so any such line is that mistake.
"""
from __future__ import annotations

import glob
import json
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import build_notebooks  # noqa: E402

SOURCES = sorted(glob.glob(os.path.join(ROOT, "chapters", "src", "[0-9][0-9]_*.py")))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "chapters", "[0-9][0-9]_*.ipynb")))
HEADING_AS_COMMENT = re.compile(r"^# #{1,4} ", re.MULTILINE)


def headings_in_code(cells: list[tuple[str, str]]) -> list[str]:
    """``cell N: line`` for every markdown-heading comment in a code cell of (type, source) pairs."""
    return [f"cell {i}: {m.group(0)}{src[m.end():].splitlines()[0] if src[m.end():] else ''}"
            for i, (kind, src) in enumerate(cells) if kind == "code"
            for m in HEADING_AS_COMMENT.finditer(src)]


def source_cells(path: str) -> list[tuple[str, str]]:
    return [(c["type"], c["source"]) for c in build_notebooks.parse(open(path, encoding="utf-8").read())]


def notebook_cells(path: str) -> list[tuple[str, str]]:
    nb = json.load(open(path, encoding="utf-8"))
    return [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]


def test_the_detector_finds_a_section_left_in_a_code_cell():
    """The shape of the mistake as chapter 4 had it: the marker line before the heading is missing."""
    broken = ('# %%\nprint("verdict")\n#\n# ## 8. DDP\'s pros and cons (article §5.4), revisited\n#\n'
              '# * **Pros.** One process per device.\n\n# %%\nprint("next")\n')
    fixed = broken.replace('print("verdict")\n#\n', 'print("verdict")\n\n# %% [markdown]\n')
    found = headings_in_code(source_cells_from_text(broken))
    assert len(found) == 1 and "## 8. DDP's pros and cons" in found[0], found
    assert headings_in_code(source_cells_from_text(fixed)) == []
    # A code comment that merely starts with '#' characters is not a heading: '#' then text, or '##x'.
    assert headings_in_code([("code", "# compute it\n#: note\n# #not-a-heading\nx = 1  # ## inline\n")]) == []


def source_cells_from_text(text: str) -> list[tuple[str, str]]:
    return [(c["type"], c["source"]) for c in build_notebooks.parse(text)]


@pytest.mark.parametrize("src", SOURCES, ids=os.path.basename)
def test_no_markdown_heading_in_a_code_cell_of_a_chapter_source(src):
    found = headings_in_code(source_cells(src))
    assert not found, (f"{os.path.basename(src)}: a markdown heading written as a comment in a code cell "
                       f"(a missing `# %% [markdown]` line above it?): {found}")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=os.path.basename)
def test_no_markdown_heading_in_a_code_cell_of_a_notebook(nb):
    found = headings_in_code(notebook_cells(nb))
    assert not found, (f"{os.path.basename(nb)}: a markdown heading written as a comment in a code cell "
                       f"(rebuild it from its source after fixing the source): {found}")


# A learner reads technique, not plumbing (issue 22): a cell proves its claims through a named check from
# disttutor/checks/claims/chNN.py (one line, a printed verdict), not through a stack of asserts, and carries no
# lint residue. Two bare asserts in a cell are still plain reading; three or more are a check to write.
MAX_BARE_ASSERTS = 2
ASSERT_LINE = re.compile(r"^\s*assert ", re.MULTILINE)


def plumbing_in_code(cells: list[tuple[str, str]]) -> list[str]:
    """``cell N: ...`` for every code cell with more than MAX_BARE_ASSERTS asserts or a ``# noqa`` comment."""
    found = []
    for i, (kind, src) in enumerate(cells):
        if kind != "code":
            continue
        n = len(ASSERT_LINE.findall(src))
        if n > MAX_BARE_ASSERTS:
            found.append(f"cell {i}: {n} asserts (fold them into a check_... in disttutor/checks/claims/)")
        if "# noqa" in src:
            found.append(f"cell {i}: a '# noqa' comment (nothing lints chapter cells; move the import up)")
    return found


def test_the_plumbing_detector_finds_an_assert_stack_and_lint_residue():
    cells = [("code", "x = 1\nassert x\nassert x > 0\n  assert x < 2\n"), ("markdown", "assert a\nassert b\nassert c"),
             ("code", "import os  # noqa: E402\n"), ("code", "assert ok\nprint(check_thing(ok))\n")]
    assert plumbing_in_code(cells) == ["cell 0: 3 asserts (fold them into a check_... in disttutor/checks/claims/)",
                                       "cell 2: a '# noqa' comment (nothing lints chapter cells; move the import up)"]


@pytest.mark.parametrize("src", SOURCES, ids=os.path.basename)
def test_no_assert_stack_or_lint_residue_in_a_chapter_cell(src):
    assert plumbing_in_code(source_cells(src)) == []
