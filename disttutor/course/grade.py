"""``disttutor grade PATH...``: run every exercise's checker on a class's notebooks.

A teacher collects the learners' notebooks (``alice.ipynb``, ...; a folder or single files).
For each notebook and each exercise of :data:`disttutor.checks.EXERCISES` the grader finds
the learner's code -- the cell nbgrader marks with ``grade_id: "exercise-N.M"`` if the
course uses nbgrader, else the last code cell that defines the exercise's function/class --
and runs the exercise's checker on it in a **separate process** (``python -m
disttutor.course.grade --one``) bounded by ``--timeout``: a learner's endless loop or hung rank is
killed with its whole process tree and the batch goes on. Prints a table learner x exercise
(pass, or FAIL with the checker's first message) and writes the same as CSV.
"""
from __future__ import annotations

import argparse
import ast
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass

from disttutor.checks.registry import EXERCISES, Exercise, exercise

MARKER = "DISTTUTOR_GRADE_RUN"  # set on every process the grader starts: how it counts what is left
KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)


@dataclass(frozen=True)
class Outcome:
    learner: str
    exercise: str
    status: str       # "pass", "fail", "timeout", "missing"
    message: str = ""
    seconds: float = 0.0


def _defines(tree: ast.Module, name: str) -> bool:
    return any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name for n in tree.body)


def _code(cell_source: str | list[str]) -> str:
    src = "".join(cell_source) if isinstance(cell_source, list) else cell_source
    return "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!")))  # IPython magics


def extract(notebook: dict, ex: Exercise) -> str | None:
    """The learner's code for ``ex`` in a notebook (as JSON), or None if the notebook has none.

    Only definitions, imports and assignments are kept: a checker call left in the same cell
    must not run again on every rank.
    """
    cells = [c for c in notebook.get("cells", []) if c.get("cell_type") == "code"]
    for c in cells:  # nbgrader's convention first
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") in (f"exercise-{ex.id}", ex.id, ex.stub):
            return _keep_definitions(_code(c.get("source", "")))
    found = None
    for c in cells:
        src = _code(c.get("source", ""))
        try:
            if _defines(ast.parse(src), ex.stub):
                found = src
        except SyntaxError:  # a broken cell still counts if it is the one meant to define the exercise
            if f"def {ex.stub}(" in src or f"class {ex.stub}" in src:
                found = src
    return None if found is None else _keep_definitions(found)


def _keep_definitions(src: str) -> str:
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return src  # the checker run reports the syntax error with its line
    lines = src.splitlines()

    def start(n: ast.stmt) -> int:  # a decorated definition starts at its first decorator
        return min([n.lineno, *(d.lineno for d in getattr(n, "decorator_list", []))]) - 1

    return "\n".join("\n".join(lines[start(n):n.end_lineno]) for n in tree.body if isinstance(n, KEEP)) + "\n"


def check_one(exercise_id: str, source_file: str) -> dict:
    """Run one checker here; the grader calls this in a child process (``--one``)."""
    with open(source_file) as f:
        src = f.read()
    try:
        compile(src, "learner code", "exec")
    except SyntaxError as e:
        return {"passed": False, "message": f"the code does not compile: {e.msg} (line {e.lineno})"}
    ex = exercise(exercise_id)
    res = ex.check_function()(src)
    return {"passed": bool(res.passed), "message": "" if res.passed else (res.problems or ["not passed"])[0]}


def _run_child(ex: Exercise, src: str, timeout: float, env: dict) -> tuple[str, str]:
    from disttutor.contract.procs import PRCTL, kill_tree, tie_to_parent

    with tempfile.TemporaryDirectory(prefix="disttutor-grade-") as d:
        path = os.path.join(d, f"ex{ex.id.replace('.', '_')}.py")
        with open(path, "w") as f:
            f.write(src)
        p = subprocess.Popen([sys.executable, "-m", "disttutor.course.grade", "--one", ex.id, path], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                             start_new_session=True, preexec_fn=tie_to_parent if PRCTL else None)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree([p.pid])
            p.communicate()
            return "timeout", f"no answer within {timeout:g}s (an endless loop, or ranks waiting on each other)"
        except BaseException:
            kill_tree([p.pid])
            raise
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        last = (err.strip().splitlines() or ["(no output)"])[-1]
        return "fail", f"the checker could not run it: {last[:200]}"
    r = json.loads(lines[-1])
    return ("pass", "") if r["passed"] else ("fail", r["message"])


