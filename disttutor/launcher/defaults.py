"""Course-wide defaults a teacher sets once, before JupyterLab starts (chapter 0).

    DISTTUTOR_DEFAULT_BACKEND=gloo   every launch() without backend= runs on gloo/CPU
    DISTTUTOR_GPUS=0,1               every job sees only these GPUs (CUDA_VISIBLE_DEVICES); "none": no GPU
    DISTTUTOR_RANK_ENV="K=V K2=V2"   these variables in every rank's environment (not the kernel's), e.g.
                                     GLOO_SOCKET_IFNAME=eth0, TORCH_DISTRIBUTED_DEBUG=DETAIL; the tests use it
                                     to give the ranks other float kernels than the kernel (ATEN_CPU_CAPABILITY)

On a shared GPU box this puts thirty students' jobs where the teacher wants
them; an explicit ``launch(..., backend=...)`` still wins. Chapter 0 shows
:func:`default_backend` so a learner can see which default is in force.
Torch-free (the launcher imports it).
"""
from __future__ import annotations

import os
import re
import shlex

from disttutor import contract

BACKENDS = ("auto", "gloo", "nccl")


def default_backend() -> tuple[str, str]:
    """The backend every launch uses unless it passes ``backend=``, and where that default comes from.

    A teacher sets ``DISTTUTOR_DEFAULT_BACKEND=gloo`` (and/or ``DISTTUTOR_GPUS=0,1``)
    before starting JupyterLab to put every student's jobs on gloo/CPU (or on given
    GPUs) course-wide; an explicit ``backend=`` still wins.
    """
    value = os.environ.get(contract.ENV_DEFAULT_BACKEND, "").strip().lower()
    if not value:
        return "auto", "built-in default (NCCL when every rank has a GPU, else gloo)"
    if value not in BACKENDS:
        raise ValueError(f"{contract.ENV_DEFAULT_BACKEND}={value!r} is not a backend: use one of "
                         f"{', '.join(BACKENDS)} (or unset it)")
    return value, f"{contract.ENV_DEFAULT_BACKEND} (set in the environment before the kernel started)"


def gpus_env() -> dict[str, str]:
    """``DISTTUTOR_GPUS=0,1`` -> ``CUDA_VISIBLE_DEVICES=0,1`` for every job (a course-wide GPU choice)."""
    gpus = os.environ.get(contract.ENV_GPUS, "").strip()
    if not gpus:
        return {}
    if gpus.lower() in ("none", "-1"):
        return {"CUDA_VISIBLE_DEVICES": ""}  # no GPU at all: "auto" picks gloo on CPU
    if not re.fullmatch(r"\d+(,\d+)*", gpus.replace(" ", "")):
        raise ValueError(f"{contract.ENV_GPUS}={gpus!r}: give GPU indices like 0,1 (or 'none')")
    return {"CUDA_VISIBLE_DEVICES": gpus.replace(" ", "")}


def rank_env() -> dict[str, str]:
    """``DISTTUTOR_RANK_ENV="K=V K2=V2"`` -> ``{"K": "V", "K2": "V2"}`` for every job's ranks.

    Shell-quoted words (``K="a b"``); an explicit ``launch(env=...)`` still wins.
    """
    raw = os.environ.get(contract.ENV_RANK_ENV, "").strip()
    out: dict[str, str] = {}
    try:
        words = shlex.split(raw)
    except ValueError as exc:
        raise ValueError(f"{contract.ENV_RANK_ENV}={raw!r}: {exc}") from None
    for word in words:
        key, eq, value = word.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"{contract.ENV_RANK_ENV}={raw!r}: {word!r} is not NAME=VALUE "
                             "(give space-separated NAME=VALUE words)")
        out[key] = value
    return out
