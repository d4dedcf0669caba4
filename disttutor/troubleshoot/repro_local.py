"""Failure modes that need no torchrun, reproduced in ONE plain subprocess (chapter 9).

The notebook runs ``python -m disttutor.troubleshoot.repro_local --modes ...`` (never in the
kernel: a failed ``init_process_group`` or an ``mp.spawn`` must not touch the
kernel's own state). Each mode is ``mode(fixed) -> str`` like those of
:mod:`disttutor.troubleshoot.repro_group`; the program prints one JSON line per mode,
``{"mode", "symptom", "fixed", "symptom_s", "wall_s"}``. ``mp.spawn`` modes run a
tiny script in a child process with a timeout: a spawn that goes wrong ends
in seconds.
"""
from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Callable

from disttutor.contract.options import cli, opt
from disttutor.contract.errors import is_exception_line, readable_error

MODES: dict[str, Callable[[bool], str]] = {}
SPAWN_TIMEOUT_S = 60.0  # one child python importing torch: seconds idle, tens on a loaded machine
TAG = "@@repro "


def mode(fn):
    MODES[fn.__name__] = fn
    return fn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(backend: str = "gloo", port: int | None = None, env: bool = False) -> str:
    import torch.distributed as dist

    if env:
        dist.init_process_group(backend, timeout=_dt.timedelta(seconds=5))
    else:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port or _free_port()}", rank=0,
                                world_size=1, timeout=_dt.timedelta(seconds=5))
    dist.destroy_process_group()
    return f"init_process_group({backend!r}) ok"


@mode
def missing_env(fixed):
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        os.environ.pop(k, None)  # what `python train.py` (no torchrun) gives a script that expects them
    if fixed:  # what torchrun sets for every rank (here: a job of one)
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    try:
        return _init(env=True) + (" with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set" if fixed else "")
    finally:
        for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            os.environ.pop(k, None)


@mode
def port_in_use(fixed):
    with socket.socket() as busy:  # another job (or a leftover rank) already listens here
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = None if fixed else busy.getsockname()[1]
        return _init(port=port) + (" on a port the OS chose" if fixed else "")


@mode
def backend_not_built(fixed):
    import torch.distributed as dist

    if fixed:
        return _init("gloo")
    said = []
    # A GPU build has NCCL (then only MPI fails); MPI comes only with a from-source build.
    for backend in ([] if dist.is_nccl_available() else ["nccl"]) + ["mpi"]:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "world_size and rank are ignored" for MPI: noise here
                said.append(_init(backend))
        except RuntimeError as e:
            said.append(str(e).split(". ")[0])
    raise RuntimeError(" | ".join(said))


def _orders(set_epoch: bool) -> list[list[int]]:
    from torch.utils.data import DistributedSampler

    s = DistributedSampler(list(range(8)), num_replicas=2, rank=0, shuffle=True, seed=0)
    out = []
    for epoch in range(3):
        if set_epoch:
            s.set_epoch(epoch)  # the shuffle's seed is seed + epoch: no call, same order every epoch
        out.append(list(s))
    return out


@mode
def set_epoch(fixed):
    orders = _orders(fixed)
    same = all(o == orders[0] for o in orders)
    return f"rank 0's samples in epochs 0, 1, 2: {orders} -> " + ("the same order every epoch" if same else
                                                                   "a new order each epoch")


@mode
def sampler_padding(fixed):
    from torch.utils.data import DistributedSampler

    n, world = 10, 4
    seen = [i for r in range(world) for i in DistributedSampler(list(range(n)), world, r, shuffle=False)]
    if fixed:  # evaluate each sample once: count only the first len(dataset) indices of the padded list
        return f"{n} samples, {world} ranks: {len(set(seen))} distinct samples counted once (padding dropped)"
    dup = sorted(i for i in set(seen) if seen.count(i) > 1)
    return f"{n} samples on {world} ranks: {len(seen)} evaluated, samples {dup} counted twice"


