"""Live ranks, kernel side: a pool of persistent torchrun workers driven from cells (chapter 0).

``Ranks(4)`` starts ``python -m disttutor.live.worker`` on 4 ranks under torchrun
(a subprocess, never a fork of the kernel), the same way :func:`disttutor.launch`
starts programs: torchrun in its own session, tied to the kernel with
``PR_SET_PDEATHSIG``, stores on loopback. Each rank connects back over an
authenticated loopback channel (:mod:`disttutor.live.protocol`), then:

* ``run(code)`` sends the cell's *source* to every rank and gathers each
  rank's output, last value and error into a :class:`CellResult`;
* a cell that outlives its timeout (or the stop button) makes the kernel read
  every busy rank's Python stack, interrupt them, and -- when one cannot be
  interrupted because it sits in a C++ collective -- restart the pool, saying
  that the namespaces were lost. The kernel never waits without a bound.
"""
from __future__ import annotations

import atexit
import os
import pickle
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Iterable

from .. import contract
from ..config import require_positive
from ..launch import _torchrun_argv, free_port, max_procs
from ..procs import PRCTL, die_with_parent, kill_tree
from . import protocol
from .report import CellResult, parse_stack, where

_POOLS: "weakref.WeakSet[Ranks]" = weakref.WeakSet()
INTERRUPT_GRACE_S = 2.0  # a rank in Python code answers SIGINT within milliseconds


def _die_with_kernel() -> None:
    # SIGKILL, not launch()'s SIGTERM: a torchrun agent SIGTERMed on a loaded machine was seen to
    # stop its workers and then hang itself (an orphan). Killed outright, its ranks still follow it
    # through their own PR_SET_PDEATHSIG (runtime.tie_to_parent).
    die_with_parent(signal.SIGKILL)


class LiveError(RuntimeError):
    """Something a learner can act on went wrong with the live ranks."""


