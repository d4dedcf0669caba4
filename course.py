#!/usr/bin/env python3
"""Set up and use the disttutor course with nothing but Python 3.10+.

    python3 course.py lab [--cpu|--gpu]   # create .venv, install, open the course in JupyterLab
    python3 course.py lab --lang zh       # the same, opening the Chinese edition (中文版, chapters/zh/)
    python3 course.py doctor              # = disttutor doctor (checks the machine)
    python3 course.py run hello -n 4      # = disttutor run ... (any course program or script)
    python3 course.py update              # pull a course update; your notebooks are kept
    python3 course.py reset 02            # your chapter 2 back to the course's (a backup is kept; --lang zh: 中文版)
    python3 course.py grade class/        # = disttutor grade ... (teachers: check a class's notebooks)
    python3 course.py export ../class-copy # = disttutor export ... (teachers: the course without solutions/)
    python3 course.py test [PYTEST ARGS]  # run every test (unit + all notebooks); arguments go to pytest
    python3 course.py execute [chapters/src/NN_x.py ...]   # maintainers: rebuild chapters
    python3 course.py site                # the course as a static website in site/ (nothing re-run)
    python3 course.py plain [NAME ...] [--out DIR]   # the plain torch-only scripts: list, print, or copy out

You work in workspace/ (your own copies of chapters/, made on first `lab`; git ignores them),
so a course update never touches your work. --cpu / --gpu force the PyTorch build installed
(default: the CUDA build only when an NVIDIA GPU is found). Environment: DISTTUTOR_VENV picks
another venv folder; DISTTUTOR_EXTRAS the extras installed (default "dev"); PIP_CONSTRAINT is
honoured by pip (CI pins torch with .ci/constraints.txt).
Uses only the standard library, so it runs before anything is installed.
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import venv

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts"))
import workspace  # noqa: E402  (scripts/workspace.py, standard library only)

ROOT = os.path.dirname(os.path.abspath(__file__))
VENV = os.environ.get("DISTTUTOR_VENV", os.path.join(ROOT, ".venv"))
BIN = os.path.join(VENV, "Scripts" if os.name == "nt" else "bin")
PY = os.path.join(BIN, "python.exe" if os.name == "nt" else "python")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Extras of pyproject.toml to install; CI adds "browser" (playwright, for scripts/browser_check.py).
EXTRAS = os.environ.get("DISTTUTOR_EXTRAS", "dev")
TORCH_SPEC = "torch>=2.6"  # the same bound as pyproject.toml (tests/test_course.py checks)


# ---------------------------------------------------------------- which torch to install
def detect_gpu() -> str | None:
    """Why we think an NVIDIA GPU is here (None: no sign of one)."""
    if os.path.isdir("/proc/driver/nvidia/gpus") and os.listdir("/proc/driver/nvidia/gpus"):
        return "the NVIDIA driver lists GPUs (/proc/driver/nvidia/gpus)"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        if "GPU" in out:
            return f"nvidia-smi -L lists {out.count('GPU ')} GPU(s)"
    return None


def torch_pin(constraint_files: str) -> str | None:
    """The `torch==X` line of the PIP_CONSTRAINT file(s), if any."""
    for path in constraint_files.split():
        try:
            m = re.search(r"^\s*(torch\s*==\s*[^\s#;]+)", open(path).read(), re.M)
        except OSError:
            continue
        if m:
            return m.group(1).replace(" ", "")
    return None


def torch_plan(platform: str, gpu: str | None, force: str | None, pin: str | None) -> tuple[str, str]:
    """(kind, why): kind is "pinned", "cpu-index" (PyTorch's CPU wheel index) or "pypi"."""
    if pin:  # CI and prepared classrooms: the pinned (local) wheel, never a download site
        extra = f" ({'--' + force} ignored)" if force else ""
        return "pinned", f"PIP_CONSTRAINT pins {pin}{extra}"
    if not platform.startswith("linux"):
        # PyPI's torch for macOS and Windows is the CPU build already (no CUDA wheels there).
        return "pypi", f"PyPI's torch for {platform} is a CPU build" + (" (no CUDA build here)" if force == "gpu" else "")
    if force == "gpu":
        return "pypi", "--gpu: PyPI's Linux torch is the CUDA build"
    if force == "cpu":
        return "cpu-index", "--cpu: the CPU-only build"
    if gpu:
        return "pypi", f"{gpu}: the CUDA build from PyPI"
    # measured for 2.13.0+cpu (Linux x86-64): a 183 MiB wheel, 754 MiB unpacked (README, Quickstart)
    return "cpu-index", "no NVIDIA GPU found: the CPU-only build (a ~180 MiB download, not several GB of CUDA wheels)"


def install_commands(py: str, kind: str, extras: str = "dev") -> list[list[str]]:
    """The pip command lines for a plan: torch first (from the CPU index when asked), then the course."""
    course = [py, "-m", "pip", "install", "-e", f".[{extras}]"]
    if kind == "cpu-index":
        # --index-url, not --extra-index-url: with both indexes pip would take the highest version,
        # which is PyPI's CUDA build whenever the CPU index lags behind. Installed first, torch then
        # satisfies the course's requirement and pip leaves it alone.
        return [[py, "-m", "pip", "install", TORCH_SPEC, "--index-url", CPU_INDEX, "--timeout", "30", "--retries", "1"], course]
    return [course]


# ---------------------------------------------------------------- can the CPU index be used?
def probe(url: str, timeout: float = 10.0) -> str | None:
    """None if ``url`` answers (one short request, through the same proxy settings pip uses), else why not."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout) as r:
            return None if r.status < 400 else f"HTTP {r.status}"
    except urllib.error.HTTPError as e:  # 405: a server that refuses HEAD is still there
        return None if e.code == 405 else f"HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return str(reason) or type(reason).__name__


def extra_sources(pip_config_list: str) -> list[str]:
    """The package sources besides the index that pip's configuration adds (``pip config list``'s
    output: pip.conf files and PIP_* variables): every extra-index-url and find-links."""
    found = []
    for line in pip_config_list.splitlines():
        m = re.match(r"^(?:global|install|:env:)\.(extra-index-url|find-links)='(.*)'$", line.strip())
        if m:
            found += [v for v in m.group(2).split() if v not in found]
    return found


def torch_source(index: str, unreachable: str | None, extras: list[str], empty_dir: str) -> tuple[str, dict, str]:
    """(kind, environment for pip, the one line printed) for a CPU-build install.

    ``unreachable``: :func:`probe`'s answer. Unreachable: PyPI's torch, said once, before pip
    retries anything. Extra sources configured: pip would take the highest version from any of
    them (PyPI's CUDA build, a mirror's newer torch), so for torch alone they are replaced by the
    CPU index itself and an empty folder (environment variables win over pip.conf).
    """
    if unreachable:
        return "pypi", {}, (f"torch: PyTorch's CPU index ({index}) could not be reached ({unreachable}): installing "
                            "torch from PyPI instead, which on Linux is the CUDA build (about 3 GB to download).")
    if extras:
        env = {"PIP_EXTRA_INDEX_URL": index, "PIP_FIND_LINKS": empty_dir}
        return "cpu-index", env, (f"torch: the CPU-only build from {index}; your pip configuration also names "
                                  f"{', '.join(extras)}: left out for torch (a newer torch there would win), "
                                  "used for the rest.")
    return "cpu-index", {}, f"torch: the CPU-only build from {index} (it answered)."


def _show(path: str) -> str:
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


def _size(path: str) -> float:
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_size
            except OSError:
                pass
    return total / 2**30


def _fingerprint(kind: str) -> str:
    h = hashlib.sha256((kind + EXTRAS).encode())
    for name in ("pyproject.toml", os.path.join(".ci", "constraints.txt")):
        p = os.path.join(ROOT, name)
        if os.path.exists(p):
            h.update(open(p, "rb").read())
    h.update(os.environ.get("PIP_CONSTRAINT", "").encode())
    return h.hexdigest()


def ensure_env(force: str | None = None) -> None:
    """Create the venv and install the course (editable, with test extras) once."""
    if sys.version_info < (3, 10):
        sys.exit(f"disttutor needs Python 3.10 or newer; this is {sys.version.split()[0]}")
    stamp = os.path.join(VENV, ".disttutor-installed")
    installed = open(stamp).read().split() if os.path.exists(stamp) else []
    if installed and force is None:
        force = {"cpu-index": "cpu", "pypi": "gpu"}.get(installed[0])  # keep the first choice
    kind, why = torch_plan(sys.platform, None if force else detect_gpu(), force,
                           torch_pin(os.environ.get("PIP_CONSTRAINT", "")))
    fp = _fingerprint(kind)
    if os.path.exists(PY) and installed[1:] == [fp]:
        return
    if not os.path.exists(PY):
        print(f"creating virtual environment in {_show(VENV)}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print(f"installing disttutor and its dependencies; torch: {why}", flush=True)
    source, pip_env = kind, {}
    if kind == "cpu-index":
        listed = subprocess.run([PY, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
        empty = os.path.join(VENV, ".no-extra-links")
        os.makedirs(empty, exist_ok=True)
        source, pip_env, line = torch_source(CPU_INDEX, probe(CPU_INDEX + "/torch/"), extra_sources(listed), empty)
        print(line, flush=True)
    for cmd in install_commands(PY, source, EXTRAS):
        isolated = CPU_INDEX in cmd
        if subprocess.call(cmd, cwd=ROOT, env={**os.environ, **pip_env} if isolated else None) != 0:
            if not isolated:
                sys.exit(f"installing failed: {' '.join(cmd[1:])}")
            print(f"torch: pip could not install it from {CPU_INDEX} (its message is above): installing torch from "
                  "PyPI instead, which on Linux is the CUDA build (about 3 GB to download).", flush=True)
    torch_v = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    print(f"installed torch {torch_v}; {_show(VENV)} takes {_size(VENV):.1f} GiB", flush=True)
    with open(stamp, "w") as f:
        f.write(f"{kind} {fp}")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # ranks share few cores; see chapter 0
    # The venv's bin first: `disttutor`, `torchrun` and `jupyter` work in JupyterLab's terminals
    # and in everything started from here, without activating anything.
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = VENV
    return env


def _lang(extra: list[str]) -> tuple[str, list[str]]:
    """``--lang zh`` (or ``--lang=zh``): the edition a command works on; English by default."""
    rest, lang, it = [], "en", iter(extra)
    for a in it:
        if a == "--lang":
            lang = next(it, "")
        elif a.startswith("--lang="):
            lang = a.split("=", 1)[1]
        else:
            rest.append(a)
    if lang not in workspace.LANGS:
        sys.exit(f"course.py: --lang {lang!r}: the course's editions are {', '.join(workspace.LANGS)} "
                 "(zh: the Chinese edition, chapters/zh/)")
    return lang, rest


def _flags(extra: list[str]) -> tuple[str | None, list[str]]:
    force = "cpu" if "--cpu" in extra else "gpu" if "--gpu" in extra else None
    if "--cpu" in extra and "--gpu" in extra:
        sys.exit("course.py: --cpu and --gpu exclude each other")
    return force, [a for a in extra if a not in ("--cpu", "--gpu")]


# ---------------------------------------------------------------- commands
def run_forwarding(cmd: list[str], **kw) -> int:
    """Run a child, pass SIGTERM (and SIGHUP, as SIGTERM) on to it and wait for it to end: killing
    this script must not leave a server running on its own (adopted by init, still serving).

    Ctrl-C needs no forwarding: the terminal sends SIGINT to the child too, and a second copy
    from here would turn jupyter's "Shutdown this server (y/[n])?" into an immediate stop."""
    proc = subprocess.Popen(cmd, **kw)

    def forward(signum, _frame):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    # Installed after Popen: handlers are not inherited across exec (an ignored signal would be).
    old = {signal.SIGTERM: signal.signal(signal.SIGTERM, forward),
           signal.SIGINT: signal.signal(signal.SIGINT, lambda *_: None)}
    if hasattr(signal, "SIGHUP"):
        old[signal.SIGHUP] = signal.signal(signal.SIGHUP, forward)
    try:
        return proc.wait()
    finally:
        if proc.poll() is None:  # leaving for another reason: do not leave it behind
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for s, h in old.items():
            signal.signal(s, h)


