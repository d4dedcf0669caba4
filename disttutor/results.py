"""What a launch gives back to the notebook: per-rank status, data and logs.

Introduced in chapter 0. Plain data classes, no torch: a :class:`RunResult`
is built by :func:`disttutor.launch` from the ``rank{r}.json`` files the ranks
wrote and the lines they printed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

#: How a rank ended. "ok" and "error" come from the rank itself; the others
#: are what the launcher saw happen to it.
STATUSES = ("ok", "error", "stopped", "stuck", "interrupted")


@dataclass
class RankResult:
    rank: int
    status: str
    error: str | None
    results: dict[str, Any]
    log: list[str]
    info: dict[str, Any] = field(default_factory=dict)  # backend, device, local_rank, pid, ...

    def last_lines(self, n: int = 3) -> list[str]:
        return [ln for ln in self.log if ln.strip()][-n:]


@dataclass
class RunResult:
    program: str
    nproc: int
    nnodes: int
    returncode: int
    wall_s: float
    ranks: list[RankResult]
    agent_log: list[str]
    run_dir: str
    outcome: str = "finished"  # "finished", "timeout" or "interrupted"

    @property
    def ok(self) -> bool:
        return self.outcome == "finished" and self.returncode == 0 and all(r.status == "ok" for r in self.ranks)

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def results(self) -> list[dict[str, Any]]:
        """``results[r]`` is what rank ``r`` passed to ``runtime.report``."""
        return [r.results for r in self.ranks]

    @property
    def logs(self) -> list[list[str]]:
        return [r.log for r in self.ranks]

    def ranks_with(self, *statuses: str) -> list[int]:
        return [r.rank for r in self.ranks if r.status in statuses]

    def rows(self, *keys: str) -> list[dict[str, Any]]:
        """One dict per rank: rank, status and the chosen result keys (all if none)."""
        out = []
        for r in self.ranks:
            ks = keys or tuple(r.results)
            out.append({"rank": r.rank, "status": r.status, **{k: r.results.get(k) for k in ks}})
        return out

    def table(self, *keys: str) -> str:
        """A rank-sorted text table of :meth:`rows` (deterministic: no timings unless asked)."""
        return format_table(self.rows(*keys))

    def summary(self, lines: int = 3) -> str:
        """Which ranks ended how, with the last lines of each that did not end well."""
        head = {"finished": "finished", "timeout": "timed out", "interrupted": "was interrupted"}[self.outcome]
        out = [f"{self.program} on {self.world_size} rank(s) {head}"
               + ("" if self.outcome != "finished" else (" ok" if self.ok else f" with exit code {self.returncode}"))]
        for r in self.ranks:
            out.append(f"  rank {r.rank}: {r.status}" + (f" -- {r.error}" if r.error else ""))
            if r.status != "ok":
                out += [f"      | {ln}" for ln in r.last_lines(lines)]
        if not self.ok and not any(r.status == "error" for r in self.ranks):
            # No rank said what went wrong: torchrun itself may have (e.g. a bad argument).
            said = [ln for ln in self.agent_log if "error" in ln.lower()][-lines:]
            out += ["  torchrun said:"] + [f"      | {ln}" for ln in said]
        return "\n".join(out)

    def raise_for_status(self) -> "RunResult":
        if not self.ok:
            raise LaunchError(self, "failed")
        return self

    def __repr__(self) -> str:
        return (f"RunResult(program={self.program!r}, world_size={self.world_size}, outcome={self.outcome!r}, "
                f"ok={self.ok}, wall_s={self.wall_s:.2f})")


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Plain fixed-width table; floats to 6 significant digits."""
    if not rows:
        return "(no rows)"
    cols = list(dict.fromkeys(k for row in rows for k in row))

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.6g}"
        if isinstance(v, list) and all(isinstance(x, float) for x in v):
            return "[" + ", ".join(f"{x:.4g}" for x in v) + "]"
        return str(v)

    cells = [[fmt(row.get(c, "")) for c in cols] for row in rows]
    width = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    line = lambda vals: "  ".join(v.rjust(w) for v, w in zip(vals, width))  # noqa: E731
    return "\n".join([line(cols), line(["-" * w for w in width]), *map(line, cells)])


class LaunchError(RuntimeError):
    """A launch that did not end well; ``.result`` holds everything that came back."""

    def __init__(self, result: RunResult, what: str):
        self.result = result
        groups = {st: result.ranks_with(st) for st in STATUSES[1:]}
        named = "; ".join(f"{st}: rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}"
                          for st, rs in groups.items() if rs)
        super().__init__(f"{result.program} {what}" + (f" ({named})" if named else "") + "\n" + result.summary())


class LaunchTimeout(LaunchError):
    """The job outran the launcher's wall-clock timeout; the tree was killed."""

    @property
    def stuck_ranks(self) -> list[int]:
        return self.result.ranks_with("stuck")


class LaunchInterrupted(LaunchError, KeyboardInterrupt):
    """The cell was interrupted; the tree was killed (still a KeyboardInterrupt)."""
