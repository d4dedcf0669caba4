"""Quote the *installed* torch source, so a notebook shows what your PyTorch really does.

Introduced in chapter 3 (``nn.DataParallel``'s forward, its threads, its
broadcast and reduce); any chapter that explains torch by its code uses it.
A quote is looked up by the lines it must contain, not by line numbers, and a
missing line raises: when a torch release changes the code a chapter
describes, the notebook fails loudly instead of quoting something else.
"""
from __future__ import annotations

import inspect
import os
from typing import Callable

import torch

__all__ = ["source_lines", "show_code", "teach_regions", "Quote", "Deeper", "deeper"]


def source_lines(obj: Callable | type, *needles: str, context: int = 0) -> list[str]:
    """Lines of ``obj``'s installed source that contain any of ``needles`` (``file:line: code``).

    Raises if a needle is missing, so a notebook that quotes torch fails loudly
    when a torch release changes the code it describes.
    """
    lines, start = inspect.getsourcelines(obj)
    where = os.path.relpath(inspect.getsourcefile(obj) or "?", os.path.dirname(os.path.dirname(torch.__file__)))
    hits: list[int] = []
    for needle in needles:
        found = [i for i, ln in enumerate(lines) if needle in ln]
        if not found:
            raise LookupError(f"{needle!r} not found in the source of {getattr(obj, '__qualname__', obj)}")
        hits += found
    keep = sorted({j for i in hits for j in range(max(0, i - context), min(len(lines), i + context + 1))})
    return [f"{where}:{start + i}: {lines[i].rstrip()}" for i in keep]


# ---------------------------------------------------------------------------------------------
# The course's own code, in view: a chapter shows the lines of an installed program that teach
# the technique, read from the file the ranks run (never retyped), so text and code cannot drift.
# A program marks a region with two comment lines:
#     # [teach NAME]
#     ...the lines a learner should read...
#     # [/teach NAME]
# Markers are removed from the quote; a missing region raises, so a chapter fails loudly when a
# program is changed under it.
_OPEN, _CLOSE = "# [teach {}]", "# [/teach {}]"


class Quote:
    """Lines of an installed file; renders as a highlighted code block with where it comes from."""

    def __init__(self, where: str, first: int, last: int, lines: list[str]):
        self.where, self.first, self.last, self.lines = where, first, last, lines

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def __repr__(self) -> str:          # plain text (tests, nbval, a terminal)
        return f"# {self.caption()}\n{self.text}"

    def caption(self) -> str:
        return f"{self.where}, lines {self.first}-{self.last} (the installed source)"

    def _repr_markdown_(self) -> str:   # JupyterLab and the web edition
        return f"`{self.caption()}`\n\n```python\n{self.text}\n```"


def _module_file(module: str) -> tuple[str, str]:
    """(file path, path shown to the learner) of a module, found without importing it.

    Not importing matters: the kernel must not import a rank-side program (the layer rules), and a
    plain script would run its top level.
    """
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise LookupError(f"no Python source for module {module!r}")
    return spec.origin, module.replace(".", "/") + ".py"


def teach_regions(module: str) -> list[str]:
    """Names of the ``# [teach NAME]`` regions of a module, in file order."""
    path, _ = _module_file(module)
    names = []
    for ln in open(path, encoding="utf-8"):
        s = ln.strip()
        if s.startswith("# [teach ") and s.endswith("]"):
            names.append(s[len("# [teach "):-1])
    return names


def show_code(module: str, region: str | None = None) -> Quote:
    """The ``# [teach region]`` lines of ``module`` (all of the file without a region), dedented.

    ``module`` is a dotted name (``"disttutor.programs.ddp"``, ``"disttutor.plain.ddp"``). Display
    the returned :class:`Quote` as a cell's last expression.
    """
    import textwrap

    path, shown = _module_file(module)
    lines = open(path, encoding="utf-8").read().splitlines()
    if region is None:
        return Quote(shown, 1, len(lines), lines)
    opener, closer = _OPEN.format(region), _CLOSE.format(region)
    starts = [i for i, ln in enumerate(lines) if ln.strip() == opener]
    ends = [i for i, ln in enumerate(lines) if ln.strip() == closer]
    if len(starts) != 1 or len(ends) != 1 or ends[0] <= starts[0]:
        have = ", ".join(teach_regions(module)) or "none"
        raise LookupError(f"{shown}: no single region {opener!r} ... {closer!r} (regions: {have})")
    body = [ln for ln in lines[starts[0] + 1:ends[0]] if not ln.strip().startswith(("# [teach ", "# [/teach "))]
    return Quote(shown, starts[0] + 2, ends[0], textwrap.dedent("\n".join(body)).splitlines())


# ---------------------------------------------------------------------------------------------
# "Deeper" material (source fragments, forensics) stays computed from the installed code but folded:
# a collapsed <details> block in JupyterLab and the web edition, plain text in a terminal. A chapter
# tags such a cell "deeper" (the build then hides its input too).
class Deeper:
    """Lines shown folded under a "Deeper: ..." summary."""

    def __init__(self, title: str, lines: list[str]):
        self.title, self.lines = title, list(lines)

    def __repr__(self) -> str:
        return f"Deeper: {self.title}\n" + "\n".join(self.lines)

    def _repr_markdown_(self) -> str:
        import html

        body = html.escape("\n".join(self.lines))
        return (f"<details><summary><b>Deeper:</b> {html.escape(self.title)}</summary>\n\n"
                f"<pre><code>{body}</code></pre>\n\n</details>")


def deeper(title: str, *groups: list[str]) -> Deeper:
    """Fold lines (e.g. from :func:`source_lines`, or a table's rows) under ``Deeper: title``."""
    return Deeper(title, [ln for g in groups for ln in g])
