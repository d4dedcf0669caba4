"""A slow-starting rank no longer makes the fast one's join time out (the chapter 4 checker race).

The course keeps a collective timeout short so a learner's hang ends in seconds, and
init_process_group uses that same timeout to wait for the other ranks. Under load one rank of a
job finished importing torch more than a checker's 10 s timeout after the other, and the job
ended in a join timeout instead of the learner's mistake. ``arrive_together`` waits at torchrun's
store first. Here rank 1 starts 6 s late against a 2 s collective timeout.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import os, sys, time
    import torch, torch.distributed as dist
    from disttutor.rank import runtime
    from disttutor.rank.arrival import arrive_together
    rank = int(os.environ["RANK"])
    if sys.argv[1] == "late":
        time.sleep(6.0 if rank == 1 else 0.0)      # rank 1 "still importing"
        with runtime.setup(timeout_s=2.0):
            t = torch.ones(1) * (rank + 1)
            dist.all_reduce(t)
            print(f"rank {rank} sum {t.item():g}", flush=True)
    else:                                          # rank 1 never arrives: rank 0 names it
        if rank == 0:
            try:
                arrive_together(runtime.DistEnv.from_environ(), wait_s=2.0)
            except RuntimeError as e:
                print("ERR", e, flush=True)
        else:
            time.sleep(4.0)
''')


def torchrun(tmp_path, mode: str) -> subprocess.CompletedProcess:
    path = tmp_path / "job.py"
    path.write_text(SCRIPT)
    env = {**os.environ, "DISTTUTOR_RUN_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    # --standalone: torchrun picks a free port itself (ports from the OS).
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(path), mode], capture_output=True, text=True, timeout=120, env=env)


def test_a_late_rank_joins_within_a_short_collective_timeout(tmp_path):
    p = torchrun(tmp_path, "late")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert "rank 0 sum 3" in p.stdout and "rank 1 sum 3" in p.stdout


def test_a_rank_that_never_arrives_is_named(tmp_path):
    p = torchrun(tmp_path, "missing")
    assert "ERR rank 0: rank(s) [1] did not start within 2s" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
