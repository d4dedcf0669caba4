"""Where ``disttutor grade`` runs one learner's check: a bubblewrap sandbox, bounded.

The check (``python -m disttutor.course.grade --one``, its torchrun agent and its ranks) sees:

* the course's package ``disttutor/`` read-only, without the exercise's reference modules
  (``Exercise.references``: each file is replaced by one that says "your code calls ...: write it
  yourself") -- and nothing else of the course's folder: no ``solutions/``, no ``.git``, no
  ``tests/``, no class folder;
* the Python it runs on (the interpreter's and the environment's folders), ``/usr`` and a few
  files of ``/etc``, read-only;
* its own empty folder, read-write, as ``/sandbox`` (``HOME`` and ``TMPDIR`` too);
* its own network namespace (only loopback, which the ranks rendezvous on), process namespace,
  IPC and host name; and, as root, a user of its own (no capabilities, no root's files).

Limits (:class:`Limits`): memory per process, processes and threads, CPU time per process,
bytes per file written (stdout and stderr are files too). Where bubblewrap is missing (macOS,
Windows, a Linux without the ``bubblewrap`` package) the grader refuses to start unless told
``--unsafe-no-sandbox``; the checks then run as the teacher, with the same limits where the
system has them and the in-process guard (:mod:`disttutor.checks.guard`). Standard library only.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../disttutor
ROOT = os.path.dirname(PKG)
BOX = "/sandbox"                   # the check's own folder, inside the sandbox
FIRST_UID = 61000                  # root grades as these users (one per check at a time)
ENV_UID = "DISTTUTOR_SANDBOX_UID"  # the `--one` child becomes this user before it reads the code
PASS_ENV = ("LANG", "LC_ALL", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED")
INSTALL = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"


def user() -> int:
    """This process's user id (-1 where there are none: Windows)."""
    return os.getuid() if hasattr(os, "getuid") else -1


class SandboxUnavailable(ValueError):
    """No sandbox on this machine, and the teacher did not accept running without one."""


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 4 << 30    # address space per process: a checker's rank peaks under 1 GiB
    processes: int = 256           # processes + threads of the check: 4 ranks x ~15 threads, agent, checker
    cpu_seconds: int = 1200        # CPU time per process: beyond any checker job (each stops at 300 s)
    output_bytes: int = 32 << 20   # bytes per file the check writes (its stdout, stderr, the ranks' logs)


