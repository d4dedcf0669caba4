"""One learner's check in a process of its own, for ``disttutor grade``: sandboxed, bounded, read back.

:func:`run_one` starts ``python -m disttutor.course.grade --one EXERCISE FILE`` in the sandbox of
:mod:`disttutor.course.sandbox` (or, told ``unsafe=True``, as the teacher) and turns what came
back into a status and one line:

* the checker's verdict, a JSON line on stdout after a nonce the grader gave on stdin (a learner's
  ``print('{"passed": true}')`` is not a verdict);
* what the guard refused (:mod:`disttutor.checks.guard`), read from the check's folder: it comes
  first, also when the learner's code caught the exception;
* a file that reached the output limit, a process killed for CPU time or memory, an endless loop
  (``timeout``: the whole process tree is killed).
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading

from disttutor.checks import guard
from disttutor.course import sandbox

_uids = iter(range(1 << 30))
_uid_lock = threading.Lock()


def _next_uid() -> int:
    with _uid_lock:  # checks running at the same time never share a user (nor its process count)
        return sandbox.FIRST_UID + next(_uids) % 4096


def _largest_file(folder: str) -> tuple[int, str]:
    best = (0, "")
    for d, _, names in os.walk(folder):
        for n in names:
            try:
                best = max(best, (os.path.getsize(os.path.join(d, n)), n))
            except OSError:
                continue
    return best


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


def prepare(d: str, env: dict, references: tuple[str, ...] = (), show: dict[str, str] | None = None,
            unsafe: bool = False, limits: sandbox.Limits = sandbox.Limits()):
    """(command prefix, environment, preexec function, the check's folder here) for a check in ``d``.

    The prefix is bubblewrap's command line (nothing when ``unsafe``); the folder ``d/box`` is the
    check's own, ``/sandbox`` inside; ``show`` are more read-only files {inside: here}.
    """
    from disttutor.contract.procs import PRCTL, tie_to_parent

    box, ro = os.path.join(d, "box"), os.path.join(d, "ro")
    os.makedirs(box)
    os.makedirs(ro)
    root = sandbox.user() == 0
    uid = _next_uid() if root and not unsafe else None
    if uid is not None:
        os.chown(box, uid, uid)
    cmd_env = sandbox.environment(env, uid, sandboxed=not unsafe)
    cmd_env[guard.ENV_VIOLATIONS] = os.path.join(box if unsafe else sandbox.BOX, "refused.txt")
    if unsafe:
        cmd_env.update(HOME=box, TMPDIR=box)
        prefix: list[str] = []
    else:
        prefix = [*sandbox.bwrap_args(box, ro, uid or sandbox.user(), references, show), "--clearenv"]
        for k, v in cmd_env.items():
            prefix += ["--setenv", k, v]
    processes = limits.processes if uid is not None else (  # the check's own user: only its tasks count
        None if root or os.name != "posix" else sandbox.user_tasks(sandbox.user()) + limits.processes)
    limit = sandbox.limiter(limits, processes) if os.name == "posix" else None

    def preexec() -> None:
        limit()
        if PRCTL:
            tie_to_parent()

    return prefix, ({**env, **cmd_env} if unsafe else {"PATH": cmd_env["PATH"]}), limit and preexec, box


def run_one(exercise, src: str, timeout: float, env: dict, running: set, unsafe: bool = False,
            limits: sandbox.Limits = sandbox.Limits()) -> tuple[str, str]:
    """(status, message) of one check: "pass", "fail" or "timeout"."""
    from disttutor.contract.procs import kill_tree

    with tempfile.TemporaryDirectory(prefix="disttutor-grade-") as d:
        src_here = os.path.join(d, f"ex{exercise.id.replace('.', '_')}.py")
        with open(src_here, "w") as f:
            f.write(src)
        inside_src = src_here if unsafe else f"/grade/{os.path.basename(src_here)}"
        prefix, popen_env, preexec, box = prepare(d, {**env, guard.ENV_EXERCISE: exercise.id}, exercise.references,
                                                  {inside_src: src_here}, unsafe, limits)
        nonce = secrets.token_hex(16)
        out_path, err_path = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            # PR_SET_PDEATHSIG follows the *thread* that started the child: a pool thread lives until
            # the pool is shut down, after every child it started has ended.
            p = subprocess.Popen([*prefix, sys.executable, "-m", "disttutor.course.grade", "--one", exercise.id,
                                  inside_src], env=popen_env, cwd=box,
                                 stdout=out, stderr=err, stdin=subprocess.PIPE, start_new_session=True,
                                 preexec_fn=preexec)
        running.add(p)
        try:
            p.stdin.write(f"{nonce}\n".encode())
            p.stdin.close()
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree([p.pid])
            p.wait()
            return "timeout", f"no answer within {timeout:g}s (an endless loop, or ranks waiting on each other)"
        except BaseException:
            kill_tree([p.pid])
            raise
        finally:
            running.discard(p)
        return _verdict(p.returncode, d, box, nonce, limits)


def _verdict(returncode: int, d: str, box: str, nonce: str, limits: sandbox.Limits) -> tuple[str, str]:
    refused = guard.read_refusals(os.path.join(box, "refused.txt"))
    if refused:
        return "fail", refused[0]
    size, name = _largest_file(d)
    if size >= limits.output_bytes:
        what = "printed" if name in ("stdout", "stderr") else f"wrote ({name})"
        return "fail", (f"your code {what} {_mib(limits.output_bytes)} or more, the sandbox's limit on output: "
                        "it was stopped there")
    with open(os.path.join(d, "stdout"), errors="replace") as f:
        lines = [ln[len(nonce):] for ln in f.read().splitlines() if ln.startswith(nonce)]
    with open(os.path.join(d, "stderr"), errors="replace") as f:
        err = f.read()
    if sandbox.killed_by(returncode, signal.SIGXCPU):
        return "fail", f"your code used {limits.cpu_seconds} s of CPU time, the sandbox's limit: it was stopped"
    if "MemoryError" in err and not lines:
        return "fail", f"your code ran out of memory (the sandbox allows {_mib(limits.memory_bytes)} a process)"
    if returncode != 0 or not lines:
        last = (err.strip().splitlines() or ["(no output)"])[-1]
        return "fail", f"the checker could not run it: {last[:200]}"
    r = json.loads(lines[-1])
    return ("pass", "") if r["passed"] else ("fail", r["message"])


def leftover_processes(marker: str, run_id: str) -> list[int]:
    """Processes still alive that the grader started (found by the marker in their environment)."""
    import psutil

    left = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(marker) == run_id:
                left.append(proc.pid)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
    return left
