"""Course-wide defaults a teacher sets before JupyterLab starts (issue 8 item 4), and the
user-script wrapper's timeout default (issue 16 item 4). No processes are started here."""
from __future__ import annotations

import datetime as dt
import subprocess

import os

import pytest

import disttutor
from disttutor.rank import user_script as _script
from disttutor import contract


def test_default_backend_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(contract.ENV_DEFAULT_BACKEND, raising=False)
    assert disttutor.default_backend()[0] == "auto"
    monkeypatch.setenv(contract.ENV_DEFAULT_BACKEND, "gloo")
    value, where = disttutor.default_backend()
    assert value == "gloo" and contract.ENV_DEFAULT_BACKEND in where
    monkeypatch.setenv(contract.ENV_DEFAULT_BACKEND, "mpi")
    with pytest.raises(ValueError, match="DISTTUTOR_DEFAULT_BACKEND='mpi' is not a backend"):
        disttutor.default_backend()


def _captured_env(monkeypatch, **launch_kwargs) -> dict:
    """Run launch() up to starting torchrun, and return the environment it would give it."""
    seen = {}

    class Stop(Exception):
        pass

    def fake_popen(cmd, env=None, **kw):
        seen.update(env)
        raise Stop

    monkeypatch.setattr(subprocess, "Popen", fake_popen)
    with pytest.raises(Stop):
        disttutor.launch("hello", 2, **launch_kwargs)
    return seen


def test_teacher_default_reaches_every_launch_and_an_explicit_backend_wins(monkeypatch, tmp_path):
    monkeypatch.setenv(contract.ENV_DEFAULT_BACKEND, "gloo")
    monkeypatch.setenv(contract.ENV_GPUS, "0,1")
    env = _captured_env(monkeypatch, run_dir=str(tmp_path / "a"))
    assert env[contract.ENV_BACKEND] == "gloo"      # launch() no longer overwrites it with "auto"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    env = _captured_env(monkeypatch, backend="auto", run_dir=str(tmp_path / "b"))
    assert env[contract.ENV_BACKEND] == "auto"
    monkeypatch.setenv(contract.ENV_GPUS, "none")
    assert _captured_env(monkeypatch, run_dir=str(tmp_path / "c"))["CUDA_VISIBLE_DEVICES"] == ""
    monkeypatch.setenv(contract.ENV_GPUS, "first")
    with pytest.raises(ValueError, match="DISTTUTOR_GPUS='first'"):
        disttutor.launch("hello", 2)


def test_rank_env_reaches_every_rank_and_an_explicit_env_wins(monkeypatch, tmp_path):
    """DISTTUTOR_RANK_ENV: variables for every rank (not the kernel); launch(env=...) still wins."""
    monkeypatch.setenv(contract.ENV_RANK_ENV, 'ATEN_CPU_CAPABILITY=default GLOO_SOCKET_IFNAME="lo"')
    env = _captured_env(monkeypatch, run_dir=str(tmp_path / "a"))
    assert env["ATEN_CPU_CAPABILITY"] == "default" and env["GLOO_SOCKET_IFNAME"] == "lo"
    assert "ATEN_CPU_CAPABILITY" not in os.environ  # the kernel's own numerics are untouched
    env = _captured_env(monkeypatch, env={"ATEN_CPU_CAPABILITY": "avx2"}, run_dir=str(tmp_path / "b"))
    assert env["ATEN_CPU_CAPABILITY"] == "avx2"
    monkeypatch.setenv(contract.ENV_RANK_ENV, "ATEN_CPU_CAPABILITY")
    with pytest.raises(ValueError, match="is not NAME=VALUE"):
        disttutor.launch("hello", 2)