def lab(extra: list[str]) -> int:
    lang, extra = _lang(extra)
    force, extra = _flags(extra)
    ensure_env(force)
    first = workspace.sync(ROOT, trust=[PY, "-m", "jupyter", "trust"], env=_env())
    if lang != "en":  # the Chinese edition's copies too (workspace/zh/), and its chapter 0 in front
        first = workspace.sync(ROOT, trust=[PY, "-m", "jupyter", "trust"], env=_env(), lang=lang)
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in extra:
        extra = [*extra, "--allow-root"]  # containers and classroom VMs often run as root; Jupyter refuses otherwise
    # Rooted at the repository, so chapters/, solutions/, disttutor/programs/ and benchmarks/ are all
    # in the file browser and a terminal starts here; the learner's copy of chapter 0 opens in front.
    if os.name != "nt":
        # Terminals run the user's shell as an interactive, non-login shell. Jupyter starts a
        # *login* shell when it was not started from a terminal (a desktop launcher, nohup, a
        # test), and a login shell's /etc/profile resets PATH, hiding `disttutor` (the venv's bin).
        shell = shlex.quote(os.environ.get("SHELL") or "/bin/sh")
        extra = [f"--ServerApp.terminado_settings=shell_command={shell}", *extra]
    return run_forwarding([PY, "-m", "jupyter", "lab", f"--ServerApp.root_dir={ROOT}",
                           f"--LabApp.default_url=/lab/tree/{workspace.DIR}/{first}", *extra],
                          cwd=ROOT, env=_env())