_WORKER = "def work(i):\n    print(f'child {i} ran', flush=True)\n"
_SPAWN = "import torch.multiprocessing as mp\n"


class ChildError(Exception):
    """The error a child python printed (its text already starts with its exception type)."""


def _run_script(code: str, as_file: bool) -> str:
    """Run ``code`` in a fresh python: a file, or ``-c`` (like a notebook, ``__main__`` has no file)."""
    with tempfile.TemporaryDirectory(prefix="disttutor-spawn-") as d:
        path = os.path.join(d, "train.py")
        with open(path, "w") as f:
            f.write(code)
        cmd = [sys.executable, path] if as_file else [sys.executable, "-c", code]
        # Own session: on timeout the whole tree (mp.spawn's children too) is killed, nothing is left.
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=d,
                             start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        try:
            out, _ = p.communicate(timeout=SPAWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise TimeoutError(f"the spawned script did not finish in {SPAWN_TIMEOUT_S:g}s") from None
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if p.returncode == 0:
        return "; ".join(lines[-2:]) or "exit code 0"
    # The child's exception is the cause; the parent's "ProcessExitedException" only reports it.
    found = [i for i, ln in enumerate(lines) if is_exception_line(ln) or _BARE.fullmatch(ln.strip())]
    for i in sorted(found, key=lambda i: "torch.multiprocessing.spawn" in lines[i])[:1]:
        text = lines[i].strip()
        if text.endswith(":"):  # "RuntimeError:" with its message on the next two lines
            text += " " + " ".join(ln.strip() for ln in lines[i + 1:i + 3])
        raise ChildError(text)
    raise ChildError(lines[-1] if lines else f"exit code {p.returncode}")


_BARE = re.compile(r"[\w.]+(?:Error|Exception):")  # "RuntimeError:" with the message on the next lines
_GUARDED = _SPAWN + _WORKER + 'if __name__ == "__main__":\n    mp.spawn(work, nprocs=1)\n'


@functools.lru_cache(maxsize=1)
def _guarded_file() -> str:
    """The fix of both spawn modes: a .py file with a __main__ guard (run once, it costs seconds)."""
    return _run_script(_GUARDED, as_file=True)


@mode
def spawn_without_main_guard(fixed):
    # Without the guard, the spawned child re-runs the file top to bottom -- including mp.spawn.
    return _guarded_file() if fixed else _run_script(_SPAWN + _WORKER + "mp.spawn(work, nprocs=1)\n", True)


@mode
def spawn_from_notebook(fixed):
    # A notebook's functions live in an unnamed __main__ that a spawned child cannot import;
    # the fix is a real module (a .py file), which is what the course's programs are.
    return _guarded_file() if fixed else _run_script(_GUARDED, as_file=False)


@dataclass(frozen=True)
class LocalConfig:
    modes: tuple[str, ...] = opt(tuple(MODES), "failure modes to reproduce, in this order")

    def __post_init__(self):
        unknown = [m for m in self.modes if m not in MODES]
        if unknown:
            raise ValueError(f"unknown mode(s) {unknown}; modes are {', '.join(MODES)}")


def _attempt(name: str, fixed: bool) -> str:
    try:
        return MODES[name](fixed)
    except ChildError as exc:
        return readable_error(str(exc), width=400) or ""
    except Exception as exc:  # the failure is the symptom: one readable line
        return readable_error(" ".join(f"{type(exc).__name__}: {exc}".split()), width=400) or ""


def run(cfg: LocalConfig) -> None:
    import torch.distributed  # noqa: F401  -- imported before the clock starts: its import is not a mode's cost
    for name in cfg.modes:
        t0 = time.perf_counter()
        rec = {"mode": name, "symptom": _attempt(name, False)}
        rec["symptom_s"] = round(time.perf_counter() - t0, 2)
        rec["fixed"] = _attempt(name, True)
        rec["wall_s"] = round(time.perf_counter() - t0, 2)
        print(TAG + json.dumps(rec), flush=True)


main = cli(LocalConfig, run)

if __name__ == "__main__":
    main()
