"""``%ranks`` / ``%%ranks``: live ranks from notebook cells (chapter 0).

    %load_ext disttutor
    %ranks start -n 4 [--backend auto|gloo|nccl] [--timeout 30]
    %%ranks [0,2] [--timeout 10]      # the cell runs on those ranks (default: all)
    %%ranks --keep-going              # a cell that fails on purpose: shown, but Run All goes on
    %ranks pull t [--ranks 0,2]       # each rank's t -> the kernel's t (list in rank order)
    %ranks push w                     # the kernel's w -> every rank
    %ranks status | restart | stop

The magics only parse and print; :class:`~disttutor.live.pool.Ranks` does the work. A cell in
which a rank raised, died, hung or was interrupted fails like any cell that raises (so Run All
stops there), after every rank's state is shown; so does a magic used wrongly. Both fail with one
line, not a traceback into this package.
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
    stopped: int = 0      # how many ranks `%ranks stop` ended (0: none stopped yet)


STATE = _State()


class RanksFailed(Exception):
    """Makes the cell fail (Run All stops at it); IPython shows it as these lines, not a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {line}" if i == 0 else line for i, line in enumerate(str(self).splitlines())]


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
    p.add_argument("--quiet", action="store_true", help="return the result without printing it (a failure is shown)")
    p.add_argument("--keep-going", action="store_true", help="do not fail the cell when a rank fails")
    return p


def _pool() -> Ranks:
    if STATE.pool is None or STATE.pool._proc is None:
        if STATE.stopped:
            raise LiveError(f"the live ranks are stopped: `%ranks start -n {STATE.stopped}` starts them again")
        raise LiveError("no live ranks yet: run `%ranks start -n 2` first")
    return STATE.pool


def _failure(res: CellResult) -> str:
    """One line: on which ranks and how the cell failed."""
    bad = [r for r in res.ranks if res.status.get(r) != "ok"]
    how = []
    for r in bad:
        st = res.status.get(r, "?")
        if st == "error":
            how.append(f"rank {r} raised {(res.errors.get(r, '').splitlines() or ['?'])[-1]}")
        else:
            how.append(f"rank {r} {'is ' if st == 'stuck' else 'was ' if st == 'interrupted' else ''}{st}")
    when = (f"timed out after {res.timeout_s:g} s: " if res.timed_out else "was interrupted: " if res.interrupted
            else "failed: ")
    return f"the cell {when}{'; '.join(how)} ({len(bad)} of {len(res.ranks)} ranks; every rank's state is above)"


@magics_class
class RanksMagics(Magics):
    @line_cell_magic
    def ranks(self, line: str, cell: str | None = None):
        try:
            return self._cell(line, cell) if cell is not None else self._line(line)
        except (LiveError, ValueError) as exc:  # one readable message, no traceback into the package
            raise RanksFailed(f"live ranks: {exc}") from None

    def _cell(self, line: str, cell: str):
        a = _cell_parser().parse_args(shlex.split(line))
        ranks = _rank_list(a.ranks) if a.ranks else None
        res = _pool().run(cell, ranks=ranks, timeout=a.timeout)
        STATE.last = res
        if not a.quiet or not res.ok:
            print(res.text(), flush=True)
        if not res.ok and not a.keep_going:
            raise RanksFailed(f"%%ranks: {_failure(res)}")

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
                STATE.stopped = STATE.pool.config.nproc
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
