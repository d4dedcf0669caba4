"""Where is my job stuck? The Python stack of every rank, and which collective each one is in (chapter 9).

Uses ``py-spy dump`` (from PyPI): it reads a running process's Python stack
from outside, without stopping it or changing its code, so it works on any
job, yours included. Two ways in:

* on demand, from a terminal: ``python -m disttutor.troubleshoot.diagnose RUN_DIR`` (or
  ``py-spy dump --pid PID`` on each rank);
* from a notebook, around a launch that may hang::

      watch = diagnose.watch(run_dir, after_s=3)    # a thread: dumps once the ranks run that long
      res = disttutor.launch(..., run_dir=run_dir, check=False)
      print(watch.report())

Rank pids come from the ranks' own reports in the run directory.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

# torch.distributed calls that wait for the other ranks (the innermost one on a stack is "the" collective)
COLLECTIVES = ("all_reduce", "broadcast", "barrier", "all_gather", "all_gather_object", "reduce_scatter",
               "reduce", "gather", "scatter", "all_to_all", "send", "recv", "monitored_barrier",
               "all_gather_single", "reduce_scatter_single", "all_to_all_single",  # torch 2.13's names
               "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast_object_list", "wait")
_FRAME = re.compile(r"^\s+(?P<func>\S+) \((?P<file>[^:]+):(?P<line>\d+)\)")
DUMP_TIMEOUT_S = 30.0


def py_spy() -> str:
    """The py-spy executable (next to this Python first: a venv's bin is not always on PATH)."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    found = here if os.path.exists(here) else shutil.which("py-spy")
    if not found:
        raise FileNotFoundError("py-spy is not installed: pip install py-spy")
    return found


@dataclass
class RankStack:
    rank: int
    pid: int
    frames: list[tuple[str, str, int]] = field(default_factory=list)  # (function, file, line), innermost first
    error: str | None = None

    @property
    def collective(self) -> str | None:
        for func, path, _ in self.frames:
            if "torch/distributed" in path and func in COLLECTIVES:
                return func
        return None

    @property
    def user_frame(self) -> str | None:
        """The innermost frame in the program's own code (not torch, not the standard library)."""
        for func, path, line in self.frames:
            # py-spy prints paths relative to sys.path: torch's own frames start with "torch/"
            if not path.startswith(("torch/", "<")) and "site-packages" not in path:
                return f"{func} ({os.path.basename(path)}:{line})"
        return None

    def line(self) -> str:
        if self.error:
            return f"rank {self.rank} (pid {self.pid}): could not read its stack -- {self.error}"
        where = self.user_frame or "?"
        if self.collective:
            return f"rank {self.rank}: waiting in {self.collective}() called from {where}"
        return f"rank {self.rank}: in no collective -- at {where}"


def dump(pid: int, tries: int = 3) -> list[tuple[str, str, int]]:
    """The main thread's Python frames of ``pid``, innermost first.

    py-spy reads another process's memory while it runs; now and then a read comes back empty
    or fails ("Failed to find python version"), seen on a loaded machine: try again a few times.
    """
    for attempt in range(tries):
        try:
            frames = _dump_once(pid)
            if frames:
                return frames
            problem = "py-spy found no Python frames"
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            problem = str(e)
        time.sleep(0.5)
    raise RuntimeError(problem)


def _dump_once(pid: int) -> list[tuple[str, str, int]]:
    env = {k: v for k, v in os.environ.items() if "COLOR" not in k}  # plain text, whatever a kernel sets
    p = subprocess.run([py_spy(), "dump", "--pid", str(pid)], capture_output=True, text=True,
                       timeout=DUMP_TIMEOUT_S, env=env)
    if p.returncode != 0:
        err = [ln for ln in p.stderr.splitlines() if ln.startswith("Error")] or [f"py-spy exit code {p.returncode}"]
        raise RuntimeError(err[0])
    frames, in_main = [], False
    for ln in re.sub(r"\x1b\[[0-9;]*m", "", p.stdout).splitlines():
        if ln.startswith("Thread "):
            if frames:  # the first thread listed is the main one; that is where the program waits
                break
            in_main = True
            continue
        m = _FRAME.match(ln)
        if in_main and m:
            frames.append((m["func"], m["file"], int(m["line"])))
    return frames


def running_ranks(run_dir: str) -> dict[int, int]:
    """``{rank: pid}`` of ranks whose report says they are still running."""
    out = {}
    for path in glob.glob(os.path.join(run_dir, "rank*.json")):
        try:
            rep = json.load(open(path))
        except (OSError, ValueError):
            continue  # being rewritten this instant
        if rep.get("status") == "running":
            out[int(rep["rank"])] = int(rep["pid"])
    return dict(sorted(out.items()))


def stacks(run_dir: str) -> list[RankStack]:
    """Dump every running rank of the job in ``run_dir`` now."""
    out = []
    for rank, pid in running_ranks(run_dir).items():
        rs = RankStack(rank, pid)
        try:
            rs.frames = dump(pid)
        except Exception as e:  # a rank that just exited, no permission (ptrace), py-spy missing
            rs.error = str(e)
        out.append(rs)
    return out


class Watch(threading.Thread):
    """Dump the stacks once ``world`` ranks have been running for ``after_s`` seconds (give up at ``give_up_s``)."""

    def __init__(self, run_dir: str, world: int, after_s: float, give_up_s: float):
        super().__init__(daemon=True)
        self.run_dir, self.world, self.after_s, self.give_up_s = run_dir, world, after_s, give_up_s
        self.result: list[RankStack] | None = None

    def run(self) -> None:
        end, since = time.monotonic() + self.give_up_s, None
        while time.monotonic() < end:
            if len(running_ranks(self.run_dir)) >= self.world:
                since = since or time.monotonic()
                if time.monotonic() - since >= self.after_s:
                    self.result = stacks(self.run_dir)
                    return
            time.sleep(0.2)

    def report(self) -> str:
        self.join(timeout=DUMP_TIMEOUT_S)
        if not self.result:
            return "no stacks: the ranks were not all running long enough to be dumped"
        return "\n".join(r.line() for r in self.result)


def watch(run_dir: str, world: int = 2, after_s: float = 3.0, give_up_s: float = 120.0) -> Watch:
    if after_s < 0 or give_up_s <= 0:
        raise ValueError("after_s must be >= 0 and give_up_s > 0 seconds")
    w = Watch(run_dir, world, after_s, give_up_s)
    w.start()
    return w


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        raise SystemExit("usage: python -m disttutor.troubleshoot.diagnose RUN_DIR  (the job's run directory)")
    found = stacks(argv[0])
    print("\n".join(r.line() for r in found) if found else "no running ranks in that run directory")


if __name__ == "__main__":
    main()
