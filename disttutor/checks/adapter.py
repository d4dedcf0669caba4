"""The one thin adapter between a learner's code and the ranks that check it.

Notebook side: :func:`write_exercise` turns a function defined in a cell (or a
path to a ``.py`` file, or a source string) into a module file in the run
directory. Rank side: :func:`load_exercise` imports that file and returns the
function. Then :func:`run_check` launches a checker program and turns what
the ranks reported into a :class:`CheckResult` that says, in words, which
rank and what went wrong. Introduced in chapter 2 (the ring all-reduce).

A checker program reports per rank::

    runtime.report(passed=False, problem="rank 2, chunk 1: expected 6.0, got 4.0")
and is launched with ``--source PATH --name FUNC``.
"""
from __future__ import annotations

import importlib.util
import inspect
import os
import re
import tempfile
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable

from disttutor.contract.options import opt

#: Wall-clock limit of one checker job. A learner's hang is caught far sooner by the short
#: collective timeout each checker sets (10 s); this only bounds a machine so busy (a classroom
#: server, a loaded CI box) that starting the ranks alone takes a minute.
JOB_TIMEOUT_S = 300.0

# Prepended to learner source so a cell's function works without its own imports.
HEADER = "import math\nimport torch\nimport torch.distributed as dist\n\n"


def class_source(cls: type) -> str:
    """Source of a class, also one defined in a notebook cell.

    ``inspect.getsource`` cannot find classes defined in ``__main__`` before
    Python 3.13 (it looks for the module's file); a class's *methods* do know
    their file -- for a notebook, the cell -- so fall back to that cell's text.
    """
    import linecache

    try:
        return textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        pass
    for f in vars(cls).values():
        # a staticmethod/classmethod (an autograd.Function's forward/backward) wraps its function
        code = getattr(getattr(f, "__func__", f), "__code__", None)
        if code is not None:
            text = "".join(linecache.getlines(code.co_filename))
            if f"class {cls.__name__}" in text:
                return text
    raise TypeError(f"cannot find the source of class {cls.__name__}; define it with `class` in a cell")


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def resolve_path(path: str) -> str:
    """A ``.py`` path as given (from the working directory), else relative to the repository root.

    A notebook runs in ``chapters/``, a terminal anywhere: ``"solutions/ex4_1_naive_ddp.py"``
    must work from both. A path found nowhere is an error that says where we looked.
    """
    for candidate in (path, os.path.join(REPO_ROOT, path)):
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"no file {path!r} (looked in the working directory and in the course's root)")


def to_source(obj: Callable | str) -> str:
    """Source text of a function or class (also one defined in a notebook cell), a file path,
    an exercise id (``"4.1"``: its solution file), or source text."""
    if isinstance(obj, type):
        return class_source(obj)
    if callable(obj):
        try:
            return textwrap.dedent(inspect.getsource(obj))
        except (OSError, TypeError) as e:
            raise TypeError(f"cannot read the source of {obj!r} ({e}); define it with `def` in a cell") from e
    if isinstance(obj, str) and obj.strip().endswith(".py") and "\n" not in obj:
        with open(resolve_path(obj.strip())) as f:
            return f.read()
    if isinstance(obj, str) and re.fullmatch(r"\d+\.\d+", obj.strip()):
        from disttutor.checks.registry import exercise  # "4.1" -> that exercise's solution file
        return to_source(exercise(obj.strip()).solution)
    if isinstance(obj, str) and ("def " in obj or "class " in obj):
        return obj
    raise TypeError(f"expected a function, a class, a .py path, an exercise id like '4.1' or source text, "
                    f"got {type(obj).__name__}")


def write_exercise(obj: Callable | str, directory: str | None = None) -> str:
    """Write learner code to ``directory/exercise.py`` and return the path."""
    directory = directory or tempfile.mkdtemp(prefix="disttutor-ex-")
    path = os.path.join(directory, "exercise.py")
    src = to_source(obj)
    # `from __future__` must stay the first statement of the file: keep it above the header.
    future = [ln for ln in src.splitlines() if ln.startswith("from __future__ import")]
    body = "\n".join(ln for ln in src.splitlines() if not ln.startswith("from __future__ import"))
    with open(path, "w") as f:
        f.write("".join(ln + "\n" for ln in future) + HEADER + body + "\n")
    return path


