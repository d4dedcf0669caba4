"""Live ranks, running a cell (chapter 0): send the source, gather every rank's answer, unstick.

* ``run(code)`` sends the cell's *source* to every rank and gathers each
  rank's output, last value and error into a :class:`CellResult`;
* a cell that outlives its timeout (or the stop button) makes the kernel read
  every busy rank's Python stack, interrupt them, and -- when one cannot be
  interrupted because it sits in a C++ collective -- restart the pool, saying
  that the namespaces were lost. The kernel never waits without a bound.

:class:`CellRunner` is the half of :class:`disttutor.live.pool.Ranks` that talks to
ranks which are already up; the pool (its other half) provides ``config``,
``info`` (each rank's hello: pid, thread), ``_conns`` (rank -> connection),
``_dir``, ``_proc``, ``restart()`` and ``_log_tail()``.
"""
from __future__ import annotations

import os
import pickle
import signal
import time
from multiprocessing.connection import wait
from typing import Any, Iterable

from disttutor.live import protocol
from disttutor.live.report import CellResult, parse_stack, where

INTERRUPT_GRACE_S = 2.0  # a rank in Python code answers SIGINT within milliseconds


class LiveError(RuntimeError):
    """Something a learner can act on went wrong with the live ranks."""


class CellRunner:
    """Cells, pulls and pushes on the pool's ranks (mixed into :class:`disttutor.live.pool.Ranks`)."""

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
            # two short lines: where the ranks were, then what it cost the learner
            res.message = (f"Rank(s) {names} could not be interrupted (blocked outside Python, inside a C++ "
                           f"collective).\nRestarted the pool ({self.config.nproc} ranks): every rank's "
                           "namespace was lost; re-run the cells that define your variables")
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
