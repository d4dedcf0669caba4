"""The plain scripts (disttutor/plain/): each runs under torchrun on 2 CPU ranks and prints its success line.

Discovered, not listed: a script added to disttutor/plain/ is run here too. Each one is a copy a
learner takes away, so it must stand alone: no file there imports disttutor.
"""
from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLAIN = os.path.join(ROOT, "disttutor", "plain")
SCRIPTS = sorted(f[:-3] for f in os.listdir(PLAIN) if f.endswith(".py") and f != "__init__.py")
TIMEOUT_S = 240  # a few steps on 2 CPU ranks take seconds; the margin is for a loaded 2-core machine


def test_there_are_plain_scripts():
    assert {"ddp", "dcp"} <= set(SCRIPTS), SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS + ["__init__"])
def test_plain_script_imports_only_torch_and_the_standard_library(name):
    tree = ast.parse(open(os.path.join(PLAIN, name + ".py"), encoding="utf-8").read())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{name}.py: a relative import cannot be copied out"
            roots.add(node.module.split(".")[0])
    assert "disttutor" not in roots, f"disttutor/plain/{name}.py imports disttutor: it must stand alone"
    third_party = roots - set(sys.stdlib_module_names) - {"torch"}
    assert not third_party, f"disttutor/plain/{name}.py imports {sorted(third_party)}: only torch is allowed"


@pytest.mark.parametrize("name", SCRIPTS)
def test_plain_script_runs_on_two_cpu_ranks(name, tmp_path):
    # --standalone: a rendezvous on a port the OS picks (never a fixed 29500 another test holds).
    # CUDA hidden: the test checks the CPU/gloo path on any machine.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("PYTHONPATH", None)  # a plain script needs nothing of the repository on its path
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           os.path.join(PLAIN, name + ".py")]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and both ranks: no orphans
        out, _ = proc.communicate()
        pytest.fail(f"{name}.py did not finish in {TIMEOUT_S}s:\n{out[-3000:]}")
    assert proc.returncode == 0, f"{name}.py exited {proc.returncode}:\n{out[-3000:]}"
    ok = [ln for ln in out.splitlines() if ln.startswith(f"{name}: OK")]
    assert len(ok) == 1, f"{name}.py printed no single '{name}: OK' line (rank 0's verdict):\n{out[-3000:]}"
    assert not os.listdir(tmp_path), f"{name}.py left files in its working directory: {os.listdir(tmp_path)}"


def test_course_plain_copies_and_prints_the_scripts(tmp_path):
    course = [sys.executable, os.path.join(ROOT, "course.py"), "plain"]
    listed = subprocess.run(course, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and all(f"  {n} " in listed.stdout for n in SCRIPTS), listed.stdout
    shown = subprocess.run(course + ["ddp"], capture_output=True, text=True, timeout=60)
    assert shown.stdout == open(os.path.join(PLAIN, "ddp.py"), encoding="utf-8").read()
    copied = subprocess.run(course + ["--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert copied.returncode == 0 and sorted(os.listdir(tmp_path)) == sorted(n + ".py" for n in SCRIPTS)
    bad = subprocess.run(course + ["nope"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no script nope" in bad.stdout
