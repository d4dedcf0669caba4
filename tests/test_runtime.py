"""The runtime's pieces that need no second process: env parsing, backend choice, reports."""
from __future__ import annotations

import json

import pytest
import torch

from disttutor.rank import reports
from disttutor.rank import runtime
from disttutor.checks import adapter
from disttutor.launcher.results import RankResult, RunResult, format_table


def test_env_outside_torchrun_is_a_clear_error():
    with pytest.raises(RuntimeError, match="not running under torchrun: RANK, WORLD_SIZE"):
        runtime.DistEnv.from_environ({"MASTER_ADDR": "x", "MASTER_PORT": "1"})


def test_env_reads_torchrun_variables():
    env = runtime.DistEnv.from_environ({"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
                                        "GROUP_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size, env.group_rank) == (5, 1, 8, 4, 1)


@pytest.mark.parametrize("gpus, requested, local_world, want", [
    (0, None, 2, ("gloo", "cpu")),
    (4, None, 4, ("nccl", "cuda:3")),   # every local rank has a GPU -> NCCL, device = LOCAL_RANK
    (2, None, 4, ("gloo", "cpu")),      # not enough GPUs for every rank -> gloo on CPU
    (4, "gloo", 4, ("gloo", "cpu")),    # explicit override wins
])
def test_pick_backend(monkeypatch, gpus, requested, local_world, want):
    monkeypatch.delenv("DISTTUTOR_BACKEND", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    backend, device = runtime.pick_backend(requested, local_world, local_rank=min(3, local_world - 1))
    assert (backend, str(device)) == want


def test_pick_backend_refuses_nccl_without_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs one GPU per local rank"):
        runtime.pick_backend("nccl", 2, 0)
    with pytest.raises(ValueError, match="unknown backend 'mpi'"):
        runtime.pick_backend("mpi", 2, 0)


def test_summarize_is_small_and_identifies_content():
    a = torch.arange(1000, dtype=torch.float32)
    s = runtime.summarize(a)
    assert s["shape"] == [1000] and s["dtype"] == "float32" and s["sum"] == float(a.sum())
    assert runtime.summarize(a.clone())["sha1"] == s["sha1"] != runtime.summarize(a + 1)["sha1"]
    assert len(json.dumps(s)) < 120
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        reports.jsonable(object())


def test_exercise_source_round_trip(tmp_path):
    def double(x):
        return 2 * x

    path = adapter.write_exercise(double, str(tmp_path))
    assert adapter.load_exercise(path, "double")(21) == 42
    with pytest.raises(AttributeError, match="no function named 'triple'"):
        adapter.load_exercise(path, "triple")
    with pytest.raises(TypeError, match="expected a function"):
        adapter.to_source(42)
    # A learner file that starts with a __future__ import still loads (it must stay first).
    src = "from __future__ import annotations\n\ndef f(x: int) -> int:\n    return x + 1\n"
    assert adapter.load_exercise(adapter.write_exercise(src, str(tmp_path)), "f")(1) == 2


def test_result_table_and_summary_are_deterministic():
    # evidence="exit": the rank died without saying why, so its last lines are shown.
    ranks = [RankResult(r, "ok" if r else "error", None if r else "boom", {"loss": 0.5 * r}, [f"line {r}"],
                        evidence="exit") for r in range(3)]
    res = RunResult("prog", 3, 1, 1, 1.234, ranks, [], "/tmp/x")
    assert res.table("loss").splitlines()[2].split() == ["0", "error", "0"]
    assert "rank 0: error -- boom" in res.summary() and "| line 0" in res.summary()
    assert not res.ok and res.ranks_with("error") == [0]
    assert format_table([]) == "(no rows)"


def test_require_positive_names_the_field():
    from dataclasses import dataclass

    from disttutor.contract.config import require_positive

    @dataclass
    class Cfg:
        steps: int = 3
        layers_per_stage: int = 0

    with pytest.raises(ValueError, match=r"^layers_per_stage must be >= 1, got 0$"):
        require_positive(Cfg(), "steps", "layers_per_stage")
    with pytest.raises(ValueError, match=r"^--layers-per-stage must be >= 1"):
        require_positive(Cfg(), "layers_per_stage", flag_style=True)
    with pytest.raises(ValueError, match="steps must be >= 1, got 2.5"):
        require_positive(Cfg(steps=2.5), "steps")  # a float count is a mistake, not a count
    require_positive(Cfg(layers_per_stage=2), "steps", "layers_per_stage")



# A learner's own script (disttutor run my.py) that never destroys its group: the script wrapper does,
# before Python finalises, so gloo's worker threads are gone when the atexit handlers run. (Left alive,
# one holding the tensor of a timed-out collective aborted the rank at exit, 1 run in 2.)
OWN_SCRIPT = '''
import atexit, os, time
import torch
import torch.distributed as dist

def gloo_workers():
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    print("gloo workers at exit:", names.count("pt_gloo_runloop"), flush=True)

if os.path.isdir("/proc/self/task"):
    atexit.register(gloo_workers)
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    time.sleep(5)  # rank 0's all-reduce times out (2 s) while this one sleeps
x = torch.ones(3)
try:
    dist.all_reduce(x)
except RuntimeError as e:
    print("caught the timeout:", "Timed out" in str(e) or "Connection closed" in str(e), flush=True)
'''


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_script_that_leaves_its_group_exits_cleanly(tmp_path, no_leftovers):
    import os

    import disttutor

    script = tmp_path / "own.py"
    script.write_text(OWN_SCRIPT)
    res = disttutor.launch(str(script), 2, stream=False, timeout=150, collective_timeout=2, check=False)
    assert res.ok, res.summary()
    assert any("caught the timeout: True" in ln for ln in res.ranks[0].log), res.ranks[0].log
    if os.path.isdir("/proc/self/task"):
        for r in res.ranks:
            assert "gloo workers at exit: 0" in r.log, r.log