def leftover_processes(run_id: str) -> list[int]:
    """Processes still alive that the grader started (found by the marker in their environment)."""
    import psutil

    left = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER) == run_id:
                left.append(proc.pid)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
    return left


def notebooks(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".ipynb"))
        elif p.endswith(".ipynb") and os.path.isfile(p):
            out.append(p)
        else:
            raise FileNotFoundError(f"{p!r} is not a notebook (.ipynb) or a folder of notebooks")
    if not out:
        raise FileNotFoundError(f"no notebooks in {', '.join(paths)}")
    return out


def grade(paths: list[str], exercises: list[str] | None = None, timeout: float = 600.0,
          progress=None) -> tuple[list[Outcome], list[int]]:
    """Grade every notebook; returns the outcomes and the processes left behind (should be [])."""
    from disttutor.contract.procs import kill_tree

    chosen = [exercise(e) for e in exercises] if exercises else list(EXERCISES)
    run_id = uuid.uuid4().hex
    env = {**os.environ, MARKER: run_id}
    results = []
    for nb_path in notebooks(paths):
        learner = os.path.splitext(os.path.basename(nb_path))[0]
        try:
            with open(nb_path) as f:
                nb = json.load(f)
        except (OSError, ValueError) as e:
            results += [Outcome(learner, ex.id, "fail", f"cannot read the notebook: {e}") for ex in chosen]
            continue
        for ex in chosen:
            src = extract(nb, ex)
            if src is None:
                results.append(Outcome(learner, ex.id, "missing"))
                continue
            t0 = time.perf_counter()
            status, msg = _run_child(ex, src, timeout, env)
            results.append(Outcome(learner, ex.id, status, msg, time.perf_counter() - t0))
            if progress:
                progress(results[-1])
    left = leftover_processes(run_id)
    if left:  # should never happen; never leave them running either
        kill_tree(left)
    return results, left


def table(results: list[Outcome], width: int = 60) -> str:
    learners = list(dict.fromkeys(r.learner for r in results))
    ids = [e for e in dict.fromkeys(r.exercise for r in results)
           if any(r.exercise == e and r.status != "missing" for r in results)]
    cell = {(r.learner, r.exercise): r for r in results}

    def show(r: Outcome | None) -> str:
        if r is None or r.status == "missing":
            return "-"
        if r.status == "pass":
            return "pass"
        text = f"{'TIMEOUT' if r.status == 'timeout' else 'FAIL'}: {r.message}"
        return text if len(text) <= width else text[:width - 3] + "..."

    rows = [["learner", *ids]] + [[n, *(show(cell.get((n, e))) for e in ids)] for n in learners]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def write_csv(results: list[Outcome], path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["learner", "exercise", "status", "message", "seconds"])
        for r in results:
            w.writerow([r.learner, r.exercise, r.status, r.message, f"{r.seconds:.1f}"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="disttutor grade", description=(
        "Run every exercise's checker on learners' notebooks (one notebook per learner): prints a table "
        "learner x exercise and writes it as CSV. Each check runs in its own process, bounded in time."))
    p.add_argument("paths", nargs="+", help="notebooks (.ipynb) or folders of them, one per learner")
    p.add_argument("--exercises", default="", help="comma-separated ids (default: all), e.g. 4.1,4.2")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds per learner and exercise (2.1 runs 3 jobs; each checker job stops itself after "
                        "300 s, a hung rank after 10 s: this only catches what they cannot, e.g. an endless loop)")
    p.add_argument("--csv", default="grades.csv", help="where to write the CSV (default: grades.csv)")
    a = p.parse_args(argv)
    if not a.timeout > 0:
        p.error("--timeout must be > 0")
    try:
        ids = [e.strip() for e in a.exercises.split(",") if e.strip()]
        for e in ids:
            exercise(e)
        t0 = time.perf_counter()
        results, left = grade(a.paths, ids or None, a.timeout,
                              progress=lambda r: print(f"  {r.learner} {r.exercise}: {r.status} ({r.seconds:.0f}s)",
                                                       file=sys.stderr, flush=True))
    except (FileNotFoundError, ValueError) as e:
        print(f"disttutor grade: error: {e}", file=sys.stderr)
        return 2
    print(table(results))
    write_csv(results, a.csv)
    print(f"\n{len({r.learner for r in results})} notebooks graded in {time.perf_counter() - t0:.0f}s; "
          f"CSV: {a.csv}; processes left: {len(left)}")
    return 0


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--one":
    print(json.dumps(check_one(sys.argv[2], sys.argv[3])), flush=True)
elif __name__ == "__main__":
    sys.exit(main())
