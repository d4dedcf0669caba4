"""Step time of from-scratch DDP (naive, bucketed+overlapped) vs torch's DDP, on 2 and 4 ranks (chapter 4).

One launch per world size runs all three wrappers on identical models and
data, in interleaved timed rounds (:func:`disttutor.programs.ddp_scratch.time_wrappers`),
so each ratio compares runs that shared the machine's state. Weak scaling:
the per-rank batch is fixed, the global batch grows with the ranks. Prints::

    ratio bucketed/torch (goal <= 1.25)   and   ratio naive/torch (expected > 1)

(step times: median over rounds; ratios: median over rounds of the within-round ratio).

    .venv/bin/python benchmarks/bench_ddp.py                    # 2 and 4 ranks
    .venv/bin/python benchmarks/bench_ddp.py --nproc 2 --rounds 5

CPU/gloo timings are not GPU/NCCL timings: on GPUs compute is far faster, so
communication (and the overlap that hides it) matters much more. On a shared
machine the numbers are noisy: run it twice and compare.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    p.add_argument("--per-rank-batch", type=int, default=32)
    p.add_argument("--hidden", type=int, nargs="+", default=[256] * 6)
    p.add_argument("--steps", type=int, default=10, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--bucket-cap", type=int, default=2**18,
                   help="elements per bucket, both torch (as bucket_cap_mb) and scratch; 2**18 fp32 = 1 MB: 2 buckets")
    a = p.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import disttutor

    print(f"{os.cpu_count()} CPU cores; model MLP(64, {a.hidden}, 16); {a.per_rank_batch} samples per rank per step")
    print(f"{'ranks':>5}  {'torch ms':>9}  {'bucketed ms':>11}  {'naive ms':>9}  {'bucketed/torch':>14}  "
          f"{'naive/torch':>11}")
    ok = True
    for n in a.nproc:
        batch = a.per_rank_batch * n
        res = disttutor.launch("ddp_scratch", n, {
            "time": True, "wrappers": ["torch", "bucketed", "naive"], "steps": a.steps, "rounds": a.rounds,
            "batch": batch, "samples": max(batch, 1024), "d_in": 64, "hidden": a.hidden, "d_out": 16,
            "bucket_cap": a.bucket_cap}, stream=False, timeout=600)
        ms = res.results[0]["step_ms"]  # every rank waited for the slowest (barrier): rank 0's view is the job's
        rounds = res.results[0]["samples_ms"]
        # Ratios per round (runs minutes apart see different machine load; runs within a round share it),
        # then the median over rounds.
        rb, rn = (statistics.median(a / b for a, b in zip(rounds[k], rounds["torch"])) for k in ("bucketed", "naive"))
        ok &= rb <= 1.25
        print(f"{n:>5}  {ms['torch']:>9.2f}  {ms['bucketed']:>11.2f}  {ms['naive']:>9.2f}  {rb:>14.2f}  {rn:>11.2f}")
    print("goal bucketed/torch <= 1.25:", "met" if ok else "NOT met (noisy machine? run again)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