def test_script_wrapper_defaults_only_a_missing_timeout():
    calls = []

    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1):
        calls.append(timeout)

    wrapped = _script.default_timeout(init_process_group, 5.0)
    wrapped("gloo")
    wrapped(backend="gloo", timeout=dt.timedelta(seconds=99))     # the script's own choice wins
    wrapped("gloo", None, dt.timedelta(seconds=7))                 # ...also when passed positionally
    assert calls == [dt.timedelta(seconds=5), dt.timedelta(seconds=99), dt.timedelta(seconds=7)]
    assert wrapped.__name__ == "init_process_group"


def test_script_path_runs_through_the_wrapper(tmp_path):
    script = tmp_path / "mine.py"
    script.write_text("")
    name, target = disttutor.resolve_program(str(script))
    assert target == ["-m", "disttutor.rank.user_script", str(script)]


def test_usable_cores_follow_affinity_and_the_override(monkeypatch):
    """Runs are sized from the cores this process may use (taskset, cgroups), not the machine's count."""
    from disttutor.contract import machine

    monkeypatch.delenv(contract.ENV_CORES, raising=False)
    if hasattr(os, "sched_getaffinity"):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})  # as under `taskset -c 0`
        assert disttutor.cores() == 1
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
        monkeypatch.setattr(machine, "_cgroup_quota", lambda: 4.0)  # a container limited to 4 CPUs
        assert disttutor.cores() == 4
    monkeypatch.setenv(contract.ENV_CORES, "8")
    assert disttutor.cores() == 8
    monkeypatch.setenv(contract.ENV_CORES, "many")
    with pytest.raises(ValueError, match="DISTTUTOR_CORES='many'"):
        disttutor.cores()


def test_cgroup_quota_is_read(tmp_path):
    from disttutor.contract.machine import _cgroup_quota

    (tmp_path / "a").write_text("200000 100000\n")
    (tmp_path / "b").write_text("max 100000\n")
    assert _cgroup_quota(str(tmp_path / "a")) == 2.0
    assert _cgroup_quota(str(tmp_path / "b")) is None and _cgroup_quota(str(tmp_path / "none")) is None


def test_script_wrapper_exits_without_interpreter_finalisation(tmp_path):
    """A learner's script ends through quick_exit: atexit handlers run, the exit code is the script's,
    but the interpreter's finalisation (where gloo objects left by DDP aborted the rank with SIGABRT,
    3 runs in 12 of chapter 5's script under load) is skipped."""
    import sys

    script = tmp_path / "mine.py"
    script.write_text(
        "import atexit, sys\n"
        "class Finaliser:\n"
        "    def __del__(self):\n"
        "        print('finalised', flush=True)\n"
        "KEEP = Finaliser()  # freed only when the interpreter finalises\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "print('script done', flush=True)\n"
        "sys.exit(int(sys.argv[1]))\n")
    for code in (0, 3):
        out = subprocess.run([sys.executable, "-m", "disttutor.rank.user_script", str(script), str(code)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == code, out.stderr
        assert out.stdout.splitlines() == ["script done", "atexit ran"], out.stdout
    bad = tmp_path / "bad.py"
    bad.write_text("raise ValueError('boom')\n")
    out = subprocess.run([sys.executable, "-m", "disttutor.rank.user_script", str(bad)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "ValueError: boom" in out.stderr


def test_timing_claims_are_judged_on_the_real_cores_not_a_faked_count(monkeypatch):
    """DISTTUTOR_CORES=8 on a 2-core machine sizes runs for 8 cores, but 4 ranks then share 2 real cores: a chapter
    asserted chapter 7's bubble model and balance timings there and failed. quiet() counts the real cores."""
    import disttutor
    from disttutor.contract import machine

    real = machine.real_cores()
    monkeypatch.setenv("DISTTUTOR_CORES", str(4 * real))
    assert disttutor.cores() == 4 * real and machine.real_cores() == real
    assert not disttutor.quiet(0.0, ranks=real + 1)              # more ranks than real cores: never quiet
    assert not disttutor.quiet(0.5 * real)                        # half the real cores busy: not quiet
    assert disttutor.quiet(0.0, 0.1 * real, ranks=real) is True   # idle, a core per rank
