"""Turn a finished torchrun job into a :class:`RunResult` (chapter 0).

Three sources, in order of trust: each rank's own ``rank{r}.json`` (written by
:mod:`disttutor.rank.runtime`), torchrun's failure summary (exit codes of ranks that
died without a word), and how the launch itself ended (finished, timed out,
interrupted).
"""
from __future__ import annotations

import json
import os
import re
import signal

from disttutor import contract
from disttutor.contract.errors import blame_of
from disttutor.contract.errors import is_exception_line, is_usage_error, readable_error
from disttutor.launcher.results import RankResult, RunResult

# torchrun's failure summary: "rank : 1 (local_rank: 1)" then "exitcode : -9 (pid: 12)".
_SUMMARY_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank")
_SUMMARY_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


def exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"died with exit code {code} before reporting"


def rank_status(report: dict | None, code: int | None, outcome: str, job_failed: bool,
                log: list[str] | None = None) -> tuple[str, str | None, str]:
    """``(status, error, evidence)`` for one rank; see :data:`disttutor.launcher.results.STATUSES`.

    evidence says where the verdict comes from: the rank's "report", its own
    last "log" line (e.g. argparse's error before the rank ever set up),
    torchrun's "exit" code, or what the "launcher" saw.
    """
    said = report["status"] if report else None
    if said in ("ok", "error"):  # the rank finished and told us itself
        return said, report.get("error"), "report"
    # From here on the rank never finished its work (report says "running", or none).
    if outcome == "timeout":
        return "stuck", "still running when the launch timed out", "launcher"
    if outcome == "interrupted":
        return "interrupted", "still running when the launch was interrupted", "launcher"
    last = next((ln.strip() for ln in reversed(log or []) if ln.strip()), "")
    if job_failed and (is_usage_error(last) or is_exception_line(last)):
        # Its own last words say why: argparse's error (it was about to exit 2 when
        # torchrun stopped it), or the last line of a traceback (a script without the runtime).
        return "error", last, "log"
    if code not in (None, 0, -signal.SIGTERM):  # SIGTERM is torchrun stopping the survivors
        return "error", exit_text(code), "exit"
    if job_failed:
        return "stopped", "still running when torchrun stopped the job (another rank failed)", "launcher"
    return "ok", None, "launcher"  # a script that does not use the runtime and exited cleanly


def exit_codes(agent_log: list[str]) -> dict[int, int]:
    codes: dict[int, int] = {}
    pending = None
    for line in agent_log:
        text = line.split("] ", 1)[1] if line.startswith("[node ") else line
        if (m := _SUMMARY_RANK.match(text)):
            pending = int(m.group(1))
        elif pending is not None and (m := _SUMMARY_EXIT.match(text)):
            codes[pending] = int(m.group(1))
            pending = None
    return codes


def read_reports(run_dir: str) -> dict[int, dict]:
    reports = {}
    for fn in os.listdir(run_dir):
        if contract.report_rank(fn) is not None:
            try:
                with open(os.path.join(run_dir, fn)) as f:
                    rep = json.load(f)
            except (OSError, ValueError):  # replaced atomically, but a reader may still race a rename
                continue
            reports[rep["rank"]] = rep
    return reports


def collect(name: str, nproc: int, nnodes: int, returncodes: list[int], logs: dict[tuple[int, int], list[str]],
            agent_log: list[str], run_dir: str, wall: float, outcome: str) -> RunResult:
    reports = read_reports(run_dir)
    codes = exit_codes(agent_log)
    # Lines were streamed per (agent, local rank); reports say which global rank that was.
    where = {(int(r.get("agent", 0)), r["local_rank"]): k for k, r in reports.items()}
    by_rank = {where.get(key, key[0] * nproc + key[1]): lines for key, lines in logs.items()}
    job_failed = any(rc != 0 for rc in returncodes)
    ranks = []
    for r in range(nproc * nnodes):
        rep = reports.get(r)
        status, raw, evidence = rank_status(rep, codes.get(r), outcome, job_failed, by_rank.get(r))
        info = {k: v for k, v in (rep or {}).items() if k not in ("results", "status", "error", "blame")}
        blame = None
        if status == "error":
            blame = (rep or {}).get("blame") or (blame_of(raw or "") if evidence == "log" else "self")
        ranks.append(RankResult(rank=r, status=status, error=readable_error(raw), results=(rep or {}).get("results", {}),
                                log=by_rank.get(r, []), info=info, raw_error=raw, blame=blame, evidence=evidence))
    rc = max(returncodes, key=abs) if returncodes else -1
    return RunResult(program=name, nproc=nproc, nnodes=nnodes, returncode=rc, wall_s=wall, ranks=ranks,
                     agent_log=agent_log, run_dir=run_dir, outcome=outcome)
