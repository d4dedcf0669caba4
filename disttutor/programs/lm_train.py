"""Train chapter 10's language model with DDP, checkpoints and elastic restarts (article §10, §11.3).

The loop is :func:`disttutor.lm.loop.train`; this program runs it on every rank and reports
the loss curves, validation losses, throughput and generated text. Rank 0 also writes the final
parameters to ``final_params.pt`` in the run directory (read back with ``weights_only=True``), so
a notebook can compare two runs parameter by parameter::

    disttutor run lm_train -n 2 -- --steps 60
    disttutor run lm_train -n 2 -- --steps 24 --ckpt-dir /tmp/ck --ckpt-every 4 --fail-at-step 10
        # needs torchrun --max-restarts=1 (launch(..., max_restarts=1)) to come back
    disttutor run lm_train -n 2 -- --steps 40 --step-source my_step.py
        # every optimiser step runs my_step.py's train_step (Exercise 10.2) in the same loop
"""
from __future__ import annotations

import os

# torch.profiler's library (kineto) prints "profiler_start/stop" lines on every rank; 6 = above its
# highest level: silent. Read when torch loads, so set before the import (the caller's value wins).
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

import torch  # noqa: E402

from disttutor.rank import runtime  # noqa: E402
from disttutor.lm.loop import LMConfig, train  # noqa: E402
from disttutor.contract.options import cli  # noqa: E402

FINAL_PARAMS = "final_params.pt"


def run(cfg: LMConfig) -> None:
    with runtime.setup() as ctx:
        if cfg.fail_rank >= ctx.world_size and cfg.fail_at_step >= 0:
            raise ValueError(f"fail_rank {cfg.fail_rank} does not exist in a job of {ctx.world_size} ranks")
        step_fn = None
        if cfg.step_source:  # Exercise 10.2: the learner's step, in the course's loop
            from disttutor.checks.adapter import load_exercise
            step_fn = load_exercise(cfg.step_source, "train_step")
        out = train(cfg, ctx, step_fn=step_fn)
        params = out.pop("params")
        if ctx.rank == 0 and runtime.run_dir():
            path = os.path.join(runtime.run_dir(), FINAL_PARAMS)
            torch.save(params, path + ".tmp")
            os.replace(path + ".tmp", path)  # the notebook never reads half a file
        runtime.report(**out)


main = cli(LMConfig, run)


if __name__ == "__main__":
    main()