def update(extra: list[str]) -> int:
    ensure_env()
    if workspace.pull(ROOT) != 0:
        return 1
    workspace.sync(ROOT, trust=[PY, "-m", "jupyter", "trust"], env=_env(), verbose=True)
    for lang in workspace.LANGS[1:]:  # an edition the learner opened follows the course too
        if os.path.isdir(os.path.join(ROOT, workspace.DIR, lang)):
            workspace.sync(ROOT, trust=[PY, "-m", "jupyter", "trust"], env=_env(), verbose=True, lang=lang)
    return 0


def reset(extra: list[str]) -> int:
    lang, extra = _lang(extra)
    if len(extra) != 1:
        print("usage: python3 course.py reset NN [--lang zh]   (e.g. reset 02)")
        return 2
    ensure_env()
    # the other chapters first (a fresh clone gets its workspace); not a word about the one being reset
    workspace.sync(ROOT, trust=[PY, "-m", "jupyter", "trust"], env=_env(),
                   skip=workspace.chapter_name(ROOT, extra[0], lang), lang=lang)
    return workspace.reset(ROOT, extra[0], trust=[PY, "-m", "jupyter", "trust"], env=_env(), lang=lang)


# Two pytest-xdist workers: much of the suite waits (collective timeouts that a test provokes,
# kernel and torchrun start-up, sleeps of the kill tests), so a second worker fills that time, also
# on 2 cores. --dist loadscope keeps a notebook's cells (and a module's fixtures) in one worker, in
# order. DISTTUTOR_TEST_WORKERS=0 runs everything in this process; "-n ..." on the command line wins.
TEST_WORKERS = os.environ.get("DISTTUTOR_TEST_WORKERS", "2")


