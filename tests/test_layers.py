"""The package's folders are its architecture: these tests keep the layers apart.

    contract/   both sides stand on it: torch-free, imports only itself
    launcher/   in the learner's kernel: may import contract/ only (and no torch, but for the agent)
    rank/       inside a torchrun rank: may import contract/ only
    topics      (workloads/, data_parallel/, pipeline/, sharding/, lm/, troubleshoot/, multinode/,
                scratch/): shared pieces of one topic, for either side
    programs/, checks/ (checker programs), live/worker: what a rank runs -- never anything
                that only the kernel uses (launcher/, course/, viz/, live's kernel half)

Read from the source (ast). A lazy import inside a function counts for the one-sided rooms
(contract/, launcher/, rank/, programs/); for the two-sided ones (a checker module is the kernel's
``check()`` and the rank's program in one file, on purpose) what counts is what *importing* the
module loads: a kernel-side function may import the launcher when it is called.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "disttutor")

KERNEL_ONLY = ("disttutor.launcher", "disttutor.course", "disttutor.viz", "disttutor.live.magics",
               "disttutor.live.pool", "disttutor.live.cells", "disttutor.live.report")
AGENT = "disttutor.launcher.torchrun"  # torchrun's agent process: started by the launcher, imports torch


def _modules() -> dict[str, str]:
    out = {}
    for dirpath, _, files in os.walk(PKG):
        if os.sep + "broken" in dirpath:  # chapter 9's broken programs are exercise text, not package code
            continue
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imports(path: str, top_level_only: bool = False) -> tuple[set[str], set[str]]:
    """(disttutor modules imported, other top-level packages imported) by the file at ``path``."""
    tree = ast.parse(open(path).read())
    # top level: module-level statements, also inside a module-level ``if``/``try`` block
    nodes = _top_level(tree.body) if top_level_only else ast.walk(tree)
    ours, others = set(), set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("disttutor"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    ours.add(full if full in MODULES else node.module)
            else:
                others.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                (ours if alias.name.startswith("disttutor") else others).add(
                    alias.name if alias.name.startswith("disttutor") else alias.name.split(".")[0])
    return {m for m in ours if m in MODULES}, others


def _top_level(body):
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try)):
            for block in (getattr(node, "body", []), getattr(node, "orelse", []), getattr(node, "finalbody", []),
                          *[h.body for h in getattr(node, "handlers", [])]):
                yield from _top_level(block)


GRAPH = {m: _imports(p)[0] - {m} for m, p in MODULES.items()}
LOADS = {m: _imports(p, top_level_only=True)[0] - {m} for m, p in MODULES.items()}  # what importing m imports


def _in(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_no_relative_imports():
    """Absolute imports only: a module's imports then say which room they come from."""
    rel = [f"{m}:{n.lineno}" for m, p in MODULES.items() for n in ast.walk(ast.parse(open(p).read()))
           if isinstance(n, ast.ImportFrom) and n.level]
    assert not rel, f"relative imports: {rel}"


@pytest.mark.parametrize("layer,allowed", [
    ("disttutor.contract", ("disttutor.contract",)),
    ("disttutor.launcher", ("disttutor.contract", "disttutor.launcher")),
    ("disttutor.rank", ("disttutor.contract", "disttutor.rank")),
])
def test_layer_imports_only_what_it_stands_on(layer, allowed):
    bad = sorted(f"{m} imports {d}" for m, deps in GRAPH.items() if _in(m, layer)
                 for d in deps if not _in(d, *allowed))
    assert not bad, f"{layer} may import only {allowed}: " + "; ".join(bad)


def test_contract_and_launcher_import_no_torch():
    """The kernel imports the launcher (and the contract) without paying for torch; the agent may."""
    bad = []
    for m, p in MODULES.items():
        if _in(m, "disttutor.contract", "disttutor.launcher") and m != AGENT:
            if "torch" in _imports(p, top_level_only=True)[1]:
                bad.append(m)
    assert not bad, f"these modules import torch when imported: {bad}"
    # ... and for real: importing the package and the whole launcher in a fresh interpreter.
    names = [m for m in MODULES if _in(m, "disttutor.launcher", "disttutor.contract") and m != AGENT]
    code = "import sys, importlib\n" + "".join(f"importlib.import_module({n!r})\n" for n in names) + \
        "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", "importing the launcher imported torch"


def _rank_entry_points() -> list[str]:
    """What torchrun runs: the programs, the checker programs, the live ranks' worker, user scripts."""
    entries = [m for m in MODULES if _in(m, "disttutor.programs") and not m.endswith("programs")]
    entries += [m for m, p in MODULES.items() if _in(m, "disttutor.checks") and "main = cli(" in open(p).read()]
    return entries + ["disttutor.live.worker", "disttutor.rank.user_script"]


def test_programs_never_import_kernel_code():
    """A worker program runs only in ranks: not even a lazy import of a kernel-only room."""
    bad = sorted(f"{m} imports {d}" for m, deps in GRAPH.items() if _in(m, "disttutor.programs")
                 for d in deps if _in(d, *KERNEL_ONLY))
    assert not bad, "; ".join(bad)


def test_what_a_rank_runs_never_loads_kernel_code():
    """Follow what importing each rank entry point imports, transitively: none reaches a kernel-only room."""
    bad = []
    for entry in _rank_entry_points():
        seen, todo = set(), [entry]
        while todo:
            m = todo.pop()
            if m in seen or m == "disttutor":
                continue
            seen.add(m)
            for d in LOADS[m]:
                if _in(d, *KERNEL_ONLY) and d != AGENT:
                    bad.append(f"{entry}: {m} imports {d}")
                todo.append(d)
    assert not bad, "rank code reaches kernel-only modules: " + "; ".join(sorted(set(bad)))


def test_kernel_code_never_imports_rank_code():
    """The reverse: the launcher, the course tools and the plots never import what runs inside a rank."""
    bad = sorted(f"{m} imports {d}" for m, deps in GRAPH.items()
                 if _in(m, "disttutor.launcher", "disttutor.course", "disttutor.viz") and m != AGENT
                 for d in deps if _in(d, "disttutor.rank", "disttutor.programs"))
    assert not bad, "; ".join(bad)


def test_no_import_cycles():
    """No module imports (directly or through others) a module that imports it."""
    graph = {m: {d for d in deps if d != "disttutor"} for m, deps in GRAPH.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        stack.append(m)
        for d in graph[m]:
            if state.get(d) == 1:
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not cycles, f"import cycles: {cycles}"


def test_top_level_is_only_the_package_and_its_contract():
    """New code goes into a room: the top level holds the package's front door and no module."""
    top = sorted(f for f in os.listdir(PKG) if f.endswith(".py"))
    assert top == ["__init__.py"], f"modules at disttutor/'s top level: {top}"


def test_modules_stay_small():
    """One concept per module: under 300 lines of code (comments and blank lines not counted)."""
    long = []
    for m, p in MODULES.items():
        n = sum(1 for ln in open(p) if ln.strip() and not ln.strip().startswith("#"))
        if n > 300:
            long.append(f"{m} ({n})")
    assert not long, f"modules over 300 lines of code: {long}"
