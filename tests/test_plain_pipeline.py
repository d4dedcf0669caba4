"""disttutor/plain/pipeline.py (the copyable 1F1B script chapter 7 shows) runs on 2 CPU ranks under torchrun
and reports that its stages equal single-process training (the script checks that itself)."""
from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "disttutor", "plain", "pipeline.py")
TIMEOUT_S = 240  # 4 steps on 2 CPU ranks take seconds; the margin is for a loaded 2-core machine


def test_plain_pipeline_imports_only_torch_and_the_standard_library():
    roots = set()
    for node in ast.walk(ast.parse(open(SCRIPT, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            roots.add(node.module.split(".")[0])
    assert roots - set(sys.stdlib_module_names) == {"torch"}, roots


@pytest.mark.timeout(TIMEOUT_S + 30)
def test_plain_pipeline_runs_on_two_cpu_ranks(tmp_path):
    # --standalone: a rendezvous on a port the OS picks; CUDA hidden: the CPU/gloo path on any machine.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("PYTHONPATH", None)  # the script needs nothing of the repository
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", SCRIPT]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and both ranks: no orphans
        out, _ = proc.communicate()
        pytest.fail(f"pipeline.py did not finish in {TIMEOUT_S}s:\n{out[-3000:]}")
    assert proc.returncode == 0, out[-3000:]
    ok = [ln for ln in out.splitlines() if ln.startswith("pipeline: OK: 2 stages")]
    assert len(ok) == 1, out[-3000:]
    losses = [float(ln.split()[-1]) for ln in out.splitlines() if ln.startswith("step ")]
    assert len(losses) == 4 and losses[-1] < losses[0]  # it trains