def pytest_args(extra: list[str]) -> list[str]:
    """pytest's arguments for `course.py test`: the workers unless the caller chose them."""
    chose = any(a in ("-n", "--numprocesses", "-p") or a.startswith(("-n", "--numprocesses=", "--dist"))
                for a in extra)
    if chose or TEST_WORKERS in ("", "0"):
        return list(extra)
    # --no-loadscope-reorder: files in tests/conftest.py's order (longest first), not by test count.
    return ["-n", TEST_WORKERS, "--dist", "loadscope", "--no-loadscope-reorder", *extra]


def test(extra: list[str]) -> int:
    force, extra = _flags(extra)
    ensure_env(force)
    return run_forwarding([PY, "-m", "pytest", *pytest_args(extra)], cwd=ROOT, env=_env())


def execute(paths: list[str]) -> int:
    ensure_env()
    # No paths: build_notebooks.py builds every chapters/src/NN_*.py.
    return run_forwarding([PY, os.path.join(ROOT, "scripts", "build_notebooks.py"), *paths], cwd=ROOT, env=_env())


def site(extra: list[str]) -> int:
    global EXTRAS
    if "site" not in EXTRAS.split(","):  # the site's build tools: an extra, not the learner's install
        EXTRAS = f"{EXTRAS},site"
    ensure_env()
    return run_forwarding([PY, "-m", "disttutor.course.site", *extra], cwd=ROOT, env=_env())


