"""Run Stanford CS336 assignment 2's sharded-optimizer and FSDP tests against the course's ZeRO-1 and FSDP.

Chapter 11. The assignment (https://github.com/stanford-cs336/assignment2-systems) is NOT part of this
repository: point ``--repo`` (or ``CS336_REPO``) at a checkout or a bare git directory of it. Its
``tests/`` and ``cs336-basics/`` are copied into a temporary folder, ``tests/adapters.py`` is replaced
by :mod:`benchmarks.cs336.adapters`, and pytest runs there. Reproduce::

    git clone https://github.com/stanford-cs336/assignment2-systems /tmp/cs336
    pip install -e ".[cs336]"                  # einops, einx, jaxtyping: what cs336_basics.model imports
    PYTHONPATH=$PWD python benchmarks/cs336/run.py --repo /tmp/cs336 [--impl solutions|torch_fsdp2]

Prints one line per test (passed / failed, with the failure's last line) and ``--json`` writes them.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TESTS = ("tests/test_sharded_optimizer.py", "tests/test_fsdp.py")
DEFAULT_REPO = os.environ.get("CS336_REPO", "/work/.mirror/stanford-cs336+assignment2-systems/repo")


def available(repo: str = DEFAULT_REPO) -> bool:
    return os.path.isdir(repo) and (os.path.isfile(os.path.join(repo, TESTS[1])) or _is_git(repo))


def _is_git(repo: str) -> bool:
    return subprocess.run(["git", "--git-dir", repo, "cat-file", "-e", f"HEAD:{TESTS[1]}"],
                          capture_output=True).returncode == 0


def copy_assignment(repo: str, into: str) -> str:
    """Its tests/ and cs336-basics/ into ``into`` (from a work tree, or ``git archive`` of a bare repo)."""
    if os.path.isfile(os.path.join(repo, TESTS[1])):
        for d in ("tests", "cs336-basics"):
            shutil.copytree(os.path.join(repo, d), os.path.join(into, d))
        commit = "work tree"
    else:
        arch = subprocess.run(["git", "--git-dir", repo, "archive", "HEAD", "tests", "cs336-basics"],
                              capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", into], input=arch, check=True)
        commit = subprocess.run(["git", "--git-dir", repo, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
    shutil.copy(os.path.join(HERE, "adapters.py"), os.path.join(into, "tests", "adapters.py"))
    return commit


def run(repo: str = DEFAULT_REPO, impl: str = "scratch", timeout: float = 900) -> dict:
    with tempfile.TemporaryDirectory(prefix="cs336_") as tmp:
        commit = copy_assignment(repo, tmp)
        env = dict(os.environ, CS336_IMPL=impl, DISTTUTOR_ROOT=ROOT, OMP_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join([tmp, os.path.join(tmp, "cs336-basics"), ROOT]))
        # -p no:cacheprovider: nothing written into the copy; their conftest and pyproject are not ours
        # (no pyproject is copied, so pytest's rootdir is the temporary folder and its options are defaults).
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA",
                               "--tb=short", "-p", "no:randomly", *TESTS], cwd=tmp, env=env,
                              capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    results = {}
    for m in re.finditer(r"^(PASSED|FAILED|ERROR) (tests/\S+?)(?: - (.*))?$", out, re.M):
        results[m.group(2)] = {"outcome": m.group(1).lower(), "why": ""}
    # The reason of a failure inside a spawned rank: the assertion's own message (e.g. "Step 0: Parameter
    # embedding.weight mismatch. Max diff: 2.9e-09"), in the order the failures are reported.
    reasons = [m.group(1) for m in re.finditer(r"^(?:E\s+)?((?:AssertionError|[A-Za-z]+Error)(?<!ProcessRaisedException): .+)$",
                                                out, re.M) if "ProcessRaisedException" not in m.group(1)]
    # one reason per failed test: the first error line of each spawned failure, in report order
    reasons = [r.split(": ", 1)[1] if r.startswith("AssertionError: ") else r for r in _dedupe(reasons)]
    for r, why in zip((r for r in results.values() if r["outcome"] != "passed"), reasons):
        r["why"] = why.strip()[:300]
    return {"commit": commit, "impl": impl, "results": results, "returncode": proc.returncode,
            "tail": out[-3000:]}


def _dedupe(lines: list[str]) -> list[str]:
    """Consecutive repeats removed (pytest prints a spawned failure's error line more than once)."""
    return [ln for i, ln in enumerate(lines) if i == 0 or ln != lines[i - 1]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", default=DEFAULT_REPO)
    ap.add_argument("--impl", choices=("scratch", "solutions", "torch_fsdp2"), default="scratch")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not available(a.repo):
        sys.exit(f"no CS336 assignment 2 at {a.repo!r}: git clone https://github.com/stanford-cs336/"
                 "assignment2-systems and pass --repo")
    res = run(a.repo, a.impl)
    for name, r in res["results"].items():
        print(f"{r['outcome']:7} {name}" + (f"  -- {r['why']}" if r["why"] else ""))
    n_pass = sum(r["outcome"] == "passed" for r in res["results"].values())
    print(f"{n_pass} of {len(res['results'])} passed (assignment commit {res['commit']}, course impl {a.impl})")
    if not res["results"]:
        print(res["tail"])
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
