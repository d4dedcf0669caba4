"""Chapter 0's named checks: the first script and hello's all-reduce, runtime.setup() as that script, why the
script is a file, and how a hang, a crash and an interrupt end (cleanly)."""
from __future__ import annotations

import ast
import os
import pickle
import subprocess
import sys
from typing import Any, Callable, Sequence

from disttutor.checks.claims.base import claim

_PKG = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # disttutor/


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


def check_script_sum(logs: Sequence[Sequence[str]], size: int = 3) -> str:
    """The first script: rank r of n prints ``rank r/n on DEVICE: [S, S, S]`` with S = 1 + ... + n (float32 sums of
    small integers are exact, so the printed list is compared as text)."""
    n = len(logs)
    total = n * (n + 1) / 2
    for r, lines in enumerate(logs):
        want = f": {[total] * size}"
        hits = [ln for ln in lines if ln.startswith(f"rank {r}/{n} on ") and ln.endswith(want)]
        claim(len(hits) == 1, f"rank {r} should print 'rank {r}/{n} on DEVICE{want}' once: {list(lines)[-3:]}")
    return f"all {n} ranks printed {total:g} = " + " + ".join(str(r + 1) for r in range(n))


def _calls(tree: ast.AST) -> set[str]:
    return {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}


def check_setup_is_the_script() -> str:
    """``runtime.setup()`` does the first script's steps: ``torch.cuda.set_device``, ``init_process_group`` with a
    ``timeout=``, and ``destroy_process_group`` in a ``finally`` (so also after an error); ``hello`` runs its
    all-reduce inside it. Read from the installed source, not imported."""
    tree = ast.parse(open(os.path.join(_PKG, "rank", "runtime.py"), encoding="utf-8").read())
    setup = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "setup")
    calls = _calls(setup)
    claim("torch.cuda.set_device" in calls, f"runtime.setup() should call torch.cuda.set_device: {sorted(calls)}")
    inits = [n for n in ast.walk(setup) if isinstance(n, ast.Call) and ast.unparse(n.func) == "dist.init_process_group"]
    claim(len(inits) == 1 and any(k.arg == "timeout" for k in inits[0].keywords),
          "runtime.setup() should call dist.init_process_group(..., timeout=...) once")
    finals = [s for n in ast.walk(setup) if isinstance(n, ast.Try) for s in n.finalbody]
    claim(any("dist.destroy_process_group" in _calls(s) for s in finals),
          "runtime.setup() should call dist.destroy_process_group in a finally block")
    hello = open(os.path.join(_PKG, "programs", "hello.py"), encoding="utf-8").read()
    claim("with runtime.setup() as ctx:" in hello and "dist.all_reduce(x)" in hello,
          "hello should run dist.all_reduce(x) inside `with runtime.setup() as ctx:`")
    return "runtime.setup() calls set_device, init_process_group(timeout=...) and, in finally, destroy_process_group"


def check_spawn_pickle(fn: Callable) -> str:
    """A function defined in a notebook pickles (by reference: ``__main__`` and its name) but a fresh interpreter,
    what ``mp.spawn``'s default start method starts, cannot unpickle it: its ``__main__`` has no such function."""
    data = pickle.dumps(fn)
    claim(b"__main__" in data and fn.__name__.encode() in data, f"{fn.__name__} should pickle as a reference: {data!r}")
    child = subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"],
                           input=data, capture_output=True, timeout=60)
    err = child.stderr.decode(errors="replace").strip().splitlines()
    claim(child.returncode != 0 and err and f"Can't get attribute '{fn.__name__}'" in err[-1],
          f"a fresh interpreter should fail to unpickle {fn.__name__}: rc {child.returncode}, {err[-1:]}")
    return f"pickling {fn.__name__} works ({len(data)} bytes); a fresh interpreter fails: {err[-1].split(':')[0]}"


def check_hang_ended(result: Any, skipped: int, timeout_s: float) -> str:
    """A rank that skips a collective: every other rank errors after the collective timeout, it is stopped.
    The error is the course's explanation (a program under ``runtime.setup()``) or gloo's own (a plain script).
    "stopped" also says the skipping rank never reached the collective: there it would have failed, not stopped."""
    ms = f"Timed out waiting {int(timeout_s * 1000)}ms"
    for rr in result.ranks:
        if rr.rank == skipped:
            claim(rr.status == "stopped", f"rank {skipped} (it skipped the collective) should be stopped: {rr.status}")
        else:
            said = rr.error or ""
            claim(rr.status == "error" and (f"waited more than {timeout_s:g}s" in said or ms in said),
                  f"rank {rr.rank} should fail after waiting {timeout_s:g} s in the collective: "
                  f"{rr.status}, {rr.error!r}")
    waiting = [rr.rank for rr in result.ranks if rr.rank != skipped]
    who = f"rank {waiting[0]}" if len(waiting) == 1 else "ranks " + ", ".join(map(str, waiting))
    return f"{who} gave up after {timeout_s:g} s in the collective; rank {skipped}, which never joined, was stopped"


def check_crashed(result: Any, rank: int, exit_code: int) -> str:
    """A rank that dies with ``os._exit(code)`` is named by the launcher with its exit code, and listed first
    (its peers fail on the closed connection or are stopped by torchrun, whichever comes first)."""
    rr = result.ranks[rank]
    claim(rr.status == "error" and f"exit code {exit_code}" in (rr.error or ""),
          f"rank {rank} should be reported as an error with exit code {exit_code}: {rr.status}, {rr.error!r}")
    first = [r.rank for r in result.culprits_first()]
    claim(first[0] == rank, f"rank {rank} should be named first: {first}")
    return f"rank {rank} is named first, as the one that died, with exit code {exit_code}"


def check_interrupted(result: Any, leftovers: Sequence[Any]) -> str:
    """An interrupted launch: every rank is reported as interrupted while running, and no process of ours is left."""
    claim(result.outcome == "interrupted", f"the launch should be interrupted: {result.outcome}")
    bad = [(rr.rank, rr.status) for rr in result.ranks if rr.status != "interrupted"]
    claim(not bad, f"every rank should be reported as interrupted: {bad}")
    claim(list(leftovers) == [], f"processes left behind: {list(leftovers)}")
    return f"interrupted: ranks {', '.join(str(rr.rank) for rr in result.ranks)} named and stopped; processes left: 0"


def our_jobs() -> list[Any]:
    """This kernel's child processes that belong to a course job (torchrun agents, ranks, live ranks)."""
    import psutil

    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "disttutor" in " ".join(p.cmdline()):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):  # it ended while we looked: not left behind
            pass
    return found


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
    return f"timed out: the others stuck in line {line} ({call}); rank {skipped} had finished; pool restarted, namespaces lost"
