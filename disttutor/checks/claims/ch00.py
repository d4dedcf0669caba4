"""Chapter 0's named checks: hello's all-reduce, and how a hang, a timeout and a crash end (cleanly)."""
from __future__ import annotations

from typing import Any, Sequence

from disttutor.checks.claims.base import claim


def check_allreduce_sum(results: Sequence[dict[str, Any]]) -> str:
    """``hello``: rank r starts with r + 1 in every element and ends with the sum over all ranks, 1 + ... + n."""
    n = len(results)
    total = n * (n + 1) / 2
    for r, rep in enumerate(results):
        claim(rep["before"] == [float(r + 1)] * len(rep["before"]),
              f"rank {r} should start with {r + 1:g} in every element: {rep['before']}")
        # small integers summed in float32: exact, so ==
        claim(rep["after"] == [total] * len(rep["before"]),
              f"rank {r} should hold the sum 1 + ... + {n} = {total:g} in every element: {rep['after']}")
    return f"all {n} ranks hold {total:g} = " + " + ".join(str(r + 1) for r in range(n))


def check_hang_ended(result: Any, skipped: int, timeout_s: float) -> str:
    """A rank that skips a collective: every other rank errors after the collective timeout, it is stopped."""
    for rr in result.ranks:
        if rr.rank == skipped:
            claim(rr.status == "stopped", f"rank {skipped} (it skipped the collective) should be stopped: {rr.status}")
        else:
            claim(rr.status == "error" and f"waited more than {timeout_s:g}s" in (rr.error or ""),
                  f"rank {rr.rank} should fail after waiting {timeout_s:g} s in the collective: "
                  f"{rr.status}, {rr.error!r}")
    waiting = [rr.rank for rr in result.ranks if rr.rank != skipped]
    who = f"rank {waiting[0]}" if len(waiting) == 1 else "ranks " + ", ".join(map(str, waiting))
    return f"{who} gave up after {timeout_s:g} s in the collective; rank {skipped}, which never joined, was stopped"


def check_crashed(result: Any, rank: int, exit_code: int) -> str:
    """A rank that dies with ``os._exit(code)`` is named by the launcher with its exit code."""
    rr = result.ranks[rank]
    claim(rr.status == "error" and f"exit code {exit_code}" in (rr.error or ""),
          f"rank {rank} should be reported as an error with exit code {exit_code}: {rr.status}, {rr.error!r}")
    return f"rank {rank} is named as the one that died, with exit code {exit_code}"


def check_no_leftovers(processes: Sequence[Any]) -> str:
    """No torchrun or worker process of ours is alive after the job (however it ended)."""
    claim(list(processes) == [], f"processes left behind: {list(processes)}")
    return "processes left behind: 0"


def check_live_hang(stuck: Any, skipped: int, line: int, call: str) -> str:
    """A live cell where one rank skips ``call``: it times out, each other rank is stuck *in that line of the cell*,
    waiting in that collective, the skipping rank finished, and the message says the namespaces were lost."""
    where = f"inside line {line}: {call} -- waiting in {call.split('(')[0].split('.')[-1]}"
    claim(stuck.timed_out, f"the cell should have timed out: {stuck.message!r}")
    want = {r: ("ok" if r == skipped else "stuck") for r in stuck.ranks}
    claim(stuck.status == want, f"rank {skipped} should finish and every other rank be stuck: {stuck.status}")
    for r in stuck.ranks:
        if r != skipped:
            claim(stuck.stuck[r].startswith(where), f"rank {r} should be {where!r}: {stuck.stuck[r]!r}")
    claim("namespace was lost" in stuck.message, f"the message should say the namespaces were lost: {stuck.message!r}")
    return (f"timed out: every rank but {skipped} was stuck in line {line} ({call}), rank {skipped} had finished; "
            "the pool restarted and said the namespaces were lost")