@lru_cache(maxsize=1)
def unavailable() -> str:
    """Why this machine cannot sandbox a check ("" if it can)."""
    if platform.system() != "Linux":
        return f"bubblewrap runs on Linux only (this is {platform.system()})"
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return f"bubblewrap (bwrap) is not installed: {INSTALL}"
    args = [bwrap, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--dev", "/dev", "--proc", "/proc"]
    if os.getuid() != 0:
        args.append("--unshare-user")
    try:
        r = subprocess.run([*args, "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap does not start: {e}"
    return "" if r.returncode == 0 else f"bwrap does not start here: {(r.stderr.strip() or 'no message')[:200]}"


def _parents(path: str) -> list[str]:
    """``--dir`` for each folder above ``path`` (bwrap would make them 0700: other users see nothing)."""
    out, d = [], os.path.dirname(path)
    while d not in ("/", ""):
        out.append(d)
        d = os.path.dirname(d)
    return [a for p in reversed(out) for a in ("--perms", "0755", "--dir", p)]


def _python_roots() -> list[str]:
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    roots.add(os.path.dirname(os.path.realpath(sys.executable)))
    for p in sys.path:  # e.g. a user's site-packages; never the course's root (solutions/ is in it)
        rp = os.path.realpath(p) if p else ""
        if rp and os.path.isdir(rp) and rp != ROOT and not rp.startswith(ROOT + os.sep) and "site-packages" in rp:
            roots.add(rp)
    roots = {r for r in roots if not r.startswith("/usr/")}
    return sorted(r for r in roots if not any(r.startswith(o + os.sep) for o in roots if o != r))


def reference_files(module: str) -> list[str]:
    """The files of ``module``: the course's, and an installed copy's (``pip install .``) if there is one."""
    import site

    rel = os.path.join(*module.split(".")) + ".py"
    dirs = [*site.getsitepackages(), site.getusersitepackages()] if hasattr(site, "getsitepackages") else []
    found = [os.path.join(ROOT, rel), *(os.path.join(d, rel) for d in dirs if os.path.isfile(os.path.join(d, rel)))]
    return list(dict.fromkeys(found))


def write_files(ro: str, uid: int, references: tuple[str, ...]) -> dict[str, str]:
    """The sandbox's generated read-only files in ``ro``: {path inside: path here}."""
    files = {"/etc/hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
             "/etc/passwd": f"root:x:0:0::/:/bin/false\nlearner:x:{uid}:{uid}::{BOX}:/bin/false\n",
             "/etc/group": f"root:x:0:\nlearner:x:{uid}:\n"}
    for m in references:
        for path in reference_files(m):
            files[path] = f"raise ImportError({f'your code calls {m}: write it yourself'!r})\n"
    out = {}
    for i, (inside, text) in enumerate(files.items()):
        here = os.path.join(ro, f"{i}_{os.path.basename(inside)}")
        with open(here, "w") as f:
            f.write(text)
        out[inside] = here
    return out


def bwrap_args(box: str, ro: str, uid: int, references: tuple[str, ...], show: dict[str, str] | None = None) -> list[str]:
    """bubblewrap's command line up to (not including) the program it runs; ``show``: more files,
    read-only, {path inside: path here} (the learner's code, at ``/grade/...``)."""
    args = [shutil.which("bwrap") or "bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if os.getuid() != 0:
        args.append("--unshare-user")
    args += ["--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    args += ["--dev", "/dev", "--proc", "/proc", "--perms", "0755", "--dir", "/etc",
             "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache", "--ro-bind-try", "/etc/localtime", "/etc/localtime"]
    for r in [*_python_roots(), PKG]:
        args += [*_parents(r), "--ro-bind", r, r]
    caches = sorted({os.path.join(os.path.dirname(f), "__pycache__") for m in references for f in reference_files(m)})
    for inside, here in {**write_files(ro, uid, references), **(show or {})}.items():
        args += [*_parents(inside), "--ro-bind", here, inside]
    for c in caches:  # the references' compiled copies, too
        if os.path.isdir(c):
            args += ["--tmpfs", c]
    return [*args, "--perms", "0755", "--dir", BOX, "--bind", box, BOX, "--chdir", BOX, "--remount-ro", "/"]


def environment(env: dict[str, str], uid: int | None, sandboxed: bool) -> dict[str, str]:
    """The check's environment: the course's and the threads' settings, nothing of the teacher's."""
    out = {k: v for k, v in env.items() if k in PASS_ENV or k.startswith(("DISTTUTOR_", "TORCH_", "GLOO_"))}
    home = BOX if sandboxed else env.get("TMPDIR", "/tmp")
    out.update(PATH=os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
               PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1", PYTHONSAFEPATH="1", USER="learner", LOGNAME="learner")
    if sandboxed:
        out.update(HOME=home, TMPDIR=home, DISTTUTOR_SANDBOX=BOX, GLOO_SOCKET_IFNAME="lo")
    if uid is not None:
        out[ENV_UID] = str(uid)
    return out


def user_tasks(uid: int) -> int:
    """Processes + threads this user runs now (RLIMIT_NPROC counts them all)."""
    n = 0
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            if pid.isdigit() and os.stat(f"/proc/{pid}").st_uid == uid:
                n += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return n


def limiter(limits: Limits, processes: int | None):
    """The function the check's first process runs before it starts (POSIX): its rlimits."""
    import resource  # POSIX only: the grader calls this only there

    def apply() -> None:
        for what, value in ((resource.RLIMIT_AS, limits.memory_bytes), (resource.RLIMIT_FSIZE, limits.output_bytes)):
            resource.setrlimit(what, (value, value))
        # SIGXCPU at the limit (the grader names it), SIGKILL a little later if the code ignores it
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5))
        if processes is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    return apply


def killed_by(returncode: int, sig: int) -> bool:
    """A process killed by ``sig``: -sig from Python, 128 + sig from bwrap (it exits as its child did)."""
    return returncode in (-sig, 128 + sig)


def become(uid_text: str | None) -> None:
    """Inside the sandbox, as root: become the check's own user before any learner code runs."""
    if uid_text and user() == 0:
        uid = int(uid_text)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # root's capabilities go with it; bwrap's no_new_privs keeps them gone
