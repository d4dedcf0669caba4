"""What a live cell returns, and how it reads: grouped by rank, in rank order (chapter 0).

Kept apart from the pool so the text a learner sees is easy to test: the
final output of a cell depends only on what each rank sent, never on the order
in which the ranks happened to finish.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_LINES_PER_RANK = 15  # the whole cell stays under ~60 lines on 4 ranks

_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):", re.M)
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (\S+)')


@dataclass(frozen=True)
class Frame:
    filename: str
    line: int
    function: str

    def short(self) -> str:
        """``torch/distributed/distributed_c10d.py:2950`` rather than a build machine's absolute path."""
        path = self.filename
        for marker in ("site-packages/", "dist-packages/", "/lib/python3"):
            if marker in path:
                path = path.split(marker, 1)[1]
                break
        else:
            if "/disttutor/" in path:
                path = "disttutor/" + path.rsplit("/disttutor/", 1)[1]
        return f"{path}:{self.line}"


def parse_stack(text: str, thread_ident: int) -> list[Frame]:
    """The main thread's frames (innermost first) from a ``faulthandler`` dump of all threads."""
    blocks = list(_THREAD.finditer(text))
    for i, m in enumerate(blocks):
        if int(m.group(1), 16) == thread_ident:
            end = blocks[i + 1].start() if i + 1 < len(blocks) else len(text)
            return [Frame(f.group(1), int(f.group(2)), f.group(3))
                    for f in (_FRAME.match(line) for line in text[m.end():end].splitlines()) if f]
    return []


def where(frames: list[Frame], filename: str, source: str) -> str:
    """``inside line 3: dist.all_reduce(t) -- waiting in all_reduce (torch/...:2950)``."""
    if not frames:
        return "no Python stack could be read (the rank may be dead)"
    lines = source.splitlines()
    at = next((i for i, f in enumerate(frames) if f.filename == filename), None)
    if at is None:
        return "outside the cell, in " + " <- ".join(f"{f.function} ({f.short()})" for f in frames[:2])
    cell = frames[at]
    here = f"inside line {cell.line}: {lines[cell.line - 1].strip()}" if 0 < cell.line <= len(lines) else ""
    # frames are innermost first: the ones before the cell's are the calls it is blocked in
    inner = [f for f in frames[:at] if f.filename != filename][:2]
    if not inner:
        return f"{here} -- in that line itself (or a C function it called)"
    return f"{here} -- waiting in " + " <- ".join(f"{f.function} ({f.short()})" for f in inner)


@dataclass
class CellResult:
    """One ``%%ranks`` cell: per-rank output, value, error and state, plus what the pool did about it."""

    ranks: list[int]
    status: dict[int, str] = field(default_factory=dict)   # ok | error | interrupted | stuck | died
    outputs: dict[int, str] = field(default_factory=dict)
    values: dict[int, str | None] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    stuck: dict[int, str] = field(default_factory=dict)    # rank -> where it was (from its stack)
    wall_s: float = 0.0
    timed_out: bool = False
    interrupted: bool = False
    message: str = ""                                      # what happened to the pool, if anything
    timeout_s: float = 0.0
    started: float = 0.0
    message_s: float = 0.0   # seconds from sending the cell to knowing where every stuck rank is
    restart_s: float = 0.0   # seconds the automatic restart took (0: none)

    @property
    def ok(self) -> bool:
        return all(self.status.get(r) == "ok" for r in self.ranks)

    def text(self) -> str:
        out: list[str] = []
        for r in self.ranks:
            tag = f"[rank {r}]"
            lines = self.outputs.get(r, "").splitlines()
            if len(lines) > MAX_LINES_PER_RANK:
                more = len(lines) - MAX_LINES_PER_RANK
                lines = lines[:MAX_LINES_PER_RANK] + [f"... {more} more lines (result.outputs[{r}] has them all)"]
            value = self.values.get(r)
            if value is not None:
                v = value.splitlines() or [""]
                lines += [f"Out: {v[0]}"] + [f"     {x}" for x in v[1:MAX_LINES_PER_RANK]]
            if r in self.errors:
                lines += self.errors[r].splitlines()[-MAX_LINES_PER_RANK:]
            out += [f"{tag} {x}" for x in lines]
        if not self.ok:
            out += ["", self.summary()]
        return "\n".join(out)

    def summary(self) -> str:
        lines = []
        if self.timed_out:
            lines.append(f"The cell timed out after {self.timeout_s:g} s.")
        if self.interrupted:
            lines.append("The cell was interrupted.")
        for r in self.ranks:
            st = self.status.get(r, "?")
            if st == "stuck":
                lines.append(f"  rank {r} is stuck {self.stuck.get(r, '')}")
            elif st == "ok":
                lines.append(f"  rank {r} finished the cell")
            elif st == "error":
                last = self.errors.get(r, "").splitlines()[-1:] or ["?"]
                lines.append(f"  rank {r} raised {last[0]}")
            elif st == "interrupted":
                lines.append(f"  rank {r} was interrupted {self.stuck.get(r, '')}".rstrip())
            else:
                lines.append(f"  rank {r}: {st}")
        if self.message:
            lines.append(self.message)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.text())
