"""Launcher overhead: disttutor.launch vs a bare `torchrun --standalone`, same program, same run.

    .venv/bin/python benchmarks/bench_launcher.py [--nproc 4] [--repeats 7]

Both run `disttutor.programs.hello` on N ranks with OMP_NUM_THREADS=1; runs are
interleaved (A, B, A, B, ...) so machine load drifts affect both alike. The
launcher's wall time is measured around the `launch()` call (free port,
subprocess, line streaming/routing, result collection included); torchrun's
around `subprocess.run`. Goal from the foundation issue: median ratio <= 1.15.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import disttutor


def bare_torchrun(nproc: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DISTTUTOR_RUN_DIR": tempfile.mkdtemp(prefix="bench-")}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                    "-m", "disttutor.programs.hello"], env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def via_launcher(nproc: int) -> float:
    t0 = time.perf_counter()
    res = disttutor.launch("hello", nproc, stream=False, timeout=300)
    wall = time.perf_counter() - t0
    assert res.ok
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()
    via_launcher(a.nproc), bare_torchrun(a.nproc)  # warm the page cache for both
    times: dict[str, list[float]] = {"disttutor.launch": [], "torchrun --standalone": []}
    for i in range(a.repeats):
        times["disttutor.launch"].append(via_launcher(a.nproc))
        times["torchrun --standalone"].append(bare_torchrun(a.nproc))
        print(f"  run {i + 1}/{a.repeats}: launch {times['disttutor.launch'][-1]:.2f}s, "
              f"torchrun {times['torchrun --standalone'][-1]:.2f}s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n{a.nproc}-rank hello all-reduce, {a.repeats} interleaved runs each, {os.cpu_count()} CPU cores")
    for k, v in times.items():
        print(f"  {k:<22} median {med[k]:.2f}s  (min {min(v):.2f}s, max {max(v):.2f}s)")
    ratio = med["disttutor.launch"] / med["torchrun --standalone"]
    print(f"  ratio launch / torchrun: {ratio:.3f}  (goal <= 1.15: {'met' if ratio <= 1.15 else 'NOT met'})")


if __name__ == "__main__":
    main()
