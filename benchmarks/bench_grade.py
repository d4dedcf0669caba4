"""How long does ``disttutor grade`` take for a class of honest learners, sandboxed or not?

Builds a class of ``--learners`` (30) folders, each with a notebook holding the course's solutions of
``--exercises`` (1.1 and 7.2: checked in the checker's own process, the common case; add 4.1 for a
check on real ranks), then grades it twice in ONE run, interleaved (sandboxed, then
``--unsafe-no-sandbox``, ``--rounds`` times), and prints each wall time, the ratio pair by pair and
the machine's load -- on a shared machine compare the pairs, not the runs::

    .venv/bin/python benchmarks/bench_grade.py                       # 30 learners, 1.1 and 7.2, --jobs 2
    .venv/bin/python benchmarks/bench_grade.py --exercises 1.1,4.1 --learners 10 --rounds 3
    .venv/bin/python benchmarks/bench_grade.py --make DIR            # only write the class (for farm-bench)

Every check must pass (an honest class): the script fails otherwise.
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_class(folder: str, learners: int, exercises: list[str]) -> None:
    import nbformat

    sys.path.insert(0, ROOT)
    from disttutor.checks.registry import exercise

    cells = [open(os.path.join(ROOT, exercise(e).solution)).read() for e in exercises]
    for i in range(learners):
        os.makedirs(os.path.join(folder, f"learner{i:02d}"))
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
        nbformat.write(nb, os.path.join(folder, f"learner{i:02d}", "00_course.ipynb"))


def grade_once(folder: str, exercises: list[str], jobs: int, unsafe: bool) -> float:
    out = os.path.join(folder + "-grades.csv")
    cmd = [sys.executable, "-m", "disttutor.course.grade", folder, "--exercises", ",".join(exercises),
           "--jobs", str(jobs), "--csv", out, *(["--unsafe-no-sandbox"] if unsafe else [])]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT}, timeout=3600)
    wall = time.perf_counter() - t0
    rows = list(csv.DictReader(open(out))) if r.returncode == 0 else []
    bad = [row for row in rows if row["status"] != "pass"]
    if r.returncode != 0 or bad or not rows:
        sys.exit(f"grading failed: {(bad[:1] or [r.stderr[-500:]])[0]}")
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--learners", type=int, default=30)
    p.add_argument("--exercises", default="1.1,7.2")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--make", metavar="DIR", help="only write the class into DIR")
    a = p.parse_args()
    exercises = [e.strip() for e in a.exercises.split(",") if e.strip()]
    if a.make:
        make_class(a.make, a.learners, exercises)
        return
    with tempfile.TemporaryDirectory() as d:
        folder = os.path.join(d, "class")
        make_class(folder, a.learners, exercises)
        print(f"{a.learners} learners x {', '.join(exercises)}, --jobs {a.jobs}, {os.cpu_count()} cores")
        for r in range(a.rounds):
            load = os.getloadavg()[0]
            boxed = grade_once(folder, exercises, a.jobs, unsafe=False)
            unsafe = grade_once(folder, exercises, a.jobs, unsafe=True)
            print(f"round {r + 1}: sandboxed {boxed:.1f} s, without sandbox {unsafe:.1f} s, "
                  f"ratio {boxed / unsafe:.2f} (load {load:.1f} -> {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
