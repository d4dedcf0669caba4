"""The launcher and runtime (chapter 0): results as data, and never a hang or an orphan.

Each test launches real torchrun jobs on gloo/CPU. Timeouts are short on
purpose: these are the reliability figures the course promises.
"""
from __future__ import annotations

import subprocess
import threading
import time

import pytest

import disttutor
from disttutor import LaunchError, LaunchTimeout


def test_hello_allreduce_matches_single_process_sum(no_leftovers):
    res = disttutor.launch("hello", 4, stream=False, timeout=90)
    assert res.ok and res.world_size == 4
    # Single-process reference: the sum of every rank's starting value.
    reference = float(sum(r + 1 for r in range(4)))
    for r, rep in enumerate(res.results):
        assert rep["before"] == [float(r + 1)] * 3
        assert rep["after"] == [reference] * 3  # exact: small integers are exact in fp32
        assert rep["backend"] == "gloo" and rep["device"] == "cpu"
    assert [r.rank for r in res.ranks] == [0, 1, 2, 3]
    assert all(any("after all_reduce" in ln for ln in r.log) for r in res.ranks)
    table = res.table("before", "after")
    assert table.splitlines()[0].split() == ["rank", "status", "before", "after"]
    # The line a learner would type for the same job: plain torchrun, none of the launcher's plumbing.
    assert res.command == "torchrun --nproc-per-node=4 -m disttutor.programs.hello"
    res2 = disttutor.launch("hello", 2, {"size": 2}, stream=False, timeout=90)
    assert res2.command == "torchrun --nproc-per-node=2 -m disttutor.programs.hello --size 2"


def test_hung_collective_fails_within_collective_timeout_naming_ranks(no_leftovers):
    t0 = time.perf_counter()
    res = disttutor.launch("hello", 2, {"skip_rank": 1}, collective_timeout=3, timeout=90,
                           stream=False, check=False)
    wall = time.perf_counter() - t0
    assert not res.ok and res.outcome == "finished"
    # Rank 0 waited in the all-reduce and gave up; rank 1 never joined and was stopped.
    assert res.ranks[0].status == "error" and "waited more than 3s" in res.ranks[0].error
    assert res.ranks[1].status == "stopped"
    assert "skipping the all-reduce" in res.ranks[1].log[-1]
    # Startup (~5 s, more on a loaded machine) + the 3 s collective timeout, nowhere near gloo's 30 min.
    assert wall < 60
    # The headline says why rank 0 failed (it waited for another rank), not just "error".
    with pytest.raises(LaunchError, match=r"timed out waiting for another rank: rank 0; stopped: rank 1"):
        res.raise_for_status()
    assert res.ranks[0].blame == "wait"


def test_wall_timeout_kills_everything_and_names_stuck_ranks(no_leftovers):
    t0 = time.perf_counter()
    with pytest.raises(LaunchTimeout) as info:
        # Collective timeout longer than the wall timeout: only the launcher can end this.
        disttutor.launch("hello", 2, {"skip_rank": 1}, collective_timeout=300, timeout=25, stream=False)
    wall = time.perf_counter() - t0
    err = info.value
    assert err.stuck_ranks == [0, 1]
    assert "timed out after 25s" in str(err)
    for r in err.result.ranks:  # each stuck rank is named with its last words (if it got to say any)
        assert f"rank {r.rank}: stuck" in str(err)
        assert all(line in str(err) for line in r.last_lines())
    assert wall < 25 + 10  # the timeout plus a bounded teardown (SIGTERM, 3 s grace, SIGKILL)


def test_crashed_rank_is_named_with_its_exit_code(no_leftovers):
    with pytest.raises(LaunchError) as info:
        disttutor.launch("hello", 3, {"crash_rank": 2}, timeout=90, stream=False)
    res = info.value.result
    assert res.ranks[2].status == "error" and "exit code 3" in res.ranks[2].error
    assert "crashing on purpose" in res.ranks[2].log[-1]
    assert {res.ranks[0].status, res.ranks[1].status} <= {"error", "stopped"}
    assert "rank 2: error" in str(info.value)


def test_two_concurrent_launches_both_succeed(no_leftovers):
    results: dict[int, disttutor.RunResult] = {}

    def go(i: int) -> None:
        results[i] = disttutor.launch("hello", 2, {"size": 2 + i}, stream=False, timeout=120)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    assert set(results) == {0, 1}
    for i, res in results.items():
        assert res.ok and all(rep["after"] == [3.0] * (2 + i) for rep in res.results)


def test_two_simulated_nodes(no_leftovers):
    res = disttutor.launch("hello", 2, nnodes=2, stream=False, timeout=120)
    assert res.ok and res.world_size == 4
    assert sorted((r.info["group_rank"], r.info["local_rank"]) for r in res.ranks) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in res.ranks:  # global rank = node rank * ranks per node + local rank
        assert r.rank == r.info["group_rank"] * 2 + r.info["local_rank"]
        assert r.results["after"] == [10.0] * 3


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(nproc=0), ValueError, "nproc must be at least 1"),
    (dict(nproc=-3), ValueError, "nproc must be at least 1"),
    (dict(nproc=2.5), TypeError, "nproc must be an integer"),
    (dict(nproc=True), TypeError, "nproc must be an integer"),
    (dict(nproc=10_000), ValueError, "too many for this machine"),
    (dict(nproc=2, nnodes=0), ValueError, "nnodes must be at least 1"),
    (dict(nproc=2, backend="nccl"), ValueError, "needs one GPU per rank"),
    (dict(nproc=2, backend="mpi"), ValueError, "backend must be 'auto', 'gloo' or 'nccl'"),
    (dict(nproc=2, timeout=0), ValueError, "timeout must be a positive number"),
    (dict(nproc=2, args="--size 3"), TypeError, "not a single string"),
    (dict(nproc=2, nprocs=2), TypeError, "unknown option"),
    (dict(nproc=2, env={"A": 1}), TypeError, "env must be a dict of str -> str"),
    (dict(nproc=2, on_progress="plot"), TypeError, "on_progress must be a function"),
])
def test_bad_input_is_rejected_before_anything_starts(kwargs, exc, words, monkeypatch):
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a))
    with pytest.raises(exc, match=words):
        disttutor.launch("hello", **kwargs)
    assert started == []  # rejected before any process was started


