"""How ranks' lines are shown while a job runs (chapter 0): readable, short, said once.

:func:`disttutor.launch` prints every line a rank writes, prefixed ``[rank r]``.
Three things make raw output hard to read in a cell, and this module fixes
them in what is *shown* (the rank's log in the :class:`~disttutor.RunResult`
keeps every line as it was written):

* absolute paths of this machine (``/home/you/.venv/lib/python3.11/site-packages/torch/...``)
  become ``site-packages/torch/...`` and ``disttutor/...``;
* a warning that several ranks (or one rank in a loop) emit is shown once;
  :meth:`Display.close` then says how many repeats were hidden;
* nothing else is changed or dropped.

It also names each line's rank (:func:`label`) and turns rank 0's progress
lines into a tqdm bar (:func:`progress`).
"""
from __future__ import annotations

import json
import os
import re
import site
import sysconfig

from disttutor.launcher.collect import read_reports

# "path/to/file.py:12: UserWarning: message" (Python's warnings.formatwarning) or "UserWarning: message".
_WARNING = re.compile(r"^(?:.*?:\d+: )?(\w*Warning): (.*)$")


def _roots() -> list[tuple[str, str]]:
    """(absolute prefix, what to show instead), longest first."""
    pkg_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the course checkout
    pairs = []
    for sp in {sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib"),
               *getattr(site, "getsitepackages", lambda: [])()}:
        if sp:
            pairs.append((sp.rstrip(os.sep) + os.sep, "site-packages" + os.sep))
    pairs.append((pkg_parent.rstrip(os.sep) + os.sep, ""))
    stdlib = sysconfig.get_paths().get("stdlib")
    if stdlib:
        pairs.append((stdlib.rstrip(os.sep) + os.sep, "python" + os.sep))
    return sorted(set(pairs), key=lambda p: -len(p[0]))


_ROOTS = _roots()


def short_paths(text: str) -> str:
    """Show this machine's install paths relative: ``site-packages/torch/...``, ``disttutor/...``."""
    if os.sep not in text:
        return text
    for prefix, short in _ROOTS:
        if prefix in text:
            text = text.replace(prefix, short)
    return text


class Display:
    """Prints rank lines; each distinct warning once (with its source line), repeats counted."""

    def __init__(self, show: bool):
        self.show = show
        self.seen: dict[str, int] = {}  # warning text -> times hidden
        self._hiding: set[str] = set()  # labels whose next indented line belongs to a hidden warning

    def line(self, label: str, text: str) -> None:
        if not self.show:
            return
        if label in self._hiding:
            self._hiding.discard(label)
            if text.startswith("  "):  # warnings.formatwarning's second line: the source that warned
                return
        m = _WARNING.match(text.strip())
        if m:
            key = f"{m.group(1)}: {m.group(2)}"
            if key in self.seen:
                self.seen[key] += 1
                self._hiding.add(label)
                return
            self.seen[key] = 0
        print(f"[{label}] {short_paths(text)}", flush=True)

    def close(self) -> None:
        hidden = {k: n for k, n in self.seen.items() if n}
        if self.show and hidden:
            total = sum(hidden.values())
            print(f"({total} repeated warning line(s) not shown again; every line is in result.logs)")
            for key, n in list(hidden.items())[:5]:
                print(f"  x{n + 1}: {short_paths(key)[:160]}")
            if len(hidden) > 5:
                print(f"  ... and {len(hidden) - 5} more")


def label(labels: dict, node: int, local: int, nnodes: int, run_dir: str) -> str:
    """``rank R`` for a line from (agent, local rank).

    With several agents, c10d rendezvous numbers them by (address, pid), not by
    ``--node-rank``, so the global rank is looked up in the ranks' reports
    (written at setup); until one appears the line is labelled by agent.
    """
    if (node, local) in labels:
        return labels[(node, local)]
    if nnodes == 1:
        labels[(node, local)] = f"rank {local}"
    else:
        for rank, rep in read_reports(run_dir).items():
            if (rep.get("agent"), rep.get("local_rank")) == (node, local):
                labels[(node, local)] = f"rank {rank}"
                break
        else:
            return f"agent {node} local {local}"
    return labels[(node, local)]


def progress(bar, payload: str, show: bool):
    """Turn a rank-0 ``runtime.progress`` line into a tqdm bar (widget in Jupyter, text in a terminal)."""
    if not show:
        return bar
    try:
        d = json.loads(payload)
    except ValueError:
        return bar
    if bar is None:
        from tqdm.auto import tqdm

        bar = tqdm(total=d["total"], desc=d.get("desc") or "rank 0", leave=False)
    bar.n = d["step"]
    if d.get("metrics"):
        bar.set_postfix(d["metrics"], refresh=False)
    bar.refresh()
    return bar


# torchrun --tee copies each worker's output file to its own stdout line by line, "[defaultN]:" first. It
# reads a line the worker is still writing as a partial one (torch's tail_logfile: readline at EOF), so two
# ranks' text can share one line of the agent's output -- "[default0]:hal[default1]:a whole line" -- and the
# rest of rank 0's line comes later as "[default0]:f of it".
_TEE = re.compile(r"\[default(\d+)\]:")


class TeeLines:
    """Each worker's lines out of one agent's --tee output, its partial pieces joined back in order."""

    def __init__(self) -> None:
        self._partial: dict[int, str] = {}

    def feed(self, line: str) -> list[tuple[int | None, str]]:
        """One line of the agent's output -> its complete lines: (local rank, text), or (None, the agent's own)."""
        if not _TEE.match(line):
            return [(None, line)]
        heads = list(_TEE.finditer(line))
        out = []
        for i, h in enumerate(heads):
            local = int(h.group(1))
            text = self._partial.pop(local, "") + line[h.end():heads[i + 1].start() if i + 1 < len(heads) else None]
            if i + 1 < len(heads):
                self._partial[local] = text  # no newline came after it: the line goes on in a later piece
            else:
                out.append((local, text))
        return out

    def rest(self) -> list[tuple[int, str]]:
        """What workers wrote after their last newline (said at the end, as lines of their own)."""
        left, self._partial = sorted(self._partial.items()), {}
        return left
