"""Build chapters from their sources and execute them, so they are committed *with* outputs.

Each chapter's source is ``chapters/src/NN_topic.py`` in the "percent" format
(readable by jupytext too)::

    # %% [markdown]
    # # A title
    # Some *markdown*.

    # %%
    import disttutor

    # %% tags=["nbval-check-output"]
    print(result.table())

This script turns it into ``chapters/NN_topic.ipynb`` and executes it top to
bottom in a fresh kernel of the current environment (fixed seeds,
``OMP_NUM_THREADS=1``), then strips volatile metadata. nbval compares
nothing on a stripped notebook, so this is how every chapter's committed
outputs are made. ``tests/test_notebooks.py`` checks that every committed
notebook matches its source and carries outputs.

    python3 course.py execute                      # all chapters
    python3 course.py execute chapters/src/02_process_groups_collectives.py
    python scripts/build_notebooks.py chapters/src/04_ddp.py   # this script, in the current environment
    python scripts/build_notebooks.py --metadata-only          # cell metadata only (tags, nbgrader), no run
    python scripts/build_notebooks.py --glossary-only          # the glossary, ch0 errata index and problem cards re-rendered, no run
    python scripts/build_notebooks.py --markdown-only NN.py    # markdown cells only, no run (code unchanged)
"""
from __future__ import annotations

import glob
import json
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CELL_TIMEOUT_S = 600
# A markdown cell may carry a stable id (``# %% [markdown] id="md-04-07"``): the notebook cell's id, and
# the key of its translation (chapters/zh/src/, scripts/translate.py), so it survives cells added above it.
_MARK = re.compile(r'^# %%(?P<md> \[markdown\])?(?: id="(?P<id>[A-Za-z0-9-]+)")?(?: tags=(?P<tags>\[.*\]))?\s*$')


def parse(text: str) -> list[dict]:
    """Percent-format source -> list of {"type", "source", "tags", "id"} (id: None unless the source gives one)."""
    cells: list[dict] = []
    for line in text.splitlines():
        m = _MARK.match(line)
        if m:
            cells.append({"type": "markdown" if m.group("md") else "code", "lines": [], "id": m.group("id"),
                          "tags": json.loads(m.group("tags")) if m.group("tags") else []})
        elif cells:
            cells[-1]["lines"].append(line)
    out = []
    for c in cells:
        lines = c["lines"]
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if c["type"] == "markdown":
            lines = [ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in lines]
        out.append({"type": c["type"], "source": "\n".join(lines), "tags": c["tags"], "id": c["id"]})
    return out


def notebook_path(src: str) -> str:
    return os.path.join(ROOT, "chapters", os.path.basename(src)[:-3] + ".ipynb")


def build(src: str):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, c in enumerate(parse(open(src).read())):
        cell = (nbformat.v4.new_markdown_cell if c["type"] == "markdown" else nbformat.v4.new_code_cell)(c["source"])
        cell.metadata.update(cell_metadata(c))
        # stable ids: rebuilding changes no line that did not change; a markdown cell's own id survives
        # cells inserted above it (its translation is keyed by it)
        cell["id"] = c["id"] or f"cell-{i:03d}"
        nb.cells.append(cell)
    return nb


_STUB = re.compile(r'NotImplementedError\(\s*"Exercise (\d+\.\d+):')


def _checker_calls() -> dict[str, str]:
    """``{checker function name: exercise id}`` from the one exercise registry."""
    sys.path.insert(0, ROOT)
    from disttutor.checks.registry import EXERCISES

    return {e.checker.split(":")[1]: e.id for e in EXERCISES}


def _broken_programs() -> dict[str, str]:
    """``{function name: exercise id}`` of the "fix the bug" exercises: their cell holds a broken program."""
    sys.path.insert(0, ROOT)
    from disttutor.checks.registry import EXERCISES

    return {e.stub: e.id for e in EXERCISES if e.broken}


