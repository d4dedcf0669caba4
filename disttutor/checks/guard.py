"""What a learner's code may not do while it is checked: call the exercise's answers, or (when a
class is graded) reach outside its sandbox. Introduced in chapter 2 (the first checker on ranks).

:func:`disttutor.checks.adapter.load_exercise` installs the guard for the learner's file, in
every process that runs it (the kernel for a formula, each rank for a checker program). From then
on, whatever that file's code does -- directly, or through anything it calls -- is refused, with
a line that names it:

* importing or reading the exercise's reference implementation (``Exercise.references``):
  "your code calls disttutor.scratch.allreduce: write it yourself";
* reading ``solutions/`` (or the course's ``.git``, which holds them too);
* starting a process (``subprocess``, ``os.fork``, ``os.system``, ...): a check runs the processes
  its checker starts, never its own;
* listening on an address other than loopback;
* when graded (``DISTTUTOR_SANDBOX`` names the sandbox's own folder): opening, writing or
  deleting a path outside that folder and the read-only course and Python the sandbox shows.

A refusal raises in the learner's code *and* is written down (``DISTTUTOR_VIOLATIONS``, a file
every process of the check appends to): code that catches the exception still fails its check.
:func:`static_problem` finds the plain cases in the source before anything runs. Python is no
security boundary (a hook can be bypassed): the grader's bubblewrap sandbox is
(:mod:`disttutor.course.sandbox`), where ``solutions/`` and the exercise's reference files are not
there at all; this module is what turns an attempt into a message. Standard library only.
"""
from __future__ import annotations

import ast
import builtins
import os
import sys

ENV_EXERCISE = "DISTTUTOR_EXERCISE"      # the exercise being checked: its references are refused
ENV_VIOLATIONS = "DISTTUTOR_VIOLATIONS"  # the file every process of a check appends its refusals to
ENV_SANDBOX = "DISTTUTOR_SANDBOX"        # set when graded: the sandbox's own (writable) folder
PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../disttutor
ROOT = os.path.dirname(PKG)
PROCESS_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                  "os.forkpty", "pty.spawn")
WRITE_EVENTS = ("os.mkdir", "os.remove", "os.rename", "os.rmdir", "os.symlink", "os.link", "os.chmod",
                "os.chown", "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile")
READ_ROOTS = ("/usr", "/lib", "/lib64", "/bin", "/etc", "/dev", "/proc", "/sys")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

_files: set[str] = set()       # the learner's files being checked in this process
_modules: dict[str, str] = {}  # refused module -> its file (without .py)
_hooked = False
_busy = False
refused: list[str] = []        # what this process refused, in order


def reference_message(module: str) -> str:
    return f"your code calls {module}: write it yourself"


def references(exercise_id: str | None) -> tuple[str, ...]:
    if not exercise_id:
        return ()
    from disttutor.checks.registry import exercise

    try:
        return exercise(exercise_id).references
    except ValueError:
        return ()


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def static_problem(src: str, exercise_id: str | None) -> str | None:
    """The first reference of the exercise the learner's source names, as the refusal says it."""
    refs = references(exercise_id)
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None  # the run reports it, with its line
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Attribute):
            names = [_dotted(node)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]  # importlib.import_module("disttutor.scratch.ddp")
        for n in names:
            for m in refs:
                if n == m or n.startswith(m + "."):
                    return reference_message(m)
    return None


def _module_file(module: str) -> str:
    return os.path.join(ROOT, *module.split("."))


def install(learner_file: str, exercise_id: str | None) -> dict:
    """Guard ``learner_file``'s code in this process; returns the builtins its module must use."""
    global _hooked
    _files.add(os.path.abspath(learner_file))
    for m in references(exercise_id):
        _modules[m] = _module_file(m)
        for name in [n for n in sys.modules if n == m or n.startswith(m + ".")]:
            del sys.modules[name]  # a cached module is no import at all: make the next one real
            parent, _, child = name.rpartition(".")
            if parent in sys.modules and getattr(sys.modules[parent], child, None) is not None:
                delattr(sys.modules[parent], child)
    if not _hooked:
        sys.addaudithook(_audit)
        sys.meta_path.insert(0, _Finder())
        _hooked = True
    return {**vars(builtins), "__import__": _guarded_import}


def guarded() -> set[str]:
    return set(_files)


def keep_only(files: set[str]) -> None:
    """A check is over: the files it guarded run as ordinary code again (the hook stays, idle)."""
    _files.intersection_update(files)


