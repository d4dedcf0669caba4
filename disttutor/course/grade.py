"""``disttutor grade PATH...``: run every exercise's checker on a class's notebooks.

A teacher collects the learners' work: one folder per learner, nbgrader's
``submitted/<student>/<assignment>/``, or a flat folder of ``<name>_NN_*.ipynb`` files
(:mod:`disttutor.course.roster` says who is who). For each learner and each exercise of
:data:`disttutor.checks.EXERCISES` the grader finds the learner's code in any of their notebooks
-- the cell nbgrader marks with ``grade_id: "exercise-N.M"`` if the course uses nbgrader, else the
last code cell that defines the exercise's function/class -- and runs the exercise's checker on it
in a **separate process** (``python -m disttutor.course.grade --one``) bounded by ``--timeout``: a
learner's endless loop or hung rank is killed with its whole process tree and the batch goes on
(``--jobs`` checks at a time). That process runs in a **sandbox** (:mod:`disttutor.course.sandbox`:
bubblewrap; no ``solutions/``, no reference of the exercise, no teacher's files, no network but
loopback; limits on memory, processes, CPU time and output) and under the guard that refuses calls
of the answers (:mod:`disttutor.checks.guard`); :mod:`disttutor.course.isolated` reads back what
happened. Without bubblewrap the grader stops, unless told ``--unsafe-no-sandbox``. An untouched
stub, or code that imports the exercise's reference, needs no process: it is reported as the
checker would. Prints a table, one row per learner and one column per exercise (pass, or FAIL with
the checker's first message), then the graded exercises with their kind (build, fix, puzzle),
difficulty and minutes, and writes the table as CSV.
"""
from __future__ import annotations

import argparse
import ast
import csv
import json
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from disttutor.checks.registry import EXERCISES, Exercise, exercise
from disttutor.course.roster import Learner, chapter_of, find
from disttutor.course.sandbox import SandboxUnavailable, unavailable

MARKER = "DISTTUTOR_GRADE_RUN"  # set on every process the grader starts: how it counts what is left
KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)


@dataclass(frozen=True)
class Outcome:
    learner: str
    exercise: str
    status: str       # "pass", "fail", "timeout", "missing"
    message: str = ""
    seconds: float = 0.0
    notebook: str = ""   # where the learner's code for this exercise was found


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


def _compile_problem(src: str | None) -> str:
    try:
        compile(src or "", "learner code", "exec")
    except SyntaxError as e:
        return f"the code does not compile: {e.msg} (line {e.lineno})"
    return ""


def check_one(exercise_id: str, source_file: str) -> dict:
    """Run one checker here; the grader calls this in a child process (``--one``)."""
    with open(source_file) as f:
        src = f.read()
    problem = _compile_problem(src)
    if problem:
        return {"passed": False, "message": problem}
    ex = exercise(exercise_id)
    res = ex.check_function()(src)
    return {"passed": bool(res.passed), "message": "" if res.passed else (res.problems or ["not passed"])[0]}


WARNING = ("\n" + "!" * 78 + "\n!! disttutor grade --unsafe-no-sandbox: {why}.\n!! The learners' code runs WITH "
           "YOUR RIGHTS: it can read solutions/, other learners'\n!! notebooks and your files, write where you can, "
           "and use the network.\n" + "!" * 78 + "\n")


def _read(path: str) -> tuple[dict | None, str]:
    try:
        with open(path) as f:
            return json.load(f), ""
    except (OSError, ValueError) as e:
        return None, f"cannot read {os.path.basename(path)}: {e}"


def _pick(learner: Learner, books: dict, ex: Exercise) -> tuple[str, str | None, str]:
    """(notebook, code or None, problem) of ``ex`` for one learner, from all of their notebooks.

    Found in several (a "-Copy1", last week's file): the one whose file name says the exercise's
    chapter, then the shortest name (the original of a copy); the CSV says which one was graded.
    """
    found = [(nb, code) for nb in learner.notebooks if books[nb][0] is not None
             for code in [extract(books[nb][0], ex)] if code is not None]
    if found:
        found.sort(key=lambda t: (chapter_of(t[0]) != ex.chapter, len(os.path.basename(t[0])), t[0]))
        return found[0][0], found[0][1], ""
    unreadable = [nb for nb in learner.notebooks if books[nb][0] is None and chapter_of(nb) in (None, ex.chapter)]
    return (unreadable[0], None, books[unreadable[0]][1]) if unreadable else ("", None, "")


