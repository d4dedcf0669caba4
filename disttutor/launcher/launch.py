"""Outside the ranks: run a worker program under torchrun from a notebook cell.

Introduced in chapter 0. :func:`launch` starts ``python -m torch.distributed.run``
as a *subprocess* (never a fork of the kernel: forking a process that has run
torch ops can deadlock in OpenMP/glibc locks), streams every rank's output into
the cell as it happens, and returns a :class:`RunResult` with per-rank status
and the data each rank sent with :func:`disttutor.rank.runtime.report`.

Whatever happens -- a hung collective, a crashed rank, the cell interrupted,
the kernel SIGKILLed -- the whole process tree goes away:

* torchrun runs in its own session and gets ``PR_SET_PDEATHSIG=SIGTERM`` (Linux),
  so it stops its workers when the kernel dies; should that shutdown hang, a
  watchdog thread in the agent (:mod:`disttutor.launcher.torchrun`) SIGKILLs the ranks
  and the agent; workers in turn are tied to torchrun (SIGKILL) by the runtime;
* on timeout or interrupt the launcher terminates torchrun (which forwards the
  signal to its workers), then SIGKILLs anything left of the tree.

This module does not import torch (a launch costs no extra 2-3 s of import).
"""
from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from disttutor import contract
from disttutor.launcher.collect import collect
from disttutor.launcher.defaults import BACKENDS, default_backend, gpus_env, rank_env
from disttutor.contract.options import check_args, to_argv
from disttutor.contract.procs import PRCTL, kill_tree, tie_to_parent
from disttutor.launcher.stream import Display, TeeLines, label as _label, progress as _progress
from disttutor.launcher.results import LaunchError, LaunchInterrupted, LaunchTimeout, RunResult
from disttutor.contract.machine import usable_cores

__all__ = ["launch", "resolve_program", "free_port", "max_procs", "default_backend"]

# torch's own excepthook adds "[rankN]:" to traceback lines; one prefix is enough.
_TORCH_PREFIX = re.compile(r"^\[rank\d+\]: ?")

_OPTIONS = ("nproc", "args", "nnodes", "backend", "timeout", "collective_timeout", "env",
            "threads", "stream", "check", "run_dir", "max_procs_override", "max_restarts", "on_progress")


