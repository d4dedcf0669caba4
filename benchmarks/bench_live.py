"""Live ranks vs launch(): latency of a trivial cell, pool start-up, and the stuck-collective cell.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/bench_live.py [--ranks 2 4] [--cells 50]

Prints measured numbers only, with the machine's load average next to them
(the course machine is shared; a loaded machine makes every number worse).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from disttutor import launch
from disttutor.live import Ranks

TRIVIAL = "t = torch.ones(1) * rank\ndist.all_reduce(t)\nt.item()"
STUCK = "t = torch.ones(2)\nif rank != 1:\n    dist.all_reduce(t)\nt"

SCRIPT = '''from disttutor.rank import runtime
import torch, torch.distributed as dist
with runtime.setup() as ctx:
    rank = ctx.rank
    exec({code!r})
'''


def load() -> str:
    return "load average %.1f %.1f %.1f" % os.getloadavg()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def bench(n: int, cells: int, script: str) -> None:
    t0 = time.perf_counter()
    res = launch(script, n, stream=False, timeout=300)
    launch_s = time.perf_counter() - t0
    with Ranks(n, timeout=60) as pool:
        assert pool.run(TRIVIAL).values[0] == f"{float(n * (n - 1) // 2)}"  # warm and checked
        times = []
        for _ in range(cells):
            a = time.perf_counter()
            r = pool.run(TRIVIAL)
            times.append(time.perf_counter() - a)
            assert r.ok
        print(f"{n} ranks: pool start-up {pool.start_s:.2f} s | one launch() of the same cell {launch_s:.2f} s "
              f"(ok={res.ok}) | live cell median {1e3 * statistics.median(times):.1f} ms, "
              f"p95 {1e3 * pct(times, 0.95):.1f} ms, max {1e3 * max(times):.1f} ms over {cells} cells | {load()}")


def stuck(n: int) -> None:
    with Ranks(n, timeout=5) as pool:
        res = pool.run(STUCK)
        print(f"stuck cell on {n} ranks (cell timeout 5 s): message after {res.message_s:.2f} s, "
              f"restart {res.restart_s:.2f} s | {load()}")
        print(res.summary())
        after = pool.run("t = torch.ones(2)\ndist.all_reduce(t)\nt.sum().item()")
        print(f"pool after: alive={pool.alive} restarts={pool.restarts} next all_reduce ok={after.ok} "
              f"values={after.values}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--cells", type=int, default=50)
    p.add_argument("--no-stuck", action="store_true")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "same_cell.py")
        with open(script, "w") as f:
            f.write(SCRIPT.format(code=TRIVIAL))
        for n in a.ranks:
            bench(n, a.cells, script)
    if not a.no_stuck:
        stuck(max(a.ranks))


if __name__ == "__main__":
    main()
