#!/usr/bin/env python3
"""Set up and use the disttutor course with nothing but Python 3.10+.

    python3 course.py lab        # create .venv, install, open the course in JupyterLab
    python3 course.py test       # create .venv, install, run every test (unit + all notebooks)
    python3 course.py execute [chapters/src/NN_x.py ...]
                                 # maintainers: build chapters from chapters/src and execute them

Environment: DISTTUTOR_VENV picks another venv folder; PIP_CONSTRAINT is
honoured by pip (CI pins the CPU torch wheel with .ci/constraints.txt).
Uses only the standard library, so it runs before anything is installed.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv

ROOT = os.path.dirname(os.path.abspath(__file__))
VENV = os.environ.get("DISTTUTOR_VENV", os.path.join(ROOT, ".venv"))
BIN = os.path.join(VENV, "Scripts" if os.name == "nt" else "bin")
PY = os.path.join(BIN, "python.exe" if os.name == "nt" else "python")


def _fingerprint() -> str:
    h = hashlib.sha256()
    for name in ("pyproject.toml", os.path.join(".ci", "constraints.txt")):
        p = os.path.join(ROOT, name)
        if os.path.exists(p):
            h.update(open(p, "rb").read())
    h.update(os.environ.get("PIP_CONSTRAINT", "").encode())
    return h.hexdigest()


def ensure_env() -> None:
    """Create the venv and install the course (editable, with test extras) once."""
    if sys.version_info < (3, 10):
        sys.exit(f"disttutor needs Python 3.10 or newer; this is {sys.version.split()[0]}")
    if not os.path.exists(PY):
        print(f"creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    stamp = os.path.join(VENV, ".disttutor-installed")
    fp = _fingerprint()
    if os.path.exists(stamp) and open(stamp).read() == fp:
        return
    print("installing disttutor and its dependencies (first time only)", flush=True)
    subprocess.check_call([PY, "-m", "pip", "install", "-e", ".[dev]"], cwd=ROOT)
    with open(stamp, "w") as f:
        f.write(fp)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # ranks share few cores; see chapter 0
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    return env


def lab(extra: list[str]) -> int:
    ensure_env()
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in extra:
        extra = [*extra, "--allow-root"]  # containers and classroom VMs often run as root; Jupyter refuses otherwise
    return subprocess.call([PY, "-m", "jupyter", "lab", os.path.join(ROOT, "chapters"), *extra], env=_env())


def test(extra: list[str]) -> int:
    ensure_env()
    return subprocess.call([PY, "-m", "pytest", *extra], cwd=ROOT, env=_env())


def execute(paths: list[str]) -> int:
    ensure_env()
    # No paths: build_notebooks.py builds every chapters/src/NN_*.py.
    return subprocess.call([PY, os.path.join(ROOT, "scripts", "build_notebooks.py"), *paths], cwd=ROOT, env=_env())


def main() -> int:
    cmds = {"lab": lab, "test": test, "execute": execute}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        print(__doc__)
        return 2
    return cmds[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
