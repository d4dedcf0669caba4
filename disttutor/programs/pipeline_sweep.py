"""Several pipeline runs in one launch: schedules x micro-batch counts (chapter 7's overhead model).

Starting 4 ranks costs seconds (imports, rendezvous) while one pipeline step
of chapter 7's stages costs milliseconds, so the chapter's sweep runs every
configuration inside one launch: for each schedule and each ``m`` it trains
:mod:`disttutor.programs.pipeline`'s model for ``steps`` steps (same code,
:func:`disttutor.programs.pipeline.train`) with a micro-batch of fixed size
and reports the last step's timeline, with CPU times::

    disttutor run pipeline_sweep -n 4 -- --schedules gpipe 1f1b --microbatches 4 8 16
"""
from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.workloads.data import regression
from disttutor.contract.options import cli, opt
from disttutor.programs.pipeline import D_IN, D_OUT, PipeConfig, train


@dataclass(frozen=True)
class SweepConfig:
    schedules: tuple[str, ...] = opt(("gpipe", "1f1b"), "schedules to run (gpipe, 1f1b)")
    microbatches: tuple[int, ...] = opt((4, 8, 16), "micro-batch counts m")
    mb_size: int = opt(32, "rows per micro-batch (fixed: a slot costs the same whatever m is)")
    width: int = opt(384, "hidden width")
    layers_per_stage: int = opt(4, "Linear layers per stage")
    steps: int = opt(2, "steps per configuration; the last is measured (the first infers shapes)")

    def __post_init__(self):
        require_positive(self, "mb_size", "width", "layers_per_stage", "steps")
        bad = [s for s in self.schedules if s not in ("gpipe", "1f1b")]
        if bad or not self.schedules:
            raise ValueError(f"schedules must be gpipe and/or 1f1b (one stage per rank), got {self.schedules!r}")
        if not self.microbatches or any(m < 1 for m in self.microbatches):
            raise ValueError(f"microbatches must be positive integers, got {self.microbatches!r}")


def run(cfg: SweepConfig) -> None:
    with runtime.setup() as ctx:
        runs = []
        for schedule in cfg.schedules:
            for m in cfg.microbatches:
                pc = PipeConfig(schedule=schedule, microbatches=m, batch=m * cfg.mb_size, width=cfg.width,
                                layers_per_stage=cfg.layers_per_stage, steps=cfg.steps, reference=False)
                x, y = regression(n=pc.batch, d_in=D_IN, d_out=D_OUT, seed=pc.seed).tensors
                out = train(pc, ctx, x, y, pp_rank=ctx.rank, pp_size=ctx.world_size)
                runs.append(dict(schedule=schedule, m=m, events=out["events"], slot_cpu=out["slot_cpu"],
                                 step_cpu_s=out["step_cpu_s"], step_s=out["step_s"]))
                dist.barrier()  # the next configuration's stages start only when every rank is done
        runtime.report(runs=runs)


main = cli(SweepConfig, run)

if __name__ == "__main__":
    main()