def cell_metadata(c: dict) -> dict:
    """What a cell's metadata says, derived from its source: its tags, and nbgrader's marks.

    nbgrader's conventions (schema 3), so a course that uses nbgrader takes the exercises as they
    are (and ``disttutor grade`` finds the learner's cell by its ``grade_id``): the cell with an
    exercise's stub (or, for a "fix the bug" exercise, its broken program) is the learner's *solution* cell, ``grade_id: "exercise-N.M"``; the cell that
    calls the exercise's checker is *read-only* (``locked``). Neither is an nbgrader *grade* cell:
    the checker cells print a result instead of raising, so that a chapter runs top to bottom
    before the learner has written anything (``disttutor grade`` does the grading).
    """
    meta: dict = {"tags": list(c["tags"])} if c["tags"] else {}
    if "deeper" in c["tags"] or "proof" in c["tags"]:
        # folded material, or a proof cell (a check of a claim, one printed line): JupyterLab shows
        # the cell's input collapsed, the web edition behind a toggle; nbval still runs it
        meta["jupyter"] = {"source_hidden": True}
    if c["type"] != "code":
        return meta
    stub = _STUB.search(c["source"])
    stub_id = stub.group(1) if stub else next(  # or the cell that defines a "fix the bug" exercise's program
        (ex for fn, ex in _broken_programs().items() if re.search(rf"^def {fn}\(", c["source"], re.M)), None)
    called = [ex for fn, ex in _checker_calls().items() if re.search(rf"\b{fn}\(", c["source"])]
    if stub_id:
        meta["nbgrader"] = {"grade": False, "grade_id": f"exercise-{stub_id}", "locked": False,
                            "schema_version": 3, "solution": True}
    elif called:
        meta["nbgrader"] = {"grade": False, "grade_id": f"check-{called[0]}", "locked": True,
                            "schema_version": 3, "solution": False}
    return meta


def _set_metadata(nb, want: list[dict]) -> None:
    """Each cell's tags, nbgrader marks and collapsed state as its source implies (nothing else touched)."""
    for cell, c in zip(nb.cells, want):
        for key in ("tags", "nbgrader", "jupyter"):
            cell.metadata.pop(key, None)
        cell.metadata.update(cell_metadata(c))


def refresh_markdown(src: str) -> None:
    """Take the source's markdown cells into a committed notebook without executing it again.

    Only when every code cell is unchanged (same sources, same order): markdown produces no output,
    so the committed outputs are still exactly what this code printed. Anything else is refused.
    """
    import nbformat

    path = notebook_path(src)
    nb = nbformat.read(path, as_version=4)
    want = parse(open(src).read())
    code = lambda cells: [c for c in cells if c[0] == "code"]  # noqa: E731
    have = [(c.cell_type, c.source) for c in nb.cells]
    new = [(c["type"], c["source"]) for c in want]
    if code(have) != code(new):
        raise SystemExit(f"{os.path.relpath(path, ROOT)}: a code cell changed: execute it instead")
    cells, old_code = [], iter([c for c in nb.cells if c.cell_type == "code"])
    for i, c in enumerate(want):
        cell = next(old_code) if c["type"] == "code" else nbformat.v4.new_markdown_cell(c["source"])
        cell["id"] = c["id"] or f"cell-{i:03d}"  # the ids build() gives
        cells.append(cell)
    nb.cells = cells
    _set_metadata(nb, want)
    nbformat.write(nb, path)


def refresh_metadata(src: str) -> None:
    """Give a committed notebook the metadata its source implies, without executing it again."""
    import nbformat

    path = notebook_path(src)
    nb = nbformat.read(path, as_version=4)
    want = parse(open(src).read())
    if [(c.cell_type, c.source) for c in nb.cells] != [(c["type"], c["source"]) for c in want]:
        raise SystemExit(f"{os.path.relpath(path, ROOT)} is stale: execute it instead of refreshing metadata")
    _set_metadata(nb, want)
    nbformat.write(nb, path)


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
PROGRESS_MODELS = {"FloatProgressModel", "IntProgressModel"}
PLACEHOLDER = ("[interactive widget: run this cell (and the cells above it) in JupyterLab to use it; "
               "the figure above shows its default output]")


def _text(html: str) -> str:
    import html as html_lib

    return html_lib.unescape(re.sub(r"<[^>]+>", "", html or "")).strip()


def _progress_text(state: dict, box: dict) -> str | None:
    """A tqdm bar (HBox of HTML, progress, HTML) as the line tqdm prints in a terminal."""
    kids = [state.get(c.replace("IPY_MODEL_", ""), {}).get("state", {}) for c in box.get("children", [])]
    bars = [k for k in kids if k.get("_model_name") in PROGRESS_MODELS]
    if len(kids) != 3 or len(bars) != 1:
        return None
    left, bar, right = kids
    total = bar.get("max") or 1
    filled = int(round(10 * min(1.0, (bar.get("value") or 0) / total)))
    return f"{_text(left.get('value'))}|{'█' * filled}{' ' * (10 - filled)}| {_text(right.get('value'))}"


