"""What a launch gives back to the notebook: per-rank status, data and logs.

Introduced in chapter 0. Plain data classes, no torch: a :class:`RunResult`
is built by :func:`disttutor.launch` from the ``rank{r}.json`` files the ranks
wrote and the lines they printed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from disttutor.contract.errors import is_usage_error

#: How a rank ended. "ok" and "error" come from the rank itself; the others
#: are what the launcher saw happen to it.
STATUSES = ("ok", "error", "stopped", "stuck", "interrupted")

#: Why an "error" rank failed, as far as it knows: its own fault ("self"), a
#: peer that never came to a collective ("wait"), or a peer that died in one ("peer").
BLAMES = ("self", "wait", "peer")
_BLAME_WORDS = {"self": "error", "wait": "timed out waiting for another rank",
                "peer": "failed because another rank died"}


@dataclass
class RankResult:
    rank: int
    status: str
    error: str | None
    results: dict[str, Any]
    log: list[str]
    info: dict[str, Any] = field(default_factory=dict)  # backend, device, local_rank, pid, ...
    raw_error: str | None = None  # the full text behind ``error`` (gloo's C++ message, ...)
    blame: str | None = None      # for "error": one of BLAMES (who the rank says caused it)
    evidence: str = "report"      # where status/error came from: "report", "log", "exit" or "launcher"

    def last_lines(self, n: int = 3) -> list[str]:
        return [ln for ln in self.log if ln.strip()][-n:]

    @property
    def label(self) -> str:
        """``"error"``, or how the failure came from elsewhere (``"failed because another rank died"``)."""
        if self.status == "error":
            return _BLAME_WORDS.get(self.blame or "self", "error")
        return self.status

    @property
    def said_why(self) -> bool:
        """Did the rank itself say what went wrong (then its last lines add nothing)?"""
        return self.status == "error" and self.evidence in ("report", "log")


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
    command: str = ""  # the plain torchrun line that runs the same job (see launch.plain_command)

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

    def culprits_first(self) -> list[RankResult]:
        """Ranks in the order a reader needs them: who failed on its own first, then
        the ranks that failed because of it, then those stopped or stuck, then the fine ones."""
        order = {("error", "self"): 0, ("error", "wait"): 1, ("error", "peer"): 1,
                 ("stuck", None): 2, ("interrupted", None): 2, ("stopped", None): 3, ("ok", None): 4}
        key = lambda r: (order.get((r.status, (r.blame or "self") if r.status == "error" else None), 2), r.rank)  # noqa: E731
        return sorted(self.ranks, key=key)

    def headline(self) -> str:
        """What happened, in one line, culprit first."""
        groups: dict[str, list[int]] = {}
        for r in self.culprits_first():
            if r.status != "ok":
                groups.setdefault(r.label, []).append(r.rank)
        usage = [r for r in self.ranks if r.status == "error" and r.error and is_usage_error(r.error)]
        if usage and len(usage) == len([r for r in self.ranks if r.status != "ok"]):
            who = "every rank" if len(usage) == self.world_size else _ranks(r.rank for r in usage)
            return f"{who} rejected the program's arguments -- {usage[0].error}"
        return "; ".join(f"{label}: {_ranks(rs)}" for label, rs in groups.items())

    def summary(self, lines: int = 3) -> str:
        """Which ranks ended how, culprit first: one readable line each, then the last
        lines of ranks that did not say themselves what went wrong."""
        head = {"finished": "finished", "timeout": "timed out", "interrupted": "was interrupted"}[self.outcome]
        out = [f"{self.program} on {self.world_size} rank(s) {head}"
               + ("" if self.outcome != "finished" else (" ok" if self.ok else f" with exit code {self.returncode}"))]
        shown: set[tuple] = set()
        for r in self.culprits_first():
            same = [q.rank for q in self.ranks if q.status == r.status and q.error == r.error and q.error]
            if r.status == "error" and len(same) > 1 and r.said_why:  # e.g. every rank's argparse error: once
                if (r.status, r.error) in shown:
                    continue
                shown.add((r.status, r.error))
                out.append(f"  {_ranks(same)}: {r.status} -- {r.error}")
                continue
            out.append(f"  rank {r.rank}: {r.status}" + (f" -- {r.error}" if r.error else ""))
            if r.status != "ok" and not r.said_why:
                out += [f"      | {ln}" for ln in r.last_lines(lines)]
        if self.outcome == "finished" and not self.ok and not any(r.status == "error" for r in self.ranks):
            # No rank said what went wrong: torchrun itself may have (e.g. a bad argument).
            said = [ln for ln in self.agent_log if "error" in ln.lower()][-lines:]
            if said:
                out += ["  torchrun said:"] + [f"      | {ln}" for ln in said]
        return "\n".join(out)

    def raise_for_status(self) -> "RunResult":
        if not self.ok:
            raise LaunchError(self, "failed")
        return self

    def __repr__(self) -> str:
        return (f"RunResult(program={self.program!r}, world_size={self.world_size}, outcome={self.outcome!r}, "
                f"ok={self.ok}, wall_s={self.wall_s:.2f})")


def _ranks(ranks) -> str:
    rs = list(ranks)
    return f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}"


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
        named = result.headline()
        super().__init__(f"{result.program} {what}" + (f" ({named})" if named else "") + "\n" + result.summary())


class LaunchTimeout(LaunchError):
    """The job outran the launcher's wall-clock timeout; the tree was killed."""

    @property
    def stuck_ranks(self) -> list[int]:
        return self.result.ranks_with("stuck")


class LaunchInterrupted(LaunchError, KeyboardInterrupt):
    """The cell was interrupted; the tree was killed (still a KeyboardInterrupt)."""
