"""Checker for Exercise 5.1 (chapter 5): the torchrun command of each node of a 2-node job.

The learner writes ``node_command(node_rank, nnodes, nproc_per_node, head, port, job_id)``
returning torchrun's arguments (without the word ``torchrun``) for one node of a c10d job
that runs ``-m disttutor.programs.whoami``. The checker

1. parses every node's arguments with **torchrun's own parser**
   (``torch.distributed.run.get_args_parser``) for the job of the exercise (2 nodes x 4
   processes, head ``node0.example.com:29500``) and checks what a real cluster needs: the
   same endpoint and rendezvous id on every node, the right counts, c10d, the program;
2. runs the learner's commands for real as **two torchrun agents on loopback** (2 nodes x 1
   process, head ``127.0.0.1``, a free port) and checks that the ranks met: world size 2,
   one rank per node, ranks 0 and 1 both present.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Callable

from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, function_name, load_learner

JOB = dict(nnodes=2, nproc_per_node=4, head="node0.example.com", port=29500, job_id="exercise-5-1")
PROGRAM = "disttutor.programs.whoami"


def _parse(args) -> tuple[object | None, str | None]:
    """torchrun's parser on ``args``: (namespace, None) or (None, what it said)."""
    import contextlib
    import io

    from torch.distributed.run import get_args_parser

    if not isinstance(args, (list, tuple)) or not all(isinstance(a, str) for a in args):
        return None, f"expected a list of strings (torchrun's arguments), got {args!r}"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return get_args_parser().parse_args(list(args)), None
    except SystemExit:
        return None, "torchrun's parser rejects it: " + (err.getvalue().strip().splitlines() or ["?"])[-1]


def _static_problem(fn: Callable) -> str | None:
    parsed = []
    for node in range(JOB["nnodes"]):
        args = fn(node, JOB["nnodes"], JOB["nproc_per_node"], JOB["head"], JOB["port"], JOB["job_id"])
        a, err = _parse(args)
        if err:
            return f"node {node}: {err}"
        parsed.append(a)
        want = {"nnodes": str(JOB["nnodes"]), "nproc_per_node": str(JOB["nproc_per_node"]), "rdzv_backend": "c10d",
                "rdzv_endpoint": f"{JOB['head']}:{JOB['port']}"}
        for key, value in want.items():
            if str(getattr(a, key)) != value:
                return (f"node {node}: torchrun reads --{key.replace('_', '-')}={getattr(a, key)!r}, the job needs "
                        f"{value!r}" + (" (every node meets at the head's host:port)" if key == "rdzv_endpoint" else ""))
        if not (a.module and a.training_script == PROGRAM):
            return f"node {node}: torchrun would run {a.training_script!r} (module: {a.module}); the job runs -m {PROGRAM}"
    ids = {a.rdzv_id for a in parsed}
    if len(ids) != 1 or ids == {"none"}:
        return (f"the nodes give rendezvous ids {sorted(ids)}: every node of one job must give the same "
                "--rdzv-id (here the job id), or two jobs on one head could join each other")
    return None


def _run_two_agents(fn: Callable, timeout: float) -> str | None:
    """The learner's commands, two agents on this machine; None if the ranks met as one job."""
    import shutil

    run_dir = tempfile.mkdtemp(prefix="disttutor-ex5-")
    try:
        return _agents_in(fn, timeout, run_dir)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _agents_in(fn: Callable, timeout: float, run_dir: str) -> str | None:
    from disttutor import contract
    from disttutor.launcher.launch import free_port
    from disttutor.contract.procs import PRCTL, kill_tree, tie_to_parent

    port = free_port()
    env = {**os.environ, contract.ENV_RUN_DIR: run_dir, contract.ENV_BACKEND: "gloo", "OMP_NUM_THREADS": "1",
           contract.ENV_COLLECTIVE_TIMEOUT: "20", "TORCH_CPP_LOG_LEVEL": "ERROR"}
    procs, logs = [], []
    for node in range(2):
        args = list(fn(node, 2, 1, "127.0.0.1", port, "loopback-check"))
        log = open(os.path.join(run_dir, f"agent{node}.log"), "w")
        logs.append(log)
        # --local-addr: this machine's agents must also advertise loopback (torchrun options go before the program)
        procs.append(subprocess.Popen([sys.executable, "-m", "disttutor.launcher.torchrun", "--local-addr=127.0.0.1", *args],
                                      env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True, preexec_fn=tie_to_parent if PRCTL else None))
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        hung = any(p.poll() is None for p in procs)
    finally:  # whatever happens (also an interrupt), no agent outlives the check
        if any(p.poll() is None for p in procs):
            kill_tree([p.pid for p in procs])
        for p in procs:
            p.wait()
        for log in logs:
            log.close()
    if hung:
        return (f"the two agents did not finish within {timeout:g}s on loopback: they probably never met "
                "(different endpoints or rendezvous ids?)")
    codes = [p.returncode for p in procs]
    if any(codes):
        tail = open(os.path.join(run_dir, f"agent{codes.index(next(c for c in codes if c))}.log")).read()
        last = [ln for ln in tail.splitlines() if ln.strip()][-1:] or ["(no output)"]
        return f"running your commands on loopback failed (agent exit codes {codes}): {last[0][:200]}"
    import json

    reports = []
    for r in range(2):
        path = contract.report_path(run_dir, r)
        if not os.path.exists(path):
            return f"on loopback, rank {r} never reported: the two agents did not form one 2-rank job"
        with open(path) as f:
            reports.append(json.load(f))
    per_node = reports[0].get("results", {}).get("ranks_per_node")
    if per_node != [1.0, 1.0]:
        return f"on loopback the ranks per node were {per_node}, expected one rank on each of the 2 nodes"
    return None


def check_node_command(fn: Callable | str, timeout: float = JOB_TIMEOUT_S) -> CheckResult:
    """Exercise 5.1: ``fn(node_rank, nnodes, nproc_per_node, head, port, job_id) -> list[str]``."""
    try:
        node_command = load_learner(fn, function_name(fn, "node_command"), "5.1")
        problem = _static_problem(node_command) or _run_two_agents(node_command, timeout)
    except NotImplementedError as e:
        return CheckResult("5.1", False, [f"still a stub -- {e}"])
    except Exception as e:
        return CheckResult("5.1", False, [f"the function raised {type(e).__name__}: {e}"])
    return CheckResult("5.1", problem is None, [] if problem is None else [problem])