def grade(paths: list[str], exercises: list[str] | None = None, timeout: float = 600.0,
          progress=None, jobs: int = 1, unsafe_no_sandbox: bool = False) -> tuple[list[Outcome], list[int]]:
    """Grade every learner; returns the outcomes (learner by learner, in exercise order) and the
    processes left behind (should be []). Each check runs sandboxed: where that is impossible this
    raises :class:`SandboxUnavailable`, unless ``unsafe_no_sandbox`` (then a warning on stderr)."""
    from disttutor.checks.adapter import stub_problem
    from disttutor.checks.guard import static_problem
    from disttutor.contract.procs import kill_tree
    from disttutor.course.isolated import leftover_processes, run_one

    chosen = [exercise(e) for e in exercises] if exercises else list(EXERCISES)
    learners = find(paths)  # before any check: an ambiguous class is an error, not a wrong table
    why = unavailable()
    if why and not unsafe_no_sandbox:
        raise SandboxUnavailable(f"cannot sandbox the learners' code: {why}. Grading without a sandbox lets "
                                 "it read solutions/ and your files: pass --unsafe-no-sandbox to do it anyway")
    unsafe = bool(why) or unsafe_no_sandbox
    if unsafe:
        print(WARNING.format(why=why or "asked for"), file=sys.stderr, flush=True)
    run_id = uuid.uuid4().hex
    env = {**os.environ, MARKER: run_id}
    results: dict[tuple[str, str], Outcome] = {}
    todo = []
    for lr in learners:
        books = {nb: _read(nb) for nb in lr.notebooks}  # one learner at a time: notebooks can be MBs
        for ex in chosen:
            nb, src, problem = _pick(lr, books, ex)
            stub = stub_problem(src) if src is not None else None
            if stub and not stub.startswith(f"still a stub -- Exercise {ex.id}:"):
                stub = None  # another exercise's stub in the same cell: this one is for its checker
            problem = problem or stub or _compile_problem(src) or static_problem(src or "", ex.id)  # no process
            if src is None or problem:
                results[lr.name, ex.id] = Outcome(lr.name, ex.id, "fail" if problem else "missing", problem, 0.0, nb)
            else:
                todo.append((lr, ex, nb, src))
    running: set = set()

    def one(lr: Learner, ex: Exercise, nb: str, src: str) -> Outcome:
        t0 = time.perf_counter()
        status, msg = run_one(ex, src, timeout, env, running, unsafe=unsafe)
        return Outcome(lr.name, ex.id, status, msg, time.perf_counter() - t0, nb)

    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="disttutor-grade")
    try:
        for fut in as_completed([pool.submit(one, *t) for t in todo]):
            r = fut.result()
            results[r.learner, r.exercise] = r
            if progress:
                progress(r)
    except BaseException:  # Ctrl-C: no check may go on running on its own
        pool.shutdown(wait=False, cancel_futures=True)
        kill_tree([p.pid for p in list(running)])
        raise
    pool.shutdown(wait=True)
    left = leftover_processes(MARKER, run_id)
    if left:  # should never happen; never leave them running either
        kill_tree(left)
    return [results[lr.name, ex.id] for lr in learners for ex in chosen], left


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


def legend(results: list[Outcome]) -> str:
    """The table's exercises, one line each: id, kind (build, fix, puzzle), difficulty, minutes, title."""
    ids = [e for e in dict.fromkeys(r.exercise for r in results)
           if any(r.exercise == e and r.status != "missing" for r in results)]
    return "\n".join(f"{e.id:<5} {e.kind:<6} {e.difficulty:<7} {e.minutes:>3} min  {e.title}"
                     for e in map(exercise, ids))


def write_csv(results: list[Outcome], path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["learner", "exercise", "status", "message", "seconds", "notebook"])
        for r in results:
            w.writerow([r.learner, r.exercise, r.status, r.message, f"{r.seconds:.1f}", r.notebook])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="disttutor grade", description=(
        "Run every exercise's checker on learners' notebooks: prints a table, one row per learner and one "
        "column per exercise, and writes it as CSV. Each check runs in its own process, bounded in time."),
        epilog=("Layouts: one folder per learner (notebooks at any depth inside it), nbgrader's "
                "submitted/<student>/<assignment>/, or a flat folder of <name>_NN_*.ipynb files. "
                "Example: disttutor grade class/ --jobs 2 --csv class-grades.csv"))
    p.add_argument("paths", nargs="+", help="a class folder, learners' folders, or notebooks (.ipynb)")
    p.add_argument("--exercises", default="", help="comma-separated ids (default: all), e.g. 4.1,4.2")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds per learner and exercise (2.1 runs 3 jobs; each checker job stops itself after "
                        "300 s, a hung rank after 10 s: this only catches what they cannot, e.g. an endless loop)")
    p.add_argument("--jobs", type=int, default=1,
                   help="checks at a time (default 1; a checker on ranks uses up to 4 processes, so about "
                        "one job per 4 cores keeps its own timeouts honest)")
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="grade even where bubblewrap cannot sandbox the checks (macOS, Windows): the learners' "
                        "code then runs with your rights")
    p.add_argument("--csv", default="grades.csv",
                   help="where to write the CSV (default: grades.csv in the current folder; the last line says "
                        "where it went)")
    a = p.parse_args(argv)
    if not a.timeout > 0:
        p.error("--timeout must be > 0")
    if a.jobs < 1:
        p.error("--jobs must be >= 1")
    try:
        ids = [e.strip() for e in a.exercises.split(",") if e.strip()]
        for e in ids:
            exercise(e)
        t0 = time.perf_counter()
        results, left = grade(a.paths, ids or None, a.timeout, jobs=a.jobs, unsafe_no_sandbox=a.unsafe_no_sandbox,
                              progress=lambda r: print(f"  {r.learner} {r.exercise}: {r.status} ({r.seconds:.0f}s)",
                                                       file=sys.stderr, flush=True))
    except (FileNotFoundError, ValueError) as e:  # RosterError is a ValueError
        print(f"disttutor grade: error: {e}", file=sys.stderr)
        return 2
    print(table(results))
    if legend(results):
        print(f"\n{legend(results)}")
    write_csv(results, a.csv)
    print(f"\n{len({r.learner for r in results})} learners graded in {time.perf_counter() - t0:.0f}s; "
          f"CSV: {os.path.abspath(a.csv)}; processes left: {len(left)}")
    return 0


def _one(exercise_id: str, source_file: str) -> None:
    """The child's side of ``--one``: the check's own user, the nonce from stdin, the verdict line."""
    from disttutor.course.sandbox import ENV_UID, become

    become(os.environ.pop(ENV_UID, None))  # before the learner's code is read
    nonce = sys.stdin.readline().strip()  # the verdict's line starts with it: a learner's print() is no verdict
    sys.stdin.close()
    verdict = json.dumps(check_one(exercise_id, source_file))
    print(nonce + verdict, flush=True)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--one":
    _one(sys.argv[2], sys.argv[3])
elif __name__ == "__main__":
    sys.exit(main())