@pytest.mark.parametrize("program, words", [
    ("helo", "Did you mean hello"),
    ("no_such_pkg.mod", "no module 'no_such_pkg.mod'"),
    ("missing_script.py", "no such script"),
])
def test_unknown_program_is_rejected(program, words):
    with pytest.raises(FileNotFoundError, match=words):
        disttutor.launch(program, 2)


def test_user_script_path_runs(tmp_path, no_leftovers):
    script = tmp_path / "mine.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "from disttutor.rank import runtime\n"
        "with runtime.setup() as ctx:\n"
        "    t = torch.tensor([float(ctx.rank)])\n"
        "    dist.all_reduce(t, op=dist.ReduceOp.MAX)\n"
        "    runtime.report(max=t.item())\n")
    res = disttutor.launch(str(script), 3, stream=False, timeout=90)
    assert [r["max"] for r in res.results] == [2.0, 2.0, 2.0]


_PROGRESS_SCRIPT = (
    "import time\n"
    "from disttutor.rank import runtime\n"
    "with runtime.setup() as ctx:\n"
    "    for s in range(1, 4):\n"
    "        runtime.progress(s, 3, desc='demo', loss=10.0 / s)  # rank 0's lines only\n"
    "    print('@@disttutor-progress not json')  # a garbled line is skipped, not fatal\n"
    "    time.sleep(float(__import__('sys').argv[1]))\n"
    "    runtime.report(done=True)\n")


@pytest.mark.timeout(150)
def test_on_progress_gets_rank0_records_in_order(tmp_path, no_leftovers):
    script = tmp_path / "prog.py"
    script.write_text(_PROGRESS_SCRIPT)
    seen = []
    res = disttutor.launch(str(script), 2, ["0"], stream=False, timeout=90, on_progress=seen.append)
    assert res.ok and res.results[0]["done"]
    # stream=False hides the bar, not the callback; rank 1's progress() prints nothing.
    assert [(r["step"], r["total"], r["desc"], r["metrics"]) for r in seen] == \
        [(s, 3, "demo", {"loss": 10.0 / s}) for s in range(1, 4)]


@pytest.mark.timeout(150)
def test_a_failing_on_progress_stops_the_job(tmp_path, no_leftovers):
    script = tmp_path / "prog.py"
    script.write_text(_PROGRESS_SCRIPT)

    def broken(record):
        raise RuntimeError(f"plot failed at step {record['step']}")

    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="plot failed at step 1"):
        disttutor.launch(str(script), 2, ["60"], stream=False, timeout=90, on_progress=broken)
    assert time.perf_counter() - t0 < 45  # stopped at once, not after the ranks' 60 s sleep


def test_tee_lines_join_a_rank_line_that_torchrun_split():
    """torchrun's --tee reads a line a rank is still writing as a partial one, so two ranks can share a line."""
    from disttutor.launcher.stream import TeeLines

    tee = TeeLines()
    assert tee.feed("[default0]:hal[default1]:a whole line") == [(1, "a whole line")]
    assert tee.feed("torchrun's own line") == [(None, "torchrun's own line")]
    assert tee.feed("[default0]:f of it") == [(0, "half of it")]
    assert tee.feed("[default1]:no newline at the end[default1]: yet") == [(1, "no newline at the end yet")]
    assert tee.feed("[default2]:left open") == [(2, "left open")]
    tee.feed("[default3]:unfinished[default2]:x")
    assert tee.rest() == [(3, "unfinished")] and tee.rest() == []


@pytest.mark.timeout(150)
def test_a_line_written_in_two_pieces_reaches_the_log_whole(tmp_path, no_leftovers):
    """Each rank writes half a line, waits past torchrun's tail interval (0.1 s), then the rest: every log line is
    one rank's whole line, never two ranks' text glued together."""
    script = tmp_path / "pieces.py"
    script.write_text(
        "import sys, time\n"
        "from disttutor.rank import runtime\n"
        "with runtime.setup() as ctx:\n"
        "    for i in range(3):\n"
        "        sys.stdout.write(f'rank {ctx.rank} line {i} first half, '); sys.stdout.flush()\n"
        "        time.sleep(0.4)\n"
        "        print(f'second half of rank {ctx.rank} line {i}', flush=True)\n"
        "    runtime.report(done=True)\n")
    res = disttutor.launch(str(script), 2, stream=False, timeout=90)
    for r in res.ranks:
        mine = [ln for ln in r.log if "half" in ln]
        assert mine == [f"rank {r.rank} line {i} first half, second half of rank {r.rank} line {i}" for i in range(3)], r.log
