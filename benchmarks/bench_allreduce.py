"""How fast is the from-scratch ring, and how close is gloo to what this machine can do? (chapter 2)

Measured in ONE run, so both ratios share the same machine state:

1. this host's memory-copy bandwidth (one thread, like one rank: ``OMP_NUM_THREADS=1``),
   ``bytes / time`` of ``dst.copy_(src)`` -- on one host every byte an
   all-reduce moves between ranks is at least one such copy, so this is the
   physical ceiling for bus bandwidth;
2. ``dist.all_reduce`` (gloo) and :func:`disttutor.scratch.allreduce.ring_all_reduce`,
   interleaved call by call, at 16 MB on 4 ranks (see
   :mod:`disttutor.programs.allreduce_bench` for how each call is timed).

Prints ring busbw / gloo busbw (goal >= 0.5) and gloo busbw / memcpy bandwidth::

    .venv/bin/python benchmarks/bench_allreduce.py                # 16 MB, 4 ranks, 10 calls
    .venv/bin/python benchmarks/bench_allreduce.py --nproc 2 --mb 4 --iters 20 --algos builtin naive tree ring

Timings on a shared machine are noisy: run it twice and compare.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def memcpy_bandwidth(nbytes: int, repeats: int = 15) -> float:
    """Median ``nbytes / t`` of ``dst.copy_(src)`` on one thread, in bytes/s."""
    import torch

    torch.set_num_threads(1)
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch the pages first: page faults are not bandwidth
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    return nbytes / statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--mb", type=float, default=16.0, help="message size per rank in MiB")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--algos", nargs="+", default=["builtin", "ring"])
    a = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from disttutor.viz.allreduce import sweep

    nbytes = int(a.mb * (1 << 20)) // 4 * 4
    if "builtin" not in a.algos:
        a.algos.insert(0, "builtin")
    copy_bw = memcpy_bandwidth(nbytes)
    rows = sweep(tuple(a.algos), (a.nproc,), [nbytes], iters=a.iters, warmup=a.warmup, stream=False)
    copy_bw_after = memcpy_bandwidth(nbytes)  # measured again: did the load change meanwhile?
    by = {r["algo"]: r for r in rows}
    print(f"all-reduce of {nbytes / (1 << 20):g} MiB float32 on {a.nproc} ranks (gloo, CPU), "
          f"median of {a.iters} calls after {a.warmup} warm-up; {os.cpu_count()} CPU cores")
    print(f"{'algorithm':>10}  {'time (ms)':>10}  {'algbw (GB/s)':>12}  {'busbw (GB/s)':>12}  {'busbw / gloo':>12}")
    for algo, r in by.items():
        print(f"{algo:>10}  {r['time_s'] * 1e3:10.2f}  {r['algbw'] / 1e9:12.3f}  {r['busbw'] / 1e9:12.3f}  "
              f"{r['busbw'] / by['builtin']['busbw']:12.2f}")
    print(f"memory-copy bandwidth, 1 thread: {copy_bw / 1e9:.2f} GB/s before, {copy_bw_after / 1e9:.2f} GB/s after")
    if "ring" in by:
        ratio = by["ring"]["busbw"] / by["builtin"]["busbw"]
        print(f"RESULT ring busbw / gloo busbw = {ratio:.2f}  (goal >= 0.5: {'met' if ratio >= 0.5 else 'NOT met'})")
    print(f"RESULT gloo busbw / memcpy bandwidth = {by['builtin']['busbw'] / max(copy_bw, copy_bw_after):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