def read_refusals(path: str) -> list[str]:
    """What the processes of one check refused (the file ``DISTTUTOR_VIOLATIONS`` names)."""
    try:
        with open(path, errors="replace") as f:
            return [ln.strip() for ln in f if ln.strip()]
    except OSError:
        return []


def _refuse(message: str, error: type[Exception] = PermissionError) -> None:
    global _busy
    refused.append(message)
    path = os.environ.get(ENV_VIOLATIONS)
    if path and not _busy:
        _busy = True
        try:
            with open(path, "a") as f:
                f.write(message.replace("\n", " ") + "\n")
        except OSError:
            pass
        finally:
            _busy = False
    raise error(message)


def _from_learner() -> bool:
    if not _files or _busy:
        return False
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_filename in _files:
            return True
        f = f.f_back
    return False


def _refused_module(name: str) -> str | None:
    for m in _modules:
        if name == m or name.startswith(m + "."):
            return m
    return None


def _guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
    if _files and not level:  # the learner module's own `import` statements, cached modules too
        for n in [name, *(f"{name}.{x}" for x in (fromlist or ()) if isinstance(x, str))]:
            m = _refused_module(n)
            if m:
                _refuse(reference_message(m), ImportError)
    return builtins.__import__(name, globals, locals, fromlist, level)


class _Finder:
    """Any other way to import a reference from the learner's code (importlib, __import__)."""

    def find_spec(self, name, path=None, target=None):
        m = _refused_module(name) if _modules else None
        if m and _from_learner():
            _refuse(reference_message(m), ImportError)
        return None


def _path(arg) -> str | None:
    if isinstance(arg, (str, bytes, os.PathLike)):
        try:
            return os.path.realpath(os.fsdecode(arg))
        except (TypeError, ValueError):
            return None
    return None


def _inside(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _read_roots(box: str) -> tuple[str, ...]:
    return (box, PKG, *{os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}, *READ_ROOTS)


def _check_path(path: str, write: bool) -> None:
    solutions = os.path.join(ROOT, "solutions")
    if _inside(path, (solutions, os.path.join(ROOT, ".git"))):
        rel = os.path.relpath(path, ROOT)
        if "__pycache__" in rel:  # solutions/__pycache__/ex1_1_x.cpython-311.pyc -> solutions/ex1_1_x.py
            rel = os.path.join(os.path.dirname(os.path.dirname(rel)), os.path.basename(rel).split(".")[0] + ".py")
        _refuse(f"your code reads {rel}: write it yourself")
    for m, base in _modules.items():
        cache = os.path.join(os.path.dirname(base), "__pycache__", os.path.basename(base) + ".")
        if path in (base + ".py", base) or path.startswith(base + "/") or path.startswith(cache):
            _refuse(reference_message(m))
    box = os.environ.get(ENV_SANDBOX)
    if box:
        box = os.path.realpath(box)
        if write and not _inside(path, (box, "/dev/null")):
            _refuse(f"your code writes {path}: outside its sandbox (it may write only in its own folder)")
        if not _inside(path, _read_roots(box)):
            _refuse(f"your code opens {path}: outside its sandbox (it sees the course's code and its own folder)")


def _audit(event: str, args: tuple) -> None:
    if not _files or _busy:
        return
    if event == "open":
        if not isinstance(args[0], (str, bytes, os.PathLike)) or not _from_learner():
            return
        path = _path(args[0])
        if path is None:
            return
        mode, flags = args[1] or "", args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        _check_path(path, any(c in mode for c in "wax+") or bool(flags & WRITE_FLAGS))
    elif event in WRITE_EVENTS:
        path = _path(args[0]) if args else None
        if path is not None and _from_learner():
            _check_path(path, True)
    elif event.startswith(PROCESS_EVENTS):
        if _from_learner():
            what = f"{event} {args[1]!r}"[:80] if event == "subprocess.Popen" else event
            _refuse(f"your code starts a process ({what}): a check runs only the processes its checker starts")
    elif event == "socket.bind" and len(args) > 1 and isinstance(args[1], tuple):
        host = str(args[1][0])
        if host not in ("127.0.0.1", "::1", "localhost") and not host.startswith("127.") and _from_learner():
            _refuse(f"your code opens a socket on {host or '0.0.0.0'}:{args[1][1]}: a submission may listen "
                    "on loopback (127.0.0.1) only")