def load_exercise(path: str, name: str, exercise: str | None = None) -> Callable:
    """Rank side: import ``path`` as a fresh module and return ``name`` from it.

    Under the guard of ``exercise`` (else ``$DISTTUTOR_EXERCISE``, which :func:`run_check` gives
    the ranks): the code of ``path`` may not call that exercise's references
    (:mod:`disttutor.checks.guard`).
    """
    from disttutor.checks import guard

    spec = importlib.util.spec_from_file_location(f"disttutor_exercise_{os.getpid()}", path)
    mod = importlib.util.module_from_spec(spec)
    mod.__builtins__ = guard.install(path, exercise or os.environ.get(guard.ENV_EXERCISE))
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    try:
        fn = getattr(mod, name)
    except AttributeError:
        raise AttributeError(f"the exercise code defines no function named {name!r}") from None
    return _explain_name_errors(fn, name) if callable(fn) and not isinstance(fn, type) else fn


def _explain_name_errors(fn: Callable, name: str) -> Callable:
    """Only the exercise's own cell travels to the ranks: a helper from another cell is a NameError there."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except NameError as e:
            raise NameError(f"{e} -- only the code of `{name}` is sent to the ranks, not the rest of the "
                            f"notebook: define helpers (and imports) inside `{name}` itself") from None
    return wrapper


def function_name(obj: Callable | str, default: str) -> str:
    return getattr(obj, "__name__", default) if callable(obj) else default


@dataclass(frozen=True)
class LearnerCode:
    """The options every checker program starts with: the file :func:`run_check` wrote the learner's
    code to, and the name to load from it. A checker's config adds its own fields to these."""
    source: str = opt("", "file with the learner's code (run_check writes it)")
    name: str = opt("", "the function or class to check")

    def __post_init__(self):
        if not self.source:
            raise ValueError("--source FILE is required")
        names = self.name if isinstance(self.name, tuple) else (self.name,)
        if not names or not all(isinstance(n, str) and n.isidentifier() for n in names):
            raise ValueError(f"--name must be a Python name, got {self.name!r}")


@dataclass
class CheckResult:
    """What a checker found, rank by rank, in words."""

    exercise: str
    passed: bool
    problems: list[str] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)

    def __str__(self) -> str:
        if self.passed:
            return f"Exercise {self.exercise}: passed ✓"
        return f"Exercise {self.exercise}: not passed yet ✗\n" + "\n".join(f"  - {p}" for p in self.problems)

    def _repr_pretty_(self, p, cycle) -> None:  # IPython shows the words, not a dataclass dump
        p.text(str(self))

    def raise_if_failed(self) -> "CheckResult":
        if not self.passed:
            raise AssertionError(str(self))
        return self


def run_check(exercise: str, checker: str, obj: Callable | str, name: str | tuple[str, ...], nproc: int = 2,
              args: dict[str, Any] | None = None, timeout: float = JOB_TIMEOUT_S, hint: str | None = None,
              **launch_kw: Any) -> CheckResult:
    """Launch ``checker`` (a program module) on ``nproc`` ranks against the learner's code.

    A stub (``raise NotImplementedError("Exercise ...")``), a crash, a hang or a
    wrong answer all come back as a failed :class:`CheckResult` with a message,
    never as a frozen cell or a deep traceback.
    """
    from disttutor.launcher.launch import launch

    from disttutor.checks import guard

    src = to_source(obj)
    stub = stub_problem(src) or guard.static_problem(src, exercise)
    if stub:  # an untouched stub (or a call of the answer) needs no ranks to say so
        return CheckResult(exercise, False, [stub])
    path = write_exercise(obj)
    refusals = os.environ.get(guard.ENV_VIOLATIONS) or os.path.join(os.path.dirname(path), "refused.txt")
    launch_kw["env"] = {guard.ENV_EXERCISE: exercise, guard.ENV_VIOLATIONS: refusals, **launch_kw.get("env", {})}
    # The ranks' own lines are not streamed (a checker's log is not for learners), so say that
    # something is running: a checker job takes a few seconds, more on a busy machine.
    print(f"checking Exercise {exercise} on {nproc * launch_kw.get('nnodes', 1)} ranks ...", end="", flush=True)
    res = launch(checker, nproc, {"source": path, "name": name, **(args or {})}, timeout=timeout,
                 check=False, stream=False, **launch_kw)
    print(" done", flush=True)  # no time here: checker cells are compared by nbval
    problems: list[str] = []
    for r in res.ranks:
        rep = r.results
        if r.status == "ok" and rep.get("passed"):
            continue
        if r.status == "ok":
            problems.append(f"rank {r.rank}: {rep.get('problem', 'wrong result')}")
        elif r.error and "NotImplementedError" in r.error:
            problems.append(f"rank {r.rank}: still a stub -- {r.error.split('NotImplementedError:')[-1].strip()}")
        else:
            problems.append(f"rank {r.rank}: {r.status} -- {r.error}")
    # When some rank really failed, the others' "stopped" / "another rank died" are only echoes of it.
    echoes = [p for p in problems if " stopped -- " in p or "another rank died" in p]
    if echoes and len(echoes) < len(problems):
        problems = [p for p in problems if p not in echoes]
    if res.outcome == "timeout":
        problems.insert(0, f"the check did not finish within {timeout:g}s (is the machine very busy?): " + (hint or (
            "a rank is probably waiting for a message that is never sent "
            "(check that every send has a matching recv)")))
    # Show each distinct problem once: "ranks 0, 1: ..." (a stub or a crash often fails identically
    # on every rank); a stub needs no rank at all.
    by_text: dict[str, list[str]] = {}
    for p in problems:
        who, sep, text = p.partition(": ")
        if not (sep and who.startswith("rank ")):
            who, text = "", p
        by_text.setdefault(text, []).append(who[5:] if who else "")
    merged = []
    for text, ranks in by_text.items():
        ranks = [r for r in ranks if r]
        if not ranks or text.startswith("still a stub"):
            merged.append(text)
        else:
            merged.append(f"{'ranks' if len(ranks) > 1 else 'rank'} {', '.join(ranks)}: {text}")
    refused = guard.read_refusals(refusals)
    if refused:  # what the guard refused comes first, also when the code caught the exception
        merged = [refused[0], *(p for p in merged if refused[0] not in p)]
    return CheckResult(exercise, res.ok and not problems and not refused, merged, [r.results for r in res.ranks])


