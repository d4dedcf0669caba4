"""A classroom copy of the course: everything a learner needs, without ``solutions/`` (``disttutor export``).

The copy is what git tracks in the course's checkout (or, outside a checkout, its files less
caches and environments), minus:

* ``solutions/`` — the exercises' answers;
* ``tests/`` — they run the solutions, so they would fail without them (and quote wrong answers);
* ``.ci/`` — the course's own continuous integration.

Everything else stays, because the learner's copy must run: the checkers, the chapters with their
outputs, the broken programs of the fix-the-bug exercises, and ``disttutor/scratch/`` (the
from-scratch references the chapters' programs run after their exercises). None of them passes an
exercise: a learner's code that imports its exercise's references (``Exercise.references``) fails
its check, in the copy too (:mod:`disttutor.checks.guard`); TEACHING.md says what the copy holds.
Hints end with "ask your teacher" instead of a solution's path. Standard library only.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LEFT_OUT = ("solutions/", "tests/", ".ci/")
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".ipynb_checkpoints", "workspace", "site",
             ".site-cache", "build", "dist", ".whl", ".gl"}
NOTE = """# This is a classroom copy of disttutor

Made by `disttutor export`: the course without `solutions/` (and without `tests/`, which run the
solutions). Set up and start it as the README says (`python3 course.py lab`). When a hint ends with
"ask your teacher", that is where the solution would have been.
"""


def course_files(root: str = ROOT) -> list[str]:
    """The course's files, relative to ``root``: git's list in a checkout, else a walk of the tree."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached"], capture_output=True, check=True)
        files = [f for f in out.stdout.decode().split("\0") if f]
        if files:
            return sorted(f for f in files if os.path.isfile(os.path.join(root, f)))  # a deleted file is gone
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.endswith(".egg-info"))
        files += [os.path.relpath(os.path.join(d, n), root) for n in names if not n.endswith(".pyc")]
    return sorted(files)


def classroom_files(root: str = ROOT) -> list[str]:
    return [f for f in course_files(root) if not f.replace(os.sep, "/").startswith(LEFT_OUT)]


def export(dest: str, root: str = ROOT) -> list[str]:
    """Copy the classroom files into ``dest`` (new or empty); return the relative paths copied."""
    dest = os.path.abspath(dest)
    if os.path.abspath(root) == dest or dest.startswith(os.path.abspath(root) + os.sep):
        raise ValueError(f"export into a folder outside the course, not {dest}")
    if os.path.exists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise ValueError(f"{dest} exists and is not an empty folder: choose a new one")
    files = classroom_files(root)
    for f in files:
        os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
        shutil.copy2(os.path.join(root, f), os.path.join(dest, f))
    with open(os.path.join(dest, "CLASSROOM.md"), "w", encoding="utf-8") as fh:
        fh.write(NOTE)
    return files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="disttutor export",
                                description="write a classroom copy of the course, without solutions/ (and tests/)")
    p.add_argument("dest", help="a new (or empty) folder for the copy")
    a = p.parse_args(argv)
    try:
        files = export(a.dest)
    except ValueError as e:
        print(f"disttutor export: error: {e}", file=sys.stderr)
        return 2
    left = sorted({f.split("/")[0] + "/" for f in course_files() if f.startswith(LEFT_OUT)})
    print(f"wrote {len(files)} files to {os.path.abspath(a.dest)} (left out: {', '.join(left) or 'nothing'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