def max_procs() -> int:
    """The most ranks one launch may start on this machine (CPU ranks share cores)."""
    return max(8, 2 * usable_cores())


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS says is free right now (never a hard-coded one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def resolve_program(program: str) -> tuple[str, list[str]]:
    """``"hello"`` -> ``disttutor.programs.hello``; a path -> that script.

    Returns a display name and the torchrun arguments that run it.
    """
    if not isinstance(program, (str, os.PathLike)) or not str(program).strip():
        raise ValueError(f"program must be a module name or a script path, got {program!r}")
    program = str(program)
    if program.endswith(".py") or os.sep in program or "/" in program:
        path = os.path.abspath(program)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"program {program!r}: no such script")
        # Through a thin wrapper: the script's own init_process_group() gets the
        # collective timeout too (disttutor.rank.user_script); it still runs as __main__.
        return program, ["-m", "disttutor.rank.user_script", path]
    module = program if "." in program else f"disttutor.programs.{program}"
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        hint = ""
        if "." not in program:
            names = _program_names()
            close = difflib.get_close_matches(program, names, n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else f" Known programs: {', '.join(names)}."
        raise FileNotFoundError(f"program {program!r}: no module {module!r}.{hint}")
    return module, ["-m", module]


def _program_names() -> list[str]:
    here = os.path.join(os.path.dirname(os.path.dirname(__file__)), "programs")
    return sorted(f[:-3] for f in os.listdir(here) if f.endswith(".py") and not f.startswith("_"))


class TooManyProcesses(ValueError):
    """More ranks than one launch may start here; ``hint(...)`` lets a front end spell its own override."""

    def __init__(self, count: int, limit: int, override: str = "max_procs_override={count}"):
        self.count, self.limit = count, limit
        super().__init__(self.hint(override))

    def hint(self, override: str) -> str:
        return (f"{self.count} processes is too many for this machine ({usable_cores()} usable CPU cores; at most "
                f"{self.limit} per launch). Use fewer ranks, or pass {override.format(count=self.count)} "
                "if you really mean it.")


def _as_argv(args: Any) -> list[str]:
    """A config instance, ``{"steps": 3, "hang": True}`` or a list -> ``["--steps", "3", "--hang"]``."""
    return to_argv(args)


def _validate(nproc: Any, nnodes: Any, backend: Any, timeout: Any, env: Any, threads: Any,
              limit: int, gpus: Mapping[str, str] | None = None) -> None:
    def _int(name: str, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an integer, got {v!r}")
        return v

    nproc, nnodes = _int("nproc", nproc), _int("nnodes", nnodes)
    if nproc < 1:
        raise ValueError(f"nproc must be at least 1, got {nproc}")
    if nnodes < 1:
        raise ValueError(f"nnodes must be at least 1, got {nnodes}")
    if nproc * nnodes > limit:
        raise TooManyProcesses(nproc * nnodes, limit)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', got {backend!r}")
    if backend == "nccl":
        import torch  # only here: checking GPUs needs torch

        n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus and "CUDA_VISIBLE_DEVICES" in gpus:  # the course-wide choice limits what ranks see
            n_gpu = min(n_gpu, len([g for g in gpus["CUDA_VISIBLE_DEVICES"].split(",") if g]))
        if n_gpu < nproc:
            raise ValueError(f"backend='nccl' needs one GPU per rank: nproc={nproc}, GPUs available={n_gpu}. "
                             "Use backend='auto' (picks gloo on CPU) or fewer ranks.")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if env is not None and (not isinstance(env, Mapping)
                            or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        raise TypeError("env must be a dict of str -> str")
    _int("threads", threads)


def _torchrun_argv(target: list[str], argv: list[str], nproc: int, nnodes: int, node: int,
                   port: int, run_id: str, log_dir: str, max_restarts: int = 0) -> list[str]:
    cmd = [sys.executable, "-m", "disttutor.launcher.torchrun",  # torchrun, stores on loopback only
           f"--nproc-per-node={nproc}", f"--nnodes={nnodes}",
           # c10d rendezvous on loopback: nothing listens on a public interface
           # for a one-machine job, and the OS-chosen port lets launches overlap.
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}",
           "--local-addr=127.0.0.1",
           f"--max-restarts={max_restarts}", "--monitor-interval=0.1",
           # --tee gives every worker line a "[defaultN]:" prefix we route by rank.
           "--tee=3", f"--log-dir={log_dir}"]
    if nnodes > 1:
        cmd.append(f"--node-rank={node}")
    return cmd + target + argv


def plain_command(target: list[str], argv: list[str], nproc: int, nnodes: int = 1) -> str:
    """The ``torchrun`` line a learner would type for the same job (on one machine, in a terminal).

    What launch() runs adds only plumbing to it: stores on loopback, ``--tee`` for the cell's
    prefixes, the course's timeouts around a script (``disttutor.rank.user_script``).
    """
    if target[:2] == ["-m", "disttutor.rank.user_script"]:  # a learner's script runs as itself
        target = [os.path.relpath(target[2]) if not os.path.relpath(target[2]).startswith("..") else target[2]]
    nodes = [f"--nnodes={nnodes}", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:29500"] if nnodes > 1 else []
    return shlex.join(["torchrun", f"--nproc-per-node={nproc}", *nodes, *target, *argv])


def _pump(idx: int, stream, q: "queue.Queue[tuple[int, str | None]]") -> None:
    for line in iter(stream.readline, ""):
        q.put((idx, line.rstrip("\r\n")))
    q.put((idx, None))


def _notify(on_progress: Callable[[dict], Any], payload: str) -> None:
    """Hand one progress record to the caller's callback (a garbled line is skipped, as the bar does)."""
    try:
        record = json.loads(payload)
    except ValueError:
        return
    if isinstance(record, dict):
        on_progress(record)


def launch(program: str, nproc: int = 2, args: Sequence[Any] | Mapping[str, Any] | None = None, *,
           nnodes: int = 1, backend: str | None = None, timeout: float = 120.0,
           collective_timeout: float | None = None, env: Mapping[str, str] | None = None,
           threads: int = 1, stream: bool = True, check: bool = True, run_dir: str | None = None,
           max_procs_override: int | None = None, max_restarts: int = 0,
           on_progress: Callable[[dict], Any] | None = None, **unknown: Any) -> RunResult:
    """Run ``program`` on ``nproc`` ranks (x ``nnodes`` simulated nodes) under torchrun.

    program: a program of :mod:`disttutor.programs` (``"hello"``), a module
        (``"pkg.mod"``) or a script path (``"my_ddp.py"``).
    args: the program's own arguments: its config dataclass instance (``HelloConfig(size=4)``),
        a dict (``{"steps": 3}`` -> ``--steps 3``) or a list of strings.
    nnodes: > 1 starts that many torchrun agents on loopback joined by c10d rendezvous.
    backend: ``"auto"`` (NCCL when every rank has a GPU, else gloo), ``"gloo"`` or ``"nccl"``;
        default: :func:`default_backend` (``$DISTTUTOR_DEFAULT_BACKEND``, else ``"auto"``).
    timeout: wall-clock seconds for the whole job; then every process is killed.
    collective_timeout: seconds any one collective may wait (default: the runtime's 60 s).
    threads: ``OMP_NUM_THREADS`` per rank (1 keeps CPU ranks from fighting over cores).
    stream: print each rank's lines, prefixed ``[rank r]``, while it runs.
    check: raise :class:`LaunchError` (naming ranks and their last lines) on failure.
    max_restarts: torchrun's elastic restarts: after a rank fails, stop all ranks and start them
        again (up to this many times; chapter 10 resumes from a checkpoint). 0: a failure ends the job.
    on_progress: called in this process with each record rank 0 sends with ``runtime.progress``
        (``{"step", "total", "desc", "metrics"}``), in order, whether or not ``stream`` is on; e.g. a
        live plot (chapter 10's ``viz.lm.LiveLoss``). It runs in the loop that reads the ranks' output,
        so it should be quick (ranks never wait for it: their lines queue up). If it raises, the job
        is stopped like an interrupted one and the exception propagates.

    Returns a :class:`RunResult`: ``.ok``, ``.ranks[r].status``, ``.results[r]``,
    ``.logs[r]``, ``.wall_s``.
    """
    if unknown:
        bad = ", ".join(unknown)
        sugg = {k: difflib.get_close_matches(k, _OPTIONS, n=1) for k in unknown}
        hint = "; ".join(f"{k} -> did you mean {v[0]!r}?" for k, v in sugg.items() if v)
        raise TypeError(f"launch() got unknown option(s): {bad}. {hint} Valid options: {', '.join(_OPTIONS)}.")
    if backend is None:
        backend = default_backend()[0]
    gpus, course_env = gpus_env(), rank_env()
    _validate(nproc, nnodes, backend, timeout, env, threads, max_procs_override or max_procs(), gpus)
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts must be an integer >= 0, got {max_restarts!r}")
    if on_progress is not None and not callable(on_progress):
        raise TypeError(f"on_progress must be a function taking one progress record (a dict), got {on_progress!r}")
    name, target = resolve_program(program)
    if target[0] == "-m":  # a disttutor program's options are checked before any process starts
        check_args(target[1], args)
    argv = _as_argv(args)

    run_dir = run_dir or tempfile.mkdtemp(prefix="disttutor-run-")
    os.makedirs(run_dir, exist_ok=True)
    port, run_id = free_port(), os.path.basename(run_dir)
    child_env = dict(os.environ)
    child_env.update({
        "OMP_NUM_THREADS": str(threads),   # also silences torchrun's OMP banner
        "PYTHONUNBUFFERED": "1",           # lines reach the cell as they are printed
        contract.ENV_RUN_DIR: run_dir,
        contract.ENV_BACKEND: backend,
        contract.ENV_LAUNCHER_PID: str(os.getpid()),
        "TORCH_CPP_LOG_LEVEL": child_env.get("TORCH_CPP_LOG_LEVEL", "ERROR"),
        **gpus,
        **course_env,  # a teacher's (or the tests') variables for every rank: DISTTUTOR_RANK_ENV
    })
    if collective_timeout is not None:
        child_env[contract.ENV_COLLECTIVE_TIMEOUT] = str(float(collective_timeout))
    child_env.update(env or {})

    q: queue.Queue[tuple[int, str | None]] = queue.Queue()
    procs: list[subprocess.Popen] = []
    logs: dict[tuple[int, int], list[str]] = {}
    agent_log: list[str] = []
    t0 = time.perf_counter()
    outcome, err, bar = "finished", None, None
    shown = Display(stream)
    labels: dict[tuple[int, int], str] = {}
    try:
        for node in range(nnodes):
            cmd = _torchrun_argv(target, argv, nproc, nnodes, node, port, run_id, os.path.join(run_dir, "logs"),
                                 max_restarts)
            p = subprocess.Popen(
                cmd, env={**child_env, contract.ENV_AGENT: str(node)}, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1,
                start_new_session=True,  # a terminal's Ctrl-C reaches us, and we stop the tree in order
                # SIGTERM, not SIGKILL: torchrun stops its ranks on SIGTERM; its watchdog
                # (disttutor.launcher.torchrun) finishes the job if that shutdown hangs.
                preexec_fn=functools.partial(tie_to_parent, signal.SIGTERM, os.getpid()) if PRCTL else None)
            procs.append(p)
            threading.Thread(target=_pump, args=(node, p.stdout, q), daemon=True).start()
        open_streams, deadline, tees = nnodes, t0 + timeout, [TeeLines() for _ in range(nnodes)]
        while open_streams:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError
            try:
                node, line = q.get(timeout=min(left, 0.25))
            except queue.Empty:
                continue
            pieces = tees[node].rest() if line is None else tees[node].feed(line)  # --tee: "[defaultN]:" lines
            open_streams -= line is None
            for local, text in pieces:
                if local is None:
                    agent_log.append(text if nnodes == 1 else f"[node {node}] {text}")
                    continue
                text = _TORCH_PREFIX.sub("", text, count=1)
                if text.startswith(contract.PROGRESS_TAG):
                    bar = _progress(bar, text[len(contract.PROGRESS_TAG):], stream)
                    if on_progress is not None:
                        _notify(on_progress, text[len(contract.PROGRESS_TAG):])
                    continue
                logs.setdefault((node, local), []).append(text)
                if stream:
                    shown.line(_label(labels, node, local, nnodes, run_dir), text)
        for p in procs:
            p.wait(timeout=max(0.1, deadline - time.perf_counter()))
    except (TimeoutError, subprocess.TimeoutExpired):
        outcome = "timeout"
        kill_tree([p.pid for p in procs])
    except KeyboardInterrupt:
        outcome = "interrupted"
        kill_tree([p.pid for p in procs])
    except BaseException:
        kill_tree([p.pid for p in procs])
        raise
    wall = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    shown.close()
    for p in procs:
        p.wait()
    result = collect(name, nproc, nnodes, [p.returncode for p in procs], logs, agent_log, run_dir, wall, outcome)
    result.command = plain_command(target, argv, nproc, nnodes)
    if outcome == "timeout":
        err = LaunchTimeout(result, f"timed out after {timeout:g}s")
    elif outcome == "interrupted":
        err = LaunchInterrupted(result, "interrupted")
    elif not result.ok and check:
        err = LaunchError(result, "failed")
    if err is not None and (check or outcome == "interrupted"):
        raise err
    return result