def stub_problem(src: str) -> str | None:
    """``"still a stub -- Exercise N.M: ..."`` if a function in ``src`` only raises the exercise's
    NotImplementedError (after an optional docstring), else None."""
    import ast

    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None  # the run reports it, with its line
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body[1:] if (node.body and isinstance(node.body[0], ast.Expr)
                                 and isinstance(node.body[0].value, ast.Constant)) else node.body
        if len(body) == 1 and isinstance(body[0], ast.Raise) and isinstance(body[0].exc, ast.Call):
            call = body[0].exc
            if (getattr(call.func, "id", None) == "NotImplementedError" and call.args
                    and isinstance(call.args[0], ast.Constant) and str(call.args[0].value).startswith("Exercise")):
                return f"still a stub -- {call.args[0].value}"
    return None


def load_learner(obj: Callable | str, name: str, exercise: str | None = None) -> Callable:
    """The learner's function, loaded from its *source* as the ranks would load it.

    Used by checkers that run in this process (formulas, schedules, command lines):
    the same rules as on the ranks -- only the exercise's own code travels, under the guard.
    """
    import shutil

    path = write_exercise(obj)
    try:
        return load_exercise(path, name, exercise)
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def run_local(exercise: str, obj: Callable | str, name: str, check: Callable[[Callable], str | None]) -> CheckResult:
    """Load the learner's ``name`` and run ``check(fn)`` here; ``check`` returns a problem or None.

    A stub, a crash or a syntax error becomes a failed result with one line, never a traceback.
    """
    from disttutor.checks import guard

    seen, guarded = len(guard.refused), guard.guarded()
    try:
        src = to_source(obj)
        stub = stub_problem(src) or guard.static_problem(src, exercise)
        if stub:
            return CheckResult(exercise, False, [stub])
        fn = load_learner(obj, name, exercise)
        problem = check(fn)
        if len(guard.refused) > seen:  # refused, and the code caught it
            problem = guard.refused[seen]
    except NotImplementedError as e:
        return CheckResult(exercise, False, [f"still a stub -- {e}"])
    except SyntaxError as e:
        return CheckResult(exercise, False, [f"the code does not compile: {e.msg} (line {e.lineno})"])
    except Exception as e:  # the learner's code crashed: say where, in one line
        if len(guard.refused) > seen:
            return CheckResult(exercise, False, [guard.refused[seen]])
        return CheckResult(exercise, False, [f"the function raised {type(e).__name__}: {e}"])
    finally:
        guard.keep_only(guarded)  # the check is over: the kernel runs the learner's code as it likes
    return CheckResult(exercise, problem is None, [] if problem is None else [problem])