def settle_widgets(nb) -> dict[str, int]:
    """Make widget outputs readable in a notebook that is opened, not run.

    nbclient stores the widgets' state (``store_widget_state``), so JupyterLab and nbviewer draw
    them from it instead of "Error displaying widget: model not found". Closed widgets keep their
    last state there, so a tqdm bar shows where it ended. What a renderer without widget support
    (GitHub, a terminal) shows is the output's ``text/plain``: it was the widget's repr at display
    time (``VBox(children=...`` or a bar at 0%), so it becomes the bar's final line, or a
    placeholder saying to run the cell. Model ids are renumbered so rebuilding gives stable diffs.
    """
    widgets = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {})
    state = widgets.get("state", {})
    counts = {"progress": 0, "interactive": 0, "missing": 0}
    for cell in nb.cells:
        outs = []
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                outs.append(out)
                continue
            model = state.get(view.get("model_id"))
            if model is None:  # no state to draw from: keep the text, never a dangling reference
                counts["missing"] += 1
                out["data"] = {"text/plain": PLACEHOLDER}
                outs.append(out)
                continue
            line = _progress_text(state, model["state"]) if model["model_name"] == "HBoxModel" else None
            out["data"]["text/plain"] = line if line is not None else PLACEHOLDER
            counts["progress" if line is not None else "interactive"] += 1
            outs.append(out)
        if "outputs" in cell:
            cell["outputs"] = outs
    if state:
        text = json.dumps(nb, sort_keys=False)
        for i, old in enumerate(sorted(state, key=text.index)):  # number in order of appearance
            text = text.replace(old, f"{i:032x}")
        import nbformat

        renumbered = nbformat.from_dict(json.loads(text))
        nb.clear()
        nb.update(renumbered)
    return counts


def clean(nb) -> None:
    """Drop per-run noise (timestamps) so diffs show real changes; keep the widget state."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        for out in cell.get("outputs", []):
            out.get("metadata", {}).pop("execution", None)


HEADER_TAG = "chapter-header"  # the cell that calls disttutor.course.chapters.header(N)


def record_build_time(src: str, seconds: float) -> dict:
    """Store how long the chapter took (chapters/build_times.json) for its header card."""
    import platform

    import torch

    stem = os.path.basename(src)[:-3]
    path = os.path.join(ROOT, "chapters", "build_times.json")
    try:
        times = json.load(open(path))
    except (OSError, ValueError):
        times = {}
    times[stem] = {"seconds": round(seconds, 1), "cores": os.cpu_count(),
                   "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
                   "torch": torch.__version__.split("+")[0], "python": platform.python_version()}
    with open(path, "w") as f:
        json.dump(dict(sorted(times.items())), f, indent=1)
        f.write("\n")
    return times[stem]


def refresh_header(nb, number: int, build: dict) -> None:
    """Re-render the header cell's output with the time just measured (the cell ran before the
    measurement existed, so its output still shows the previous build's time)."""
    sys.path.insert(0, ROOT)
    from disttutor.course.chapters import header_markdown

    for cell in nb.cells:
        if HEADER_TAG in cell.metadata.get("tags", []):
            for out in cell.get("outputs", []):
                if "text/markdown" in out.get("data", {}):
                    out["data"]["text/markdown"] = header_markdown(number, build)


def refresh_glossary(nb, number: int) -> None:
    """Re-render the last cell's glossary from glossary.yaml as it is now (a term added to the glossary
    changes no code, so it needs no rerun), and chapter 0's errata index from the chapters' correction
    boxes as they are now (a box edited in another chapter changes no code of chapter 0)."""
    sys.path.insert(0, ROOT)
    from disttutor.course.chapters import GLOSSARY_CALL, glossary_markdown
    from disttutor.course.errata import ERRATA_CALL, errata_markdown

    for cell in nb.cells:
        src = cell.source.strip() if cell.cell_type == "code" else ""
        md = (glossary_markdown(number, lang="en") if src.endswith(GLOSSARY_CALL.format(number)) else
              errata_markdown(lang="en") if src.endswith(ERRATA_CALL) else None)
        if md is not None:
            for out in cell.get("outputs", []):
                if "text/markdown" in out.get("data", {}):
                    out["data"]["text/markdown"] = md
    refresh_problem_cards(nb)
    refresh_exercise_cards(nb)


