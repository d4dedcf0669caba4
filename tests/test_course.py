"""course.py as a learner meets it: which torch it installs (the exact pip command lines, no real
download), a workspace that survives a course update, `reset`, the `disttutor` command in
JupyterLab's terminal, and a SIGTERM that stops JupyterLab too."""
from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_course(root: str = ROOT):
    spec = importlib.util.spec_from_file_location(f"course_{abs(hash(root))}", os.path.join(root, "course.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


course = load_course()
PY = "/v/bin/python"
COURSE = [PY, "-m", "pip", "install", "-e", ".[dev]"]
CPU = [PY, "-m", "pip", "install", "torch>=2.6", "--index-url", "https://download.pytorch.org/whl/cpu", "--timeout", "30", "--retries", "1"]


@pytest.mark.parametrize("platform, gpu, force, pin, kind, commands", [
    ("linux", None, None, None, "cpu-index", [CPU, COURSE]),            # laptop without a GPU
    ("linux", "nvidia-smi -L lists 2 GPU(s)", None, None, "pypi", [COURSE]),  # GPU box: CUDA build
    ("linux", "nvidia-smi -L lists 2 GPU(s)", "cpu", None, "cpu-index", [CPU, COURSE]),
    ("linux", None, "gpu", None, "pypi", [COURSE]),
    ("darwin", None, None, None, "pypi", [COURSE]),                     # PyPI's macOS torch is CPU-only
    ("win32", None, "cpu", None, "pypi", [COURSE]),
    ("linux", None, None, "torch==2.13.0", "pinned", [COURSE]),         # CI: the pinned local wheel
    ("linux", None, "cpu", "torch==2.13.0", "pinned", [COURSE]),        # the pin wins over a flag
    ("linux", "nvidia-smi -L lists 1 GPU(s)", "gpu", "torch==2.13.0", "pinned", [COURSE]),
])
def test_torch_plan_and_the_pip_commands_it_builds(platform, gpu, force, pin, kind, commands):
    got, why = course.torch_plan(platform, gpu, force, pin)
    assert got == kind and why  # the reason is printed to the learner
    if force and kind != "pinned" and platform == "linux":
        assert f"--{force}" in why
    assert course.install_commands(PY, got) == commands


def test_pin_is_read_from_pip_constraint_and_ci_never_needs_download_pytorch_org(tmp_path):
    assert course.torch_pin(os.path.join(ROOT, ".ci", "constraints.txt")) == "torch==2.13.0"
    other = tmp_path / "c.txt"
    other.write_text("# no torch here\nnumpy<3\n")
    assert course.torch_pin(f"{other}") is None
    assert course.torch_pin(f"{other} {os.path.join(ROOT, '.ci', 'constraints.txt')}") == "torch==2.13.0"
    assert course.torch_pin("/does/not/exist") is None
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    assert "download.pytorch.org" not in ci and "PIP_CONSTRAINT" in ci


def test_torch_spec_is_pyprojects():
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    assert f'"{course.TORCH_SPEC}"' in text


def test_cpu_index_failing_in_pip_falls_back_with_one_line(monkeypatch, tmp_path, capsys):
    calls = []
    monkeypatch.setattr(course, "VENV", str(tmp_path))
    monkeypatch.setattr(course, "PY", sys.executable)  # exists: no venv is created
    monkeypatch.setattr(course, "detect_gpu", lambda: None)
    monkeypatch.setattr(course, "probe", lambda url, timeout=10.0: None)  # it answered (no network here)
    monkeypatch.setattr(course.sys, "platform", "linux")
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    monkeypatch.setattr(course.subprocess, "call", lambda cmd, **kw: calls.append(cmd) or (1 if course.CPU_INDEX in cmd else 0))
    course.ensure_env()
    out = capsys.readouterr().out
    assert [c[4] for c in calls] == ["torch>=2.6", "-e"]  # tried the CPU index, then the course anyway
    assert "no NVIDIA GPU found" in out and "pip could not install it from" in out and "GB" in out
    assert (tmp_path / ".disttutor-installed").read_text().startswith("cpu-index ")
    calls.clear()
    course.ensure_env()  # installed: nothing runs again
    assert calls == []


class _Index:
    """A stand-in for PyTorch's CPU index on 127.0.0.1 (http.server in a thread): records the paths asked."""

    def __init__(self, root):
        import functools
        import http.server
        import threading

        (root / "whl" / "cpu" / "torch").mkdir(parents=True)
        (root / "whl" / "cpu" / "torch" / "index.html").write_text("<html><body></body></html>")
        self.asked = []
        index = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *a):
                index.asked.append(self.path)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/whl/cpu"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _closed_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # from the OS, then closed: nothing listens there
    port = s.getsockname()[1]
    s.close()
    return port


def _pip_env(tmp_path, conf: str | None = None, **extra) -> dict:
    """This interpreter's pip with a pip.conf of the test's own and no PIP_* variable of the machine's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    (tmp_path / "pip.conf").write_text(conf or "")
    return {**env, "PIP_CONFIG_FILE": str(tmp_path / "pip.conf"), "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def _decide(tmp_path, index_url: str, env: dict):
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            env=env, timeout=120).stdout
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    return course.torch_source(index_url, course.probe(index_url + "/torch/", timeout=5),
                               course.extra_sources(listed), str(empty))


@pytest.mark.timeout(300)  # four pip start-ups on a loaded machine
def test_torch_index_reachable_unreachable_and_with_an_extra_index(tmp_path, capsys):
    idx, other = _Index(tmp_path / "cpu"), _Index(tmp_path / "other")
    try:
        # 1. reachable, nothing else configured: the CPU index alone, said in one line
        kind, env, line = _decide(tmp_path, idx.url, _pip_env(tmp_path))
        assert (kind, env) == ("cpu-index", {}) and line == f"torch: the CPU-only build from {idx.url} (it answered)."
        assert idx.asked == ["/whl/cpu/torch/"]  # one short request
        assert course.probe(idx.url + "/no-such-project/", timeout=5) == "HTTP 404"  # there, but not an index
        idx.asked.clear()
        lines = [line]

        # 2. unreachable: PyPI's torch, said once, before pip could retry anything
        dead = f"http://127.0.0.1:{_closed_port()}/whl/cpu"
        kind, env, line = _decide(tmp_path, dead, _pip_env(tmp_path))
        assert kind == "pypi" and env == {} and line.startswith(f"torch: PyTorch's CPU index ({dead}) could not be "
                                                                 "reached (") and "CUDA build" in line
        assert "\n" not in line
        lines.append(line)

        # 3. an extra index in pip.conf and one in PIP_EXTRA_INDEX_URL: named, and left out for torch
        conf = f"[global]\nextra-index-url = {other.url}/conf\n[install]\nfind-links = /no/such/folder\n"
        penv = _pip_env(tmp_path, conf, PIP_EXTRA_INDEX_URL=f"{other.url}/env")
        kind, env, line = _decide(tmp_path, idx.url, penv)
        assert kind == "cpu-index" and env["PIP_EXTRA_INDEX_URL"] == idx.url
        assert f"{other.url}/env" in line and "/no/such/folder" in line and "left out for torch" in line
        lines.append(line)
        # ... and pip, run with that environment, really asks the CPU index only (nothing to install
        # there, so it fails; what matters is whom it asked)
        other.asked.clear()
        idx.asked.clear()
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(tmp_path / "dl"),
                            "torch>=2.6", "--index-url", idx.url, "--timeout", "5", "--retries", "0"],
                           env={**penv, **env}, capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and other.asked == [], (other.asked, r.stderr[-500:])
        assert any(p.startswith("/whl/cpu/torch/") for p in idx.asked)
        assert "is ignored" not in r.stderr  # no "Location ... is ignored" warnings
        # without the overrides pip would have asked the extra indexes too (why they must be left out)
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(tmp_path / "dl"),
                            "torch>=2.6", "--index-url", idx.url, "--timeout", "5", "--retries", "0"],
                           env=penv, capture_output=True, text=True, timeout=120)
        assert any(p.endswith("/env/torch/") for p in other.asked), other.asked
    finally:
        idx.close()
        other.close()
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def test_detect_gpu_reads_the_driver(monkeypatch):
    monkeypatch.setattr(course.os.path, "isdir", lambda p: False)
    monkeypatch.setattr(course.shutil, "which", lambda name: None)
    assert course.detect_gpu() is None
    monkeypatch.setattr(course.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(course.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a, 0, stdout="GPU 0: NVIDIA H100 (UUID: x)\nGPU 1: NVIDIA H100 (UUID: y)\n"))
    assert "2 GPU(s)" in course.detect_gpu()



def test_course_test_runs_two_workers_unless_told_otherwise(monkeypatch):
    assert course.pytest_args(["-x"]) == ["-n", "2", "--dist", "loadscope", "--no-loadscope-reorder", "-x"]
    # A caller who picks the workers (or turns the plugin off) gets exactly what they typed.
    assert course.pytest_args(["-n", "0", "tests/test_cli.py"]) == ["-n", "0", "tests/test_cli.py"]
    assert course.pytest_args(["-n4"]) == ["-n4"]
    assert course.pytest_args(["-p", "no:xdist"]) == ["-p", "no:xdist"]
    monkeypatch.setattr(course, "TEST_WORKERS", "0")
    assert course.pytest_args(["-x"]) == ["-x"]

# ------------------------------------------------------------------ a course clone for a learner
def notebook(*cells: str) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
                                  "outputs": [], "source": c} for i, c in enumerate(cells)],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)


def git(cwd, *args):
    return subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def clone(tmp_path, monkeypatch):
    """An upstream course repo (course.py + two chapters) and a learner's clone with a ready venv."""
    up = tmp_path / "upstream"
    (up / "chapters").mkdir(parents=True)
    (up / "scripts").mkdir()
    for f in ("course.py", "scripts/workspace.py", ".gitignore"):
        shutil.copy(os.path.join(ROOT, f), up / f)
    (up / "chapters" / "00_setup.ipynb").write_text(notebook("print('setup v1')"))
    (up / "chapters" / "02_groups.ipynb").write_text(notebook("x = 1", "print(x)"))
    git(up, "init", "-q", "-b", "main")
    git(up, "add", "-A")
    git(up, "commit", "-qm", "v1")
    me = tmp_path / "learner"
    subprocess.run(["git", "clone", "-q", str(up), str(me)], check=True)
    # A "venv" that is the test's own interpreter, stamped as installed, so no pip runs.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    os.symlink(shutil.which("disttutor", path=os.path.dirname(sys.executable)) or "/bin/false",
               venv / "bin" / "disttutor")
    pins = tmp_path / "pins.txt"
    pins.write_text("torch==2.13.0\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(pins))
    monkeypatch.setenv("DISTTUTOR_VENV", str(venv))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jdata"))  # its own notebook-signature db
    mod = load_course(str(me))
    (venv / ".disttutor-installed").write_text(f"pinned {mod._fingerprint('pinned')}")
    return up, me, venv


def course_py(me, *args, timeout=240):  # each run starts `jupyter trust`: slow on a loaded machine
    return subprocess.run([sys.executable, str(me / "course.py"), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=str(me))


@pytest.mark.timeout(600)  # six course.py runs (git + jupyter trust); ~30 s idle, minutes on a loaded 2-core machine
def test_course_update_keeps_the_learners_edits_and_brings_the_new_chapters(clone):
    up, me, _ = clone
    r = course_py(me, "reset", "00")  # makes the workspace (also what `lab` does first)
    assert r.returncode == 0, r.stdout + r.stderr
    ws = me / "workspace"
    assert sorted(p.name for p in ws.glob("*.ipynb")) == ["00_setup.ipynb", "02_groups.ipynb"]
    assert "workspace/" in git(me, "check-ignore", "-v", "workspace/02_groups.ipynb")
    # The learner edits chapter 2 (their copy) and, against advice, a course file in place.
    mine = notebook("x = 1", "print(x)", "# my notes: all-reduce sums")
    (ws / "02_groups.ipynb").write_text(mine)
    (me / "chapters" / "00_setup.ipynb").write_text(notebook("print('setup, edited in place')"))
    # The course changes chapters 0 and 2 and adds chapter 3.
    (up / "chapters" / "00_setup.ipynb").write_text(notebook("print('setup v2')"))
    (up / "chapters" / "02_groups.ipynb").write_text(notebook("x = 2", "print(x)"))
    (up / "chapters" / "03_new.ipynb").write_text(notebook("print('new chapter')"))
    git(up, "add", "-A")
    git(up, "commit", "-qm", "v2")

    r = course_py(me, "update")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert (ws / "02_groups.ipynb").read_text() == mine                     # the learner's edits kept
    assert "x = 2" in (me / "chapters" / "02_groups.ipynb").read_text()     # the course updated
    assert "setup v2" in (ws / "00_setup.ipynb").read_text()                # untouched copy follows
    assert "new chapter" in (ws / "03_new.ipynb").read_text()               # new chapter appears
    assert "kept your workspace/02_groups.ipynb" in out and "reset 02" in out
    saved = list((ws / "backups").glob("chapters__00_setup.*.ipynb"))       # in-place edit saved
    assert len(saved) == 1 and "edited in place" in saved[0].read_text()
    assert git(me, "status", "--porcelain", "--untracked-files=no") == ""

    r = course_py(me, "reset", "2")
    assert r.returncode == 0 and "backups" in r.stdout, r.stdout + r.stderr
    assert "kept your" not in r.stdout  # no advice to run the very command being run
    assert "x = 2" in (ws / "02_groups.ipynb").read_text()
    backups = list((ws / "backups").glob("workspace__02_groups.*.ipynb"))
    assert len(backups) == 1 and backups[0].read_text() == mine
    r = course_py(me, "reset", "2")  # an unchanged copy: nothing of the learner's to keep
    assert r.returncode == 0 and "you had not changed it: no backup needed" in r.stdout, r.stdout + r.stderr
    assert list((ws / "backups").glob("workspace__02_groups.*.ipynb")) == backups
    (ws / "02_groups.ipynb").write_text(mine)  # the same work again: its backup is there already
    r = course_py(me, "reset", "2")
    assert r.returncode == 0 and f"your copy is in {os.path.relpath(backups[0], me)}" in r.stdout, r.stdout
    assert list((ws / "backups").glob("workspace__02_groups.*.ipynb")) == backups
    r = course_py(me, "update")  # nothing left to say about chapter 2
    assert r.returncode == 0 and "kept your" not in r.stdout
    r = course_py(me, "reset", "7")
    assert r.returncode == 2 and "no single chapter '7'" in r.stdout and "00, 02, 03" in r.stdout


def test_help_exits_0_and_names_every_command(tmp_path):
    for flag in ("--help", "-h"):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "course.py"), flag], capture_output=True, text=True,
                           timeout=60, cwd=str(tmp_path))
        assert r.returncode == 0, r.stdout + r.stderr
        assert all(f"course.py {c}" in r.stdout for c in ("lab", "test", "grade", "reset", "update", "doctor", "run"))
        assert "arguments go to pytest" in r.stdout
    r = subprocess.run([sys.executable, os.path.join(ROOT, "course.py"), "gradee"], capture_output=True, text=True,
                       timeout=60, cwd=str(tmp_path))
    assert r.returncode == 2 and "unknown command 'gradee'" in r.stdout


