"""One live rank: a real torchrun worker that runs cells sent by the kernel (chapter 0).

Started by :class:`disttutor.live.Ranks` as ``python -m disttutor.live.worker``
under torchrun, like every program of the course: the process group comes from
:func:`disttutor.rank.runtime.setup` (so it dies with torchrun, and torchrun with
the kernel). It then connects back to the kernel over the authenticated
loopback channel of :mod:`disttutor.live.protocol` and serves one request at a
time in its main thread, keeping one namespace for the whole session.

How the kernel gets a stuck rank out:

* ``SIGUSR1`` -> :mod:`faulthandler` writes every thread's Python stack to
  ``stack{rank}.txt``. It runs in C, so it answers even while the main thread
  sits inside a C++ collective that holds no Python frame we could reach.
* ``SIGINT`` -> ``KeyboardInterrupt`` in the cell, when the rank is running
  Python; a rank blocked in C++ does not see it until the call returns, which
  is why the kernel then restarts the pool instead of waiting.
"""
from __future__ import annotations

import ast
import faulthandler
import io
import linecache
import os
import pickle
import signal
import threading
import traceback
from contextlib import redirect_stderr, redirect_stdout

import torch
import torch.distributed as dist

from disttutor.rank import runtime
from disttutor.live import protocol

_MAX_REPR = 4000  # a huge tensor's repr would flood the cell; the value stays on the rank


class _LineStream(io.TextIOBase):
    """stdout/stderr of a cell, sent to the kernel line by line as it is printed."""

    def __init__(self, conn, name: str):
        self.conn, self.name, self.buf = conn, name, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.buf += text
        if "\n" in self.buf:
            done, self.buf = self.buf.rsplit("\n", 1)
            protocol.send(self.conn, "out", self.name, done + "\n")
        return len(text)

    def flush(self) -> None:
        if self.buf:
            protocol.send(self.conn, "out", self.name, self.buf)
            self.buf = ""


def _trimmed(exc: BaseException, filename: str) -> str:
    """The traceback from the learner's cell down, without this worker's frames."""
    frames = traceback.extract_tb(exc.__traceback__)
    first = next((i for i, f in enumerate(frames) if f.filename == filename), None)
    keep = [] if first is None else [f for f in frames[first:] if f.filename == filename]
    if first is not None and frames[-1].filename != filename:
        keep.append(frames[-1])  # where in torch it finally failed: one line of context
    head = ["Traceback (most recent call last):\n"] if keep else []
    text = "".join(head + traceback.format_list(keep) + traceback.format_exception_only(type(exc), exc))
    return text.rstrip()


def run_cell(conn, ns: dict, filename: str, source: str) -> dict:
    # linecache lets tracebacks (and the kernel's stack reports) quote the cell's lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    out, err = _LineStream(conn, "stdout"), _LineStream(conn, "stderr")
    reply = {"status": "ok", "value": None}
    try:
        with redirect_stdout(out), redirect_stderr(err):
            tree = ast.parse(source, filename)
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, filename, "exec"), ns)
            if last is not None:  # REPL-like: the last expression's value is shown
                value = eval(compile(ast.Expression(last.value), filename, "eval"), ns)
                if value is not None:
                    ns["_"] = value
                    text = repr(value)
                    reply["value"] = text if len(text) <= _MAX_REPR else text[:_MAX_REPR] + " ...(truncated)"
    except KeyboardInterrupt as exc:
        reply = {"status": "interrupted", "error": _trimmed(exc, filename)}
    except BaseException as exc:  # SystemExit too: a cell must not end the rank
        reply = {"status": "error", "error": _trimmed(exc, filename)}
    finally:
        out.flush()
        err.flush()
    return reply


class _NoCuda(pickle.Pickler):
    def reducer_override(self, obj):
        if isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
            raise ValueError(f"it holds a tensor on {obj.device}; the kernel runs on the CPU. "
                             "Pull a CPU copy instead, e.g. `t_cpu = t.cpu()` on the ranks, then pull t_cpu")
        return NotImplemented


def pull(ns: dict, name: str, rank: int) -> dict:
    if name not in ns:
        return {"status": "error", "error": f"name {name!r} is not defined on rank {rank}"}
    buf = io.BytesIO()
    try:
        _NoCuda(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(ns[name])
    except Exception as exc:  # noqa: BLE001 - any pickling failure is the learner's to read
        return {"status": "error",
                "error": f"rank {rank} cannot send {name} ({type(ns[name]).__name__}) to the kernel: {exc}"}
    return {"status": "ok", "payload": buf.getvalue()}


def names(ns: dict, builtin: set) -> dict:
    return {"status": "ok", "names": {k: type(v).__name__ for k, v in ns.items()
                                      if k not in builtin and not k.startswith("_")}}


def serve(conn, ns: dict, rank: int) -> None:
    builtin = set(ns)
    while True:
        try:
            msg = protocol.recv(conn)
        except KeyboardInterrupt:
            continue  # an interrupt meant for a cell that had already finished
        except (EOFError, OSError):
            return  # the kernel is gone: leave, runtime.setup tears the group down
        kind = msg[0]
        if kind == "run":
            reply = run_cell(conn, ns, msg[1], msg[2])
        elif kind == "pull":
            reply = pull(ns, msg[1], rank)
        elif kind == "push":
            try:
                ns[msg[1]] = pickle.loads(msg[2])  # the peer passed the HMAC challenge
                reply = {"status": "ok"}
            except Exception as exc:  # noqa: BLE001
                reply = {"status": "error", "error": f"rank {rank} cannot load {msg[1]}: {exc}"}
        elif kind == "names":
            reply = names(ns, builtin)
        elif kind == "stop":
            protocol.send(conn, "done", {"status": "ok"})
            return
        else:
            reply = {"status": "error", "error": f"unknown request {kind!r}"}
        protocol.send(conn, "done", reply)


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # torchrun may hand us SIGINT ignored
    key = protocol.read_key(os.environ[protocol.ENV_KEYFILE])
    with runtime.setup() as ctx:
        # 'a' (O_APPEND): the kernel truncates the file before each request, and
        # appends then land at its start instead of after a hole.
        dump = open(protocol.stack_path(os.environ[protocol.ENV_STACKS], ctx.rank), "a")
        faulthandler.register(getattr(signal, protocol.STACK_SIGNAL), file=dump, all_threads=True)
        conn = protocol.connect(os.environ[protocol.ENV_ADDR], key)
        ns = {"torch": torch, "dist": dist, "nn": torch.nn, "rank": ctx.rank, "world_size": ctx.world_size,
              "device": ctx.device, "backend": ctx.backend, "__name__": "__live__"}
        protocol.send(conn, "hello", {"rank": ctx.rank, "pid": os.getpid(), "backend": ctx.backend,
                                      "device": str(ctx.device), "thread": threading.main_thread().ident})
        try:
            serve(conn, ns, ctx.rank)
        finally:
            conn.close()


if __name__ == "__main__":
    main()