_EXERCISE_CALL = re.compile(r'^(?P<fn>card|hint)\("(?P<id>\d+\.\d+)"\)$')


def refresh_exercise_cards(nb) -> None:
    """Re-render each exercise's card (its title, difficulty, minutes, hint count) and the first hint its
    ``hint("N.M")`` cell shows when run from the top: both are registry data, so an edited hint needs no rerun."""
    sys.path.insert(0, ROOT)
    from disttutor.checks.registry import exercise
    from disttutor.course.shape import card

    for cell in nb.cells:
        m = _EXERCISE_CALL.match(cell.source.strip()) if cell.cell_type == "code" else None
        if m is None:
            continue
        e = exercise(m["id"])
        text = (card(e.id, lang="en") if m["fn"] == "card" else
                f"Exercise {e.id}, hint 1/{len(e.hints)}: {e.hints[0]}")
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "text/markdown" in data:
                data["text/markdown"] = str(text)
            if "text/plain" in data:
                data["text/plain"] = str(text)


def refresh_problem_cards(nb) -> None:
    """Re-render each worked problem's and puzzle's card from its stored inputs (the problem, the learner's number, the
    run's numbers the cell passed): a problem's wording is data (problem_sets/), so a fix to it needs no rerun
    and the run's numbers stay the ones this build measured."""
    sys.path.insert(0, ROOT)
    from disttutor.course import problems, puzzles

    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = out.get("data", {})
            for mod, again in ((problems, problems.problem_in), (puzzles, puzzles.puzzle_in)):
                if mod.MIME in data:
                    data["text/markdown"] = data["text/plain"] = again(data[mod.MIME], "en")


def refresh_glossary_only(src: str) -> None:
    """The glossary output of a committed notebook re-rendered, without executing it (its header keeps
    the time measured by the build that made its outputs)."""
    import nbformat

    path = notebook_path(src)
    nb = nbformat.read(path, as_version=4)
    refresh_glossary(nb, int(os.path.basename(src)[:2]))
    nbformat.write(nb, path)


def execute(src: str) -> float:
    import nbformat
    from nbclient import NotebookClient

    nb = build(src)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("PYTHONHASHSEED", "0")
    t0 = time.perf_counter()
    # store_widget_state: the widgets' state goes into the notebook (see settle_widgets).
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": os.path.join(ROOT, "chapters")}}).execute()
    seconds = time.perf_counter() - t0
    refresh_header(nb, int(os.path.basename(src)[:2]), record_build_time(src, seconds))
    refresh_glossary(nb, int(os.path.basename(src)[:2]))
    settle_widgets(nb)
    clean(nb)
    nbformat.write(nb, notebook_path(src))
    return seconds


def main(paths: list[str]) -> int:
    metadata_only = "--metadata-only" in paths
    glossary_only = "--glossary-only" in paths
    markdown_only = "--markdown-only" in paths
    paths = [p for p in paths if p not in ("--metadata-only", "--glossary-only", "--markdown-only")]
    srcs = []
    for p in paths or sorted(glob.glob(os.path.join(ROOT, "chapters", "src", "[0-9][0-9]_*.py"))):
        if p.endswith(".ipynb"):  # accept the notebook's path too
            p = os.path.join(ROOT, "chapters", "src", os.path.basename(p)[:-6] + ".py")
        srcs.append(p)
    if glossary_only:
        for s in srcs:
            refresh_glossary_only(s)
        print(f"glossary outputs refreshed in {len(srcs)} notebook(s)")
        return 0
    if markdown_only:
        for s in srcs:
            refresh_markdown(s)
        print(f"markdown cells (and metadata) refreshed in {len(srcs)} notebook(s), nothing re-run")
        return 0
    if metadata_only:
        for s in srcs:
            refresh_metadata(s)
        print(f"metadata refreshed in {len(srcs)} notebook(s)")
        return 0
    for s in srcs:
        print(f"executing {os.path.relpath(s, ROOT)} ...", flush=True)
        print(f"  -> {os.path.relpath(notebook_path(s), ROOT)} in {execute(s):.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
