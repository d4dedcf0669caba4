"""The contract between the launcher (in the kernel) and the ranks (under torchrun).

Introduced in chapter 0. Both sides import these names; neither spells the
strings itself. This module imports nothing heavy (no torch), so the launcher
stays cheap to import.

    launcher  --env-->  ranks        ENV_RUN_DIR, ENV_BACKEND, ENV_COLLECTIVE_TIMEOUT, ENV_AGENT
    launcher  --env-->  agent        ENV_LAUNCHER_PID;  agent --env--> ranks  ENV_AGENT_PID
    teacher   --env-->  launcher     ENV_DEFAULT_BACKEND, ENV_GPUS, ENV_RANK_ENV
    ranks  --files-->   launcher     report_path(run_dir, rank) -> run_dir/rank{r}.json
    ranks  --stdout-->  launcher     PROGRESS_TAG + json   (rank 0's progress bar)
    both                             errors.blame_of(error text): "wait" | "peer" | "self"

The package ``disttutor.contract`` is the layer both sides stand on: this module, the command
line derived from a program's config (:mod:`~disttutor.contract.options`, its validation helpers
:mod:`~disttutor.contract.config`) the process tree's life (:mod:`~disttutor.contract.procs`), the cores a job has
(:mod:`~disttutor.contract.machine`) and how both sides read an error's
text (:mod:`~disttutor.contract.errors`).
It imports no torch and nothing from ``disttutor.launcher`` or ``disttutor.rank``.
"""
from __future__ import annotations

import os
import re

# Environment the launcher sets for every rank.
ENV_RUN_DIR = "DISTTUTOR_RUN_DIR"                          # where ranks write their reports
ENV_BACKEND = "DISTTUTOR_BACKEND"                          # "auto" | "gloo" | "nccl"
ENV_COLLECTIVE_TIMEOUT = "DISTTUTOR_COLLECTIVE_TIMEOUT"    # seconds one collective may wait
ENV_AGENT = "DISTTUTOR_AGENT"                              # which torchrun agent (simulated node)
ENV_LAUNCHER_PID = "DISTTUTOR_LAUNCHER_PID"                # the process that launched the agent (the kernel)
ENV_AGENT_PID = "DISTTUTOR_AGENT_PID"                      # set by the agent for its ranks: their parent

# Course-wide defaults a teacher sets before JupyterLab starts (an explicit launch() argument wins).
ENV_DEFAULT_BACKEND = "DISTTUTOR_DEFAULT_BACKEND"          # "auto" | "gloo" | "nccl"
ENV_GPUS = "DISTTUTOR_GPUS"                                # "0,1" -> CUDA_VISIBLE_DEVICES of every job
ENV_CORES = "DISTTUTOR_CORES"                              # how many cores runs are sized for (default: affinity)
ENV_RANK_ENV = "DISTTUTOR_RANK_ENV"                        # "K=V K2=V2" added to every rank's environment

# Collectives that wait longer than this fail instead of hanging. Gloo's default is 30 minutes,
# far too long for a learner staring at a cell. The ranks apply it; the launcher and user scripts
# read it for their own messages.
DEFAULT_COLLECTIVE_TIMEOUT_S = 60.0

# One line on a rank's stdout that the launcher turns into a progress bar.
PROGRESS_TAG = "@@disttutor-progress "

_REPORT = re.compile(r"rank(\d+)\.json")


def report_path(run_dir: str, rank: int) -> str:
    """Where rank ``rank`` writes its report (atomically, rewritten on each report)."""
    return os.path.join(run_dir, f"rank{int(rank)}.json")


def report_rank(filename: str) -> int | None:
    """``"rank3.json"`` -> 3; any other file name -> None."""
    m = _REPORT.fullmatch(os.path.basename(filename))
    return int(m.group(1)) if m else None
