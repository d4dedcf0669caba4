"""``%ranks`` / ``%%ranks``: live ranks from notebook cells (chapter 0).

    %load_ext disttutor
    %ranks start -n 4 [--backend auto|gloo|nccl] [--timeout 30]
    %%ranks [0,2] [--timeout 10]      # the cell runs on those ranks (default: all)
    %ranks pull t [--ranks 0,2]       # each rank's t -> the kernel's t (list in rank order)
    %ranks push w                     # the kernel's w -> every rank
    %ranks status | restart | stop

The magics only parse and print; :class:`~disttutor.live.pool.Ranks` does the work.
"""
from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass

from IPython.core.magic import Magics, line_cell_magic, magics_class

from disttutor.live.cells import LiveError
from disttutor.live.pool import Ranks
from disttutor.live.report import CellResult


@dataclass
class _State:
    pool: Ranks | None = None
    last: CellResult | None = None


STATE = _State()


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # a clear message, not SystemExit inside the kernel
        raise LiveError(f"%ranks: {message}. {USAGE}")


USAGE = ("Usage: %ranks start -n N | status | pull NAME | push NAME | restart | stop; "
         "%%ranks [RANKS like 0,2] [--timeout S] as a cell magic.")


def _rank_list(text: str) -> list[int]:
    try:
        return sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise LiveError(f"%%ranks: ranks must look like 0,2 -- got {text!r}") from None


def _line_parser() -> _Parser:
    p = _Parser(prog="%ranks", add_help=False)
    p.add_argument("action", choices=["start", "status", "pull", "push", "restart", "stop"])
    p.add_argument("name", nargs="?")
    p.add_argument("-n", "--nproc", type=int, default=2)
    p.add_argument("--backend", default="auto")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--ranks", default=None)
    return p


def _cell_parser() -> _Parser:
    p = _Parser(prog="%%ranks", add_help=False)
    p.add_argument("ranks", nargs="?", default=None)
    p.add_argument("--timeout", type=float, default=None)
    p.add_argument("--quiet", action="store_true", help="return the result without printing it")
    return p


def _pool() -> Ranks:
    if STATE.pool is None or STATE.pool._proc is None:
        raise LiveError("no live ranks yet: run `%ranks start -n 2` first")
    return STATE.pool


@magics_class
class RanksMagics(Magics):
    @line_cell_magic
    def ranks(self, line: str, cell: str | None = None):
        try:
            return self._cell(line, cell) if cell is not None else self._line(line)
        except LiveError as exc:
            print(f"live ranks: {exc}")  # one readable message, no traceback into the package

    def _cell(self, line: str, cell: str):
        a = _cell_parser().parse_args(shlex.split(line))
        ranks = _rank_list(a.ranks) if a.ranks else None
        res = _pool().run(cell, ranks=ranks, timeout=a.timeout)
        STATE.last = res
        if not a.quiet:
            print(res.text())

    def _line(self, line: str):
        a = _line_parser().parse_args(shlex.split(line))
        if a.action == "start":
            if STATE.pool is not None:
                STATE.pool.stop()
            STATE.pool = Ranks(a.nproc, backend=a.backend, timeout=a.timeout)
            info = [STATE.pool.info[r] for r in sorted(STATE.pool.info)]
            print(f"{a.nproc} live ranks ready: backend {info[0]['backend']}, devices "
                  f"{', '.join(i['device'] for i in info)} (started in {STATE.pool.start_s:.1f} s)")
        elif a.action == "stop":
            if STATE.pool is not None:
                STATE.pool.stop()
                STATE.pool = None
            print("live ranks stopped")
        elif a.action == "restart":
            _pool().restart()
            print(f"restarted {_pool().config.nproc} live ranks in {_pool().start_s:.1f} s; every namespace is empty")
        elif a.action == "status":
            for row in _pool().status():
                names = ", ".join(f"{k}: {v}" for k, v in sorted(row["names"].items())) or "(none)"
                print(f"rank {row['rank']}  pid {row['pid']}  {row['backend']}  {row['device']}  names: {names}")
        elif a.action in ("pull", "push"):
            if not a.name or not a.name.isidentifier():
                raise LiveError(f"%ranks {a.action} needs a variable name, e.g. `%ranks {a.action} t`")
            ranks = _rank_list(a.ranks) if a.ranks else None
            if a.action == "pull":
                self.shell.user_ns[a.name] = _pool().pull(a.name, ranks)
                print(f"{a.name} = each rank's {a.name} ({'list in rank order' if ranks is None else 'dict rank -> value'})")
            else:
                if a.name not in self.shell.user_ns:
                    raise LiveError(f"the kernel has no variable {a.name!r} to push")
                _pool().push(a.name, self.shell.user_ns[a.name], ranks)
                print(f"sent {a.name} to {'every rank' if ranks is None else 'ranks ' + a.ranks}")


def load(ipython) -> None:
    ipython.register_magics(RanksMagics)
