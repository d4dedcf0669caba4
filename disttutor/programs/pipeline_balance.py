"""Stage balance: the same model split unevenly, then evenly, over the pipeline's ranks (chapter 7).

A pipeline runs at the pace of its slowest stage: every micro-batch passes
through every stage, so a stage with three times the layers makes the others
wait three times as long. This program trains the same 1F1B pipeline once per
split in ``splits`` (each a string of Linears per stage, ``"6,2"``) with
:func:`disttutor.programs.pipeline_zb.train_split` -- the same loop, the same
single-process check -- and reports each run's measured actions::

    disttutor run pipeline_balance -n 2 -- --splits 6,2 4,4
"""
from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt
from disttutor.programs.pipeline_zb import train_split
from disttutor.rank import runtime


def parse_split(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(c) for c in text.split(","))
    except ValueError:
        raise ValueError(f"a split is Linears per stage separated by commas, like 6,2; got {text!r}") from None
    if not counts or min(counts) < 1:
        raise ValueError(f"every stage needs at least one Linear, got {text!r}")
    return counts


@dataclass(frozen=True)
class BalanceConfig:
    splits: tuple[str, ...] = opt(("6,2", "4,4"), "Linears per stage, one split per run (same total)")
    microbatches: int = opt(8, "m: micro-batches per mini-batch")
    width: int = opt(256, "hidden width")
    mb_size: int = opt(32, "rows per micro-batch")
    steps: int = opt(2, "optimizer steps per split; the last one is timed")
    lr: float = opt(0.05, "SGD learning rate")
    seed: int = opt(0, "seed of the data and the weights")

    def __post_init__(self):
        require_positive(self, "microbatches", "width", "mb_size", "steps", flag_style=True)
        counts = [parse_split(s) for s in self.splits]
        if not counts or len({sum(c) for c in counts}) != 1 or len({len(c) for c in counts}) != 1:
            raise ValueError(f"--splits must cut the same model into the same number of stages, got {self.splits}")


def run(cfg: BalanceConfig) -> None:
    with runtime.setup() as ctx:
        runs = []
        for text in cfg.splits:
            counts = parse_split(text)
            if len(counts) != ctx.world_size:
                raise ValueError(f"split {text!r} has {len(counts)} stages for {ctx.world_size} ranks (1F1B: one each)")
            runs.append(train_split(ctx, "1f1b", counts, cfg.microbatches, cfg.width, cfg.mb_size, cfg.steps,
                                    cfg.lr, cfg.seed))
            dist.barrier()
        runtime.report(runs=runs)


main = cli(BalanceConfig, run)

if __name__ == "__main__":
    main()
