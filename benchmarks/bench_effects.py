"""Do the course's techniques show their effect on this machine? DDP weak scaling and the pipeline bubble (issue 23).

Each experiment is sized from the machine as its chapter sizes it, then measured:

* **DDP weak scaling** (chapter 4): ranks <= usable cores; the per-step overhead on N ranks is
  measured (a step at 8 samples a rank) with the compute per sample (one thread), the per-rank
  batch is chosen so compute is ~12x the overhead (:mod:`disttutor.data_parallel.scaling`), and
  torch DDP's samples/s on N ranks over 1 rank is ``ddp_speedup`` (target >= 0.85 N: 1.7x on 2);
* **pipeline bubble** (chapter 7): 2 stages (4 with 4+ cores), GPipe and 1F1B at m = 2, 4, 8, the
  micro-batch sized so a forward slot is ~10x the measured gap between slots
  (:mod:`disttutor.pipeline.slot_size`); ``bubble_fall[schedule]`` is the measured bubble's fall
  from m = p to m = 4p (2 to 8 on 2 stages) over the formula's (target >= 0.5);
* **emulated link** (chapter 8): when ``benchmarks/effects_link.py`` exists, its
  ``measure_link()`` keys (``emulated_alpha_err``, ``emulated_beta_err``, ``overlap_hidden``,
  ``overlap_vs_max``, ``overlap_off_vs_sum``, ``compression_speedup``) are merged in; its own load readings become ``link_*`` keys.

The load average is read before and after each part (``load``): timings on a shared machine are
noisy, and a figure is only worth what the load beside it says.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_effects.py --json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load() -> float:
    return round(os.getloadavg()[0], 2)


def ddp(cores: int, rounds: int) -> dict:
    import disttutor
    from disttutor.data_parallel import scaling

    n = scaling.ranks_for_speed(cores)[-1]
    model = {"d_in": scaling.MODEL["d_in"], "hidden": list(scaling.MODEL["hidden"]), "d_out": scaling.MODEL["d_out"]}
    base = {"time": True, "wrappers": ["torch"], "bucket_cap": 2**20, "warmup": 1, **model}
    probe = disttutor.launch("ddp_scratch", nproc=n, stream=False,
                             args={**base, "steps": 4, "rounds": 1, "batch": 8 * n, "samples": 8 * n})
    per_sample = scaling.compute_ms_per_sample(scaling.MODEL)
    overhead = max(probe.results[0]["step_ms"]["torch"] - 8 * per_sample, 0.0)
    batch = scaling.choose_batch(overhead, per_sample)
    step = {}
    for k in (1, n):
        res = disttutor.launch("ddp_scratch", nproc=k, stream=False,
                               args={**base, "steps": 4, "rounds": rounds, "batch": batch * k, "samples": batch * k})
        step[k] = res.results[0]["step_ms"]["torch"]
    return {"ddp_speedup": round(scaling.speedup(step, n), 3), "ranks": n, "ddp_per_rank_batch": batch,
            "ddp_overhead_ms": round(overhead, 1), "ddp_compute_ms": round(batch * per_sample, 1),
            "ddp_step_ms": {str(k): round(v, 1) for k, v in step.items()}}


def bubble(cores: int) -> dict:
    import disttutor
    from disttutor.pipeline.bubble_model import explain_run
    from disttutor.pipeline.schedules import PipeSpec, slots_from_events
    from disttutor.pipeline.slot_size import choose_mb_size, fall_ratio, forward_ms_per_row, mean_gap_ms, sweep_plan

    p, ms = sweep_plan(cores)  # one stage a core; m = p, 2p, 4p (1F1B needs m >= p)
    stage = {"width": 1024, "layers_per_stage": 4}
    # The gap between slots, measured on a cheap run (32-row micro-batches, GPipe, m = 4).
    probe = disttutor.launch("pipeline_sweep", nproc=p, timeout=400, stream=False,
                             args={"schedules": ("gpipe",), "microbatches": (4,), "mb_size": 32, **stage})
    gap = mean_gap_ms(PipeSpec("gpipe", p, 4), slots_from_events([r["runs"][0]["events"] for r in probe.results]))
    per_row = forward_ms_per_row(stage["width"], stage["layers_per_stage"])
    mb = choose_mb_size(gap, per_row)
    swept = disttutor.launch("pipeline_sweep", nproc=p, timeout=400, stream=False,
                             args={"schedules": ("gpipe", "1f1b"), "microbatches": ms, "mb_size": mb, **stage})
    runs = [explain_run([r["runs"][i] for r in swept.results], PipeSpec(run["schedule"], p, run["m"]))
            for i, run in enumerate(swept.results[0]["runs"])]
    falls, table = {}, {}
    for sched in ("gpipe", "1f1b"):
        rs = {r["m"]: r for r in runs if r["schedule"] == sched}
        falls[sched] = round(fall_ratio({m: r["measured"] for m, r in rs.items()},
                                        {m: r["theory"] for m, r in rs.items()}, ms[0], ms[-1]), 3)
        table[sched] = {str(m): {"measured": round(r["measured"], 3), "formula": round(r["theory"], 3)}
                        for m, r in rs.items()}
    return {"bubble_fall": falls, "bubble_stages": p, "bubble_mb_size": mb, "bubble_gap_ms": round(gap, 2),
            "bubble_forward_ms": round(mb * per_row, 1), "bubble": table}


def link() -> dict:
    """A1's ``benchmarks/effects_link.py:measure_link()``, when it exists (imported by path, not copied)."""
    path = os.path.join(ROOT, "benchmarks", "effects_link.py")
    if not os.path.exists(path):
        return {}
    spec = importlib.util.spec_from_file_location("effects_link", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.measure_link()
    # Our own cores/load keys win; the link's readings keep theirs under a link_ prefix.
    return {(k if k.startswith(("emulated_", "overlap_", "compression_", "link_")) else f"link_{k}"): v
            for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="end with one JSON object on the last line")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per DDP world size")
    ap.add_argument("--skip", nargs="*", default=[], choices=["ddp", "bubble", "link"])
    a = ap.parse_args(argv)
    sys.path.insert(0, ROOT)
    import disttutor

    cores = disttutor.cores()
    out: dict = {"cores": cores, "load": {"start": load()}}
    print(f"{cores} usable cores, load average {out['load']['start']:.1f}", flush=True)
    if "ddp" not in a.skip:
        out.update(ddp(cores, a.rounds))
        out["load"]["after_ddp"] = load()
        print(f"DDP weak scaling: {out['ranks']} ranks / 1 rank = {out['ddp_speedup']:.2f}x samples/s "
              f"(target {0.85 * out['ranks']:.2f}x; {out['ddp_per_rank_batch']} samples a rank, compute "
              f"{out['ddp_compute_ms']:.0f} ms vs overhead {out['ddp_overhead_ms']:.0f} ms a step; "
              f"load {out['load']['after_ddp']:.1f})", flush=True)
    if "bubble" not in a.skip:
        out.update(bubble(cores))
        out["load"]["after_bubble"] = load()
        print(f"pipeline bubble on {out['bubble_stages']} stages, micro-batch {out['bubble_mb_size']} rows "
              f"(forward ~{out['bubble_forward_ms']:.0f} ms vs gap {out['bubble_gap_ms']:.1f} ms): measured fall / "
              f"formula fall, m=2->8: " + ", ".join(f"{k} {v:.2f}" for k, v in out["bubble_fall"].items())
              + f" (target >= 0.5; load {out['load']['after_bubble']:.1f})", flush=True)
    if "link" not in a.skip:
        got = link()
        if got:
            out.update(got)
            out["load"]["after_link"] = load()
            print("emulated link: " + ", ".join(f"{k} {got[k]}" for k in ("emulated_alpha_err", "emulated_beta_err",
                                                                          "overlap_hidden", "overlap_vs_max",
                                                                          "overlap_off_vs_sum", "compression_speedup")
                                                 if k in got), flush=True)
        else:
            print("emulated link: benchmarks/effects_link.py not present, its keys are left out", flush=True)
    out["load"]["end"] = load()
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