async def _terminal(port: int, token: str, command: str) -> str:
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/terminals", method="POST", data=b"",
                                 headers={"Authorization": f"token {token}"})
    name = json.load(urllib.request.urlopen(req, timeout=30))["name"]
    ws = await websocket_connect(HTTPRequest(f"ws://127.0.0.1:{port}/terminals/websocket/{name}",
                                             headers={"Authorization": f"token {token}"}))
    ws.write_message(json.dumps(["stdin", command + "; echo END-OF-$((40+2))\r"]))
    out = ""
    while "END-OF-42" not in out:  # the typed line echoes "$((40+2))", only the output says 42
        msg = await asyncio.wait_for(ws.read_message(), 60)
        assert msg is not None, f"terminal closed: {out[-300:]}"
        kind, *payload = json.loads(msg)
        out += payload[0] if kind == "stdout" else ""
    ws.close()
    return out


@pytest.mark.timeout(240)  # a JupyterLab start on a loaded 2-core machine takes up to a minute
def test_lab_opens_at_the_root_terminal_has_disttutor_and_sigterm_stops_the_server(clone, tmp_path):
    up, me, venv = clone
    runtime = tmp_path / "runtime"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime), JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "lw"))
    proc = subprocess.Popen([sys.executable, str(me / "course.py"), "lab", "--no-browser",
                             "--ServerApp.port=0", "--ServerApp.ip=127.0.0.1"],
                            cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not list(runtime.glob("jpserver-*.json")):
            assert proc.poll() is None, proc.stdout.read()[-2000:]
            time.sleep(0.5)
        info = json.load(open(next(runtime.glob("jpserver-*.json"))))
        server = psutil.Process(info["pid"])
        assert server.ppid() == proc.pid
        assert info["root_dir"] == str(me)  # the repository root, not chapters/
        cfg = " ".join(server.cmdline())
        assert "--LabApp.default_url=/lab/tree/workspace/00_setup.ipynb" in cfg
        assert (me / "workspace" / "00_setup.ipynb").exists()
        out = asyncio.run(_terminal(info["port"], info["token"], "pwd; command -v disttutor"))
        assert str(me) in out, out[-500:]                          # a terminal starts at the root
        assert str(venv / "bin" / "disttutor") in out, out[-500:]  # and finds the course's command
    finally:
        proc.send_signal(signal.SIGTERM)  # what `kill -TERM` of `course.py lab` does
        try:
            rc = proc.wait(60)  # jupyter shuts its kernels and terminals down, then course.py ends
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert rc == 0 or rc == -signal.SIGTERM or rc == 143, rc
    assert not psutil.pid_exists(info["pid"]) or psutil.Process(info["pid"]).status() == psutil.STATUS_ZOMBIE, \
        "jupyter-lab outlived course.py"


def test_the_chinese_edition_has_its_own_workspace_and_lab_opens_it(tmp_path, monkeypatch):
    """`course.py lab --lang zh` copies chapters/zh/ into workspace/zh/ and opens its chapter 0; the
    learner's edits there survive a course update exactly as in workspace/ (scripts/workspace.py)."""
    root = tmp_path / "course"
    (root / "chapters" / "zh").mkdir(parents=True)
    (root / "chapters" / "00_setup.ipynb").write_text(notebook("print('setup')"))
    (root / "chapters" / "zh" / "00_setup.ipynb").write_text(notebook("print('setup')", "# 中文版"))
    mod = load_course()
    ran = []
    monkeypatch.setattr(mod, "ROOT", str(root))
    monkeypatch.setattr(mod, "ensure_env", lambda force=None: None)
    monkeypatch.setattr(mod, "run_forwarding", lambda cmd, **kw: ran.append(cmd) or 0)
    monkeypatch.setattr(mod.workspace, "_trust", lambda *a, **k: None)  # no `jupyter trust` run in a unit test
    assert mod.lab(["--lang", "zh", "--no-browser"]) == 0
    assert "--LabApp.default_url=/lab/tree/workspace/zh/00_setup.ipynb" in ran[-1] and "--no-browser" in ran[-1]
    assert (root / "workspace" / "00_setup.ipynb").exists()  # the English copies are made as before
    mine = notebook("print('setup')", "# 中文版", "# 我的笔记")
    (root / "workspace" / "zh" / "00_setup.ipynb").write_text(mine)
    (root / "chapters" / "zh" / "00_setup.ipynb").write_text(notebook("print('setup v2')", "# 中文版"))
    mod.workspace.sync(str(root), lang="zh")
    assert (root / "workspace" / "zh" / "00_setup.ipynb").read_text() == mine  # never overwritten
    assert mod.reset(["00", "--lang=zh"]) == 0
    assert "setup v2" in (root / "workspace" / "zh" / "00_setup.ipynb").read_text()
    backups = list((root / "workspace" / "backups").glob("workspace__zh__00_setup.*.ipynb"))
    assert len(backups) == 1 and backups[0].read_text() == mine
    with pytest.raises(SystemExit, match="editions are en, zh"):
        mod.lab(["--lang", "fr"])