PLAIN = os.path.join(ROOT, "disttutor", "plain")


def plain(extra: list[str]) -> int:
    """The copyable torch-only scripts of disttutor/plain/: list them, print one, or copy them to --out DIR."""
    have = sorted(f[:-3] for f in os.listdir(PLAIN) if f.endswith(".py") and f != "__init__.py")
    out = None
    if "--out" in extra:
        i = extra.index("--out")
        if i + 1 >= len(extra):
            print("course.py plain: --out needs a folder")
            return 2
        out, extra = extra[i + 1], extra[:i] + extra[i + 2:]
    names = [n[:-3] if n.endswith(".py") else n for n in extra]
    unknown = [n for n in names if n not in have]
    if unknown:
        print(f"course.py plain: no script {', '.join(unknown)}; the scripts are {', '.join(have)}")
        return 2
    if out is not None:
        os.makedirs(out, exist_ok=True)
        for n in names or have:
            shutil.copy(os.path.join(PLAIN, n + ".py"), os.path.join(out, n + ".py"))
            print(f"{os.path.join(out, n + '.py')}   run: torchrun --nproc-per-node 2 {os.path.join(out, n + '.py')}")
        return 0
    if not names:
        print("plain torch-only scripts (print one: course.py plain NAME; copy: course.py plain --out DIR):")
        for n in have:
            parts = open(os.path.join(PLAIN, n + ".py"), encoding="utf-8").read().split('"""')
            doc = (parts[1].strip().splitlines() or [""])[0] if len(parts) > 2 else ""
            print(f"  {n:10s} {doc}")
        return 0
    for n in names:
        print(open(os.path.join(PLAIN, n + ".py"), encoding="utf-8").read(), end="")
    return 0


def disttutor(cmd: str):
    def passthrough(extra: list[str]) -> int:
        ensure_env()
        return run_forwarding([PY, "-m", "disttutor.course.cli", cmd, *extra], env=_env())
    return passthrough


def main() -> int:
    cmds = {"lab": lab, "test": test, "execute": execute, "update": update, "reset": reset, "site": site,
            "plain": plain, "doctor": disttutor("doctor"), "run": disttutor("run"), "grade": disttutor("grade"),
            "export": disttutor("export")}
    if sys.argv[1:2] in (["-h"], ["--help"], ["help"]):
        print(__doc__)
        return 0
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        print(__doc__)
        if len(sys.argv) > 1:
            print(f"course.py: unknown command {sys.argv[1]!r}; the commands are {', '.join(cmds)}")
        return 2
    return cmds[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
