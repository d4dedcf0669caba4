"""Live ranks, kernel side: a pool of persistent torchrun workers driven from cells (chapter 0).

``Ranks(4)`` starts ``python -m disttutor.live.worker`` on 4 ranks under torchrun
(a subprocess, never a fork of the kernel), the same way :func:`disttutor.launch`
starts programs: torchrun in its own session, tied to the kernel with
``PR_SET_PDEATHSIG``, stores on loopback. Each rank connects back over an
authenticated loopback channel (:mod:`disttutor.live.protocol`), then:

:mod:`disttutor.live.cells` runs cells on them. This module is the pool's
life: start (every rank connected or a clear error within ``start_timeout``),
restart, stop, and the kill that leaves no process behind.
"""
from __future__ import annotations

import atexit
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from dataclasses import dataclass
from typing import Any

from disttutor import contract
from disttutor.contract.config import require_positive
from disttutor.launcher.launch import _torchrun_argv, free_port, max_procs
from disttutor.contract.procs import PRCTL, die_with_parent, kill_tree
from disttutor.live import protocol
from disttutor.live.cells import CellRunner, LiveError

_POOLS: "weakref.WeakSet[Ranks]" = weakref.WeakSet()


def _die_with_kernel() -> None:
    # SIGKILL, not launch()'s SIGTERM: a torchrun agent SIGTERMed on a loaded machine was seen to
    # stop its workers and then hang itself (an orphan). Killed outright, its ranks still follow it
    # through their own PR_SET_PDEATHSIG (runtime.tie_to_parent).
    die_with_parent(signal.SIGKILL)


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


class Ranks(CellRunner):
    """``with Ranks(4) as r: r.run("t = torch.ones(2) * rank; dist.all_reduce(t); t")``.

    This class starts, restarts and stops the ranks; running cells on them (and unsticking
    a stuck one) is :class:`disttutor.live.cells.CellRunner`'s job.
    """

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

@atexit.register
def _stop_all() -> None:
    for pool in list(_POOLS):
        pool.stop()
