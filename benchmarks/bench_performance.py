"""Chapter 8's timed numbers, repeated: fp32 vs autocast step time, and no_sync's time per optimiser step.

Each repeat is one launch of ``amp`` (fp32 and autocast steps interleaved) and one of
``accumulation`` (k = 4, with and without ``no_sync``), both on ``--nproc`` ranks. Prints
each repeat's ratios and their median, with the load average beside them::

    .venv/bin/python benchmarks/bench_performance.py --repeats 3

On a CPU, bf16 autocast is often *slower* than fp32 for tiny models (conversions at every
layer, no bf16 matrix units); the ratio is whatever this machine measures.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=40, help="amp: optimiser steps per precision")
    a = p.parse_args(argv)
    if a.nproc < 1 or a.repeats < 1 or a.steps < 4:
        p.error("--nproc and --repeats must be >= 1, --steps >= 4")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import disttutor

    amp_ratios, sync_ratios = [], []
    for i in range(a.repeats):
        amp = disttutor.launch("amp", a.nproc, {"steps": a.steps}, stream=False, timeout=400).results[0]
        acc = disttutor.launch("accumulation", a.nproc, {"ks": (4,)}, stream=False, timeout=400).results[0]
        k4 = {r["no_sync"]: r for r in acc["rows"]}
        amp_ratios.append(amp["step_ms_amp"] / amp["step_ms_fp32"])
        sync_ratios.append(k4[True]["ms_per_step"] / k4[False]["ms_per_step"])
        print(f"repeat {i}: fp32 {amp['step_ms_fp32']:.1f} ms, {amp['autocast_dtype']} autocast "
              f"{amp['step_ms_amp']:.1f} ms (ratio {amp_ratios[-1]:.2f}); k=4 per optimiser step: "
              f"{k4[False]['ms_per_step']:.1f} ms without no_sync ({k4[False]['allreduces'][0]} all-reduces), "
              f"{k4[True]['ms_per_step']:.1f} ms with ({k4[True]['allreduces'][0]}); load {os.getloadavg()[0]:.1f}",
              flush=True)
    print(f"median autocast/fp32 step-time ratio: {statistics.median(amp_ratios):.2f}")
    print(f"median no_sync/every-step time ratio at k=4: {statistics.median(sync_ratios):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
