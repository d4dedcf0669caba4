"""No process left behind: an interrupted cell and a SIGKILLed kernel (chapter 0).

A "kernel" here is a separate Python process that calls disttutor.launch, so
we can interrupt or kill it the way Jupyter would, then count what survives.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

# A SIGINT during a cell is a KeyboardInterrupt because ipykernel installs Python's default handler
# while a cell runs. The stand-in does the same: a process started in the background by a shell
# without job control (`cmd &` in a script, as a CI runner may do) inherits SIGINT *ignored*, and
# Python then keeps ignoring it, so without this line the interrupt would never arrive.
KERNEL = textwrap.dedent("""
    import signal, sys, disttutor
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        disttutor.launch("hello", 2, {"skip_rank": 1}, collective_timeout=300, timeout=300,
                         run_dir=sys.argv[1])
    except KeyboardInterrupt as e:
        print("INTERRUPTED", type(e).__name__, flush=True)
        print(e, flush=True)
        sys.exit(0)
""")


def _job_processes(run_dir: str) -> list[psutil.Process]:
    """torchrun agents and workers of this job: their environment names its run dir."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.environ().get("DISTTUTOR_RUN_DIR") == run_dir:
                found.append(p)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    return [p for p in found if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _start_kernel(tmp_path) -> tuple[subprocess.Popen, str]:
    run_dir = str(tmp_path / "run")
    os.makedirs(run_dir)
    proc = subprocess.Popen([sys.executable, "-c", KERNEL, run_dir], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    # Wait until rank 1 says it is skipping the collective: the job is really running.
    deadline = time.time() + 90
    for line in proc.stdout:
        if "skipping the all-reduce" in line or time.time() > deadline:
            break
    assert len(_job_processes(run_dir)) == 3, "expected torchrun + 2 workers to be running"
    return proc, run_dir


def _wait_gone(run_dir: str, seconds: float) -> list[psutil.Process]:
    deadline = time.time() + seconds
    while time.time() < deadline:
        left = _job_processes(run_dir)
        if not left:
            return []
        time.sleep(0.2)
    return _job_processes(run_dir)


def test_interrupted_cell_leaves_nothing_behind(tmp_path):
    proc, run_dir = _start_kernel(tmp_path)
    proc.send_signal(signal.SIGINT)  # what Jupyter's "interrupt kernel" sends
    out, _ = proc.communicate(timeout=30)
    assert "INTERRUPTED LaunchInterrupted" in out
    assert "interrupted: ranks 0, 1" in out and "skipping the all-reduce" in out
    assert _wait_gone(run_dir, 10) == []


def test_killed_kernel_leaves_nothing_behind(tmp_path):
    proc, run_dir = _start_kernel(tmp_path)
    proc.kill()  # SIGKILL: no Python cleanup runs in the "kernel" at all
    proc.wait(10)
    # PR_SET_PDEATHSIG: torchrun gets SIGTERM and stops its workers, which are also tied to it.
    left = _wait_gone(run_dir, 20)
    for p in left:  # do not leak them into the rest of the test session
        p.kill()
    assert left == []