@dataclass(frozen=True)
class PoolConfig:
    nproc: int = 2
    backend: str = "auto"
    timeout: float = 30.0          # default seconds a cell may run
    start_timeout: float = 120.0   # seconds the ranks may take to start (a loaded machine is slow)
    threads: int = 1               # OMP_NUM_THREADS per rank

    def __post_init__(self):
        require_positive(self, "nproc", "threads")
        if self.nproc > max_procs():
            raise ValueError(f"nproc={self.nproc} is too many live ranks for this machine (at most {max_procs()})")
        if self.backend not in ("auto", "gloo", "nccl"):
            raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', got {self.backend!r}")
        for name in ("timeout", "start_timeout"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {v!r}")


class Ranks:
    """``with Ranks(4) as r: r.run("t = torch.ones(2) * rank; dist.all_reduce(t); t")``."""

    def __init__(self, nproc: int = 2, backend: str = "auto", timeout: float = 30.0,
                 start_timeout: float = 120.0, threads: int = 1):
        self.config = PoolConfig(nproc, backend, timeout, start_timeout, threads)
        self._proc: subprocess.Popen | None = None
        self._conns: dict[int, Any] = {}
        self.info: dict[int, dict] = {}
        self.cells = 0
        self.restarts = 0
        self.start_s = 0.0
        self._start()
        _POOLS.add(self)

    # ---------------------------------------------------------------- lifecycle
    def _start(self) -> None:
        t0 = time.perf_counter()
        self._dir = tempfile.mkdtemp(prefix="disttutor-live-")  # mode 0700: the key file lives here
        key = secrets.token_bytes(32)
        env = dict(os.environ)
        env.update({"OMP_NUM_THREADS": str(self.config.threads), "PYTHONUNBUFFERED": "1",
                    contract.ENV_RUN_DIR: self._dir, contract.ENV_BACKEND: self.config.backend,
                    # the kernel's cell timeout speaks first, with every rank's stack; gloo's
                    # own collective timeout is only the backstop.
                    contract.ENV_COLLECTIVE_TIMEOUT: str(float(self.config.timeout) + 60.0),
                    "TORCH_CPP_LOG_LEVEL": env.get("TORCH_CPP_LOG_LEVEL", "ERROR"),
                    protocol.ENV_KEYFILE: protocol.write_key(self._dir, key),
                    protocol.ENV_STACKS: self._dir})
        server = protocol.listen()
        env[protocol.ENV_ADDR] = "127.0.0.1:%d" % server.getsockname()[1]
        cmd = _torchrun_argv(["-m", "disttutor.live.worker"], [], self.config.nproc, 1, 0, free_port(),
                             os.path.basename(self._dir), os.path.join(self._dir, "logs"))
        self._log = open(os.path.join(self._dir, "torchrun.log"), "wb")
        self._proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=subprocess.STDOUT, start_new_session=True,
                                      preexec_fn=_die_with_kernel if PRCTL else None)
        self.refused = 0
        try:
            self._accept_all(server, key, t0 + self.config.start_timeout)
        except BaseException:
            self._kill()
            raise
        finally:
            server.close()  # nobody else can even knock once the ranks are in
        self.start_s = time.perf_counter() - t0

    def _accept_all(self, server: socket.socket, key: bytes, deadline: float) -> None:
        while len(self._conns) < self.config.nproc:
            if self._proc.poll() is not None:
                raise LiveError(f"the ranks failed to start (torchrun exited with {self._proc.returncode}):\n"
                                + self._log_tail())
            if time.perf_counter() > deadline:
                raise LiveError(f"the ranks did not start within {self.config.start_timeout:g} s\n" + self._log_tail())
            try:
                conn = protocol.accept(server, key, timeout=0.2)
            except socket.timeout:
                continue
            except (protocol.AuthenticationError, OSError, EOFError):
                self.refused += 1  # a peer without the pool's secret: dropped, never read from
                continue
            _, info = protocol.recv(conn)
            self._conns[info["rank"]] = conn
            self.info[info["rank"]] = info

    def _log_tail(self, n: int = 12) -> str:
        try:
            with open(os.path.join(self._dir, "torchrun.log"), errors="replace") as f:
                lines = [x.rstrip() for x in f if x.strip()]
        except OSError:
            return ""
        return "\n".join(lines[-n:]).replace(self._dir, "<pool dir>")

    def _kill(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        if self._proc is not None and self._proc.poll() is None:
            kill_tree([self._proc.pid])
        if self._proc is not None:
            self._proc.wait()
            self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def stop(self) -> None:
        """End every rank (politely, then by force); safe to call twice."""
        if self._proc is None:
            return
        for conn in self._conns.values():
            try:
                protocol.send(conn, "stop")
            except OSError:
                pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._kill()
        self._proc = None

    def restart(self) -> None:
        """A fresh pool of the same size: new processes, empty namespaces."""
        self._kill()
        self.info.clear()
        self._start()
        self.restarts += 1

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def pids(self) -> list[int]:
        """torchrun's pid and every rank's (for the no-orphans checks)."""
        return ([self._proc.pid] if self._proc else []) + [self.info[r]["pid"] for r in sorted(self.info)]

    def __enter__(self) -> "Ranks":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self):
        try:
            self.stop()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # ---------------------------------------------------------------- requests
    def _targets(self, ranks: Iterable[int] | None) -> list[int]:
        if self._proc is None:
            raise LiveError("the live ranks are stopped: start them again (%ranks start / Ranks(n))")
        if ranks is None:
            return sorted(self._conns)
        ranks = sorted(set(ranks))
        bad = [r for r in ranks if r not in self._conns]
        if bad:
            raise ValueError(f"no rank {bad[0]}: this pool has ranks 0..{self.config.nproc - 1}")
        return ranks

    def run(self, code: str, ranks: Iterable[int] | None = None, timeout: float | None = None,
            echo: bool = False) -> CellResult:
        """Run ``code`` on ``ranks`` (default all), each in its own persistent namespace."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a string of Python source, got {type(code).__name__}")
        timeout = self.config.timeout if timeout is None else timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        targets = self._targets(ranks)
        self.cells += 1
        filename = f"<live cell {self.cells}>"
        res = CellResult(targets, outputs={r: "" for r in targets})
        t0 = res.started = time.perf_counter()
        pending = self._send_all(targets, "run", filename, code)
        try:
            self._gather(pending, res, t0 + timeout, echo)
        except KeyboardInterrupt:
            res.interrupted = True
        if pending:
            res.timed_out = not res.interrupted
            res.timeout_s = timeout
            self._unstick(pending, res, filename, code)
        dead = [r for r in targets if res.status.get(r) == "died"]
        if dead and not res.message:
            tail = self._log_tail(6)
            self.restart()
            res.message = (f"Rank(s) {', '.join(map(str, dead))} died during the cell; restarted the pool "
                           f"({self.config.nproc} ranks), every namespace was lost. torchrun said:\n{tail}")
        res.wall_s = time.perf_counter() - t0
        for d in (res.status, res.values, res.errors, res.stuck):  # rank order, not finishing order
            items = sorted(d.items())
            d.clear()
            d.update(items)
        return res

    def _send_all(self, targets: list[int], *msg: Any) -> dict:
        pending = {}
        for r in targets:
            protocol.send(self._conns[r], *msg)
            pending[self._conns[r]] = r
        return pending

    def _gather(self, pending: dict, res: CellResult | None, deadline: float, echo: bool = False,
                replies: dict | None = None) -> None:
        while pending:
            left = deadline - time.perf_counter()
            if left <= 0:
                return
            for conn in wait(list(pending), timeout=min(left, 0.5)):
                r = pending[conn]
                try:
                    msg = protocol.recv(conn)
                except (EOFError, OSError, pickle.UnpicklingError):
                    pending.pop(conn)
                    if res is not None:
                        res.status[r] = "died"
                    if replies is not None:
                        replies[r] = {"status": "error", "error": f"rank {r} died"}
                    continue
                if msg[0] == "out" and res is not None:
                    res.outputs[r] += msg[2]
                    if echo:
                        print(f"[rank {r}] {msg[2]}", end="", flush=True)
                elif msg[0] == "done":
                    pending.pop(conn)
                    if replies is not None:
                        replies[r] = msg[1]
                    if res is not None:
                        rep = msg[1]
                        res.status[r] = rep["status"]
                        res.values[r] = rep.get("value")
                        if rep.get("error"):
                            res.errors[r] = rep["error"]

    def stacks(self, ranks: Iterable[int]) -> dict[int, list]:
        """Every listed rank's main-thread Python stack, innermost frame first (via faulthandler)."""
        ranks = list(ranks)
        for r in ranks:
            open(protocol.stack_path(self._dir, r), "w").close()
            try:
                os.kill(self.info[r]["pid"], getattr(signal, protocol.STACK_SIGNAL))
            except ProcessLookupError:
                pass
        out, deadline = {}, time.perf_counter() + 2.0
        while len(out) < len(ranks) and time.perf_counter() < deadline:
            time.sleep(0.05)
            for r in ranks:
                if r not in out:
                    with open(protocol.stack_path(self._dir, r), errors="replace") as f:
                        frames = parse_stack(f.read(), self.info[r]["thread"])
                    if frames:
                        out[r] = frames
        return {r: out.get(r, []) for r in ranks}

    def _unstick(self, pending: dict, res: CellResult, filename: str, code: str) -> None:
        stuck = sorted(pending.values())
        for r, frames in self.stacks(stuck).items():  # where each one waits, *before* we disturb it
            res.stuck[r] = where(frames, filename, code)
            res.status[r] = "stuck"
        for r in stuck:
            try:
                os.kill(self.info[r]["pid"], signal.SIGINT)
            except ProcessLookupError:
                pass
        try:
            self._gather(pending, res, time.perf_counter() + INTERRUPT_GRACE_S)
        except KeyboardInterrupt:
            pass
        still = sorted(pending.values())
        for r in stuck:
            if r not in still:
                res.status[r] = "interrupted"
        if still:
            names = ", ".join(map(str, still))
            res.message = (f"Rank(s) {names} could not be interrupted (blocked outside Python, e.g. inside a "
                           f"C++ collective): restarted the pool ({self.config.nproc} ranks); every rank's "
                           "namespace was lost -- re-run the cells that define your variables.")
            for r in still:
                res.status[r] = "stuck"
            res.message_s = time.perf_counter() - res.started
            t0 = time.perf_counter()
            self.restart()
            res.restart_s = time.perf_counter() - t0
            res.message += f" (restart took {res.restart_s:.1f} s)"
        else:
            res.message_s = time.perf_counter() - res.started
            res.message = "Every rank was interrupted; the pool is ready and the namespaces are kept."

    def _request(self, ranks: Iterable[int] | None, *msg: Any) -> dict[int, dict]:
        targets = self._targets(ranks)
        replies: dict[int, dict] = {}
        pending = self._send_all(targets, *msg)
        self._gather(pending, None, time.perf_counter() + self.config.timeout, replies=replies)
        if pending:
            self.restart()
            raise LiveError(f"rank(s) {sorted(pending.values())} did not answer within "
                            f"{self.config.timeout:g} s: restarted the pool, namespaces were lost")
        errors = [replies[r]["error"] for r in targets if replies[r]["status"] != "ok"]
        if errors:
            raise LiveError("\n".join(errors))
        return replies

    def pull(self, name: str, ranks: Iterable[int] | None = None) -> list | dict:
        """Each rank's ``name``: a list in rank order (all ranks) or a ``{rank: value}`` dict (a subset)."""
        replies = self._request(ranks, "pull", name)
        values = {r: pickle.loads(rep["payload"]) for r, rep in sorted(replies.items())}
        return list(values.values()) if ranks is None else values

    def push(self, name: str, value: Any, ranks: Iterable[int] | None = None) -> None:
        """Bind ``name`` to a copy of ``value`` in every rank's namespace."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"name must be a Python identifier, got {name!r}")
        try:
            payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001
            raise LiveError(f"cannot send {name} ({type(value).__name__}) to the ranks: it cannot be pickled "
                            f"({exc}). Send plain data (numbers, lists, CPU tensors) or define it on the ranks.") from None
        self._request(ranks, "push", name, payload)

    def status(self) -> list[dict]:
        """One row per rank: rank, pid, backend, device and the names defined there."""
        replies = self._request(None, "names")
        return [{**{k: self.info[r][k] for k in ("rank", "pid", "backend", "device")},
                 "names": replies[r]["names"]} for r in sorted(replies)]


@atexit.register
def _stop_all() -> None:
    for pool in list(_POOLS):
        pool.stop()
