"""Checker for Exercise 1.1 (chapter 1): per-device memory of weights, gradients and optimizer
states under plain data parallelism and ZeRO stages 1, 2, 3.

The learner writes ``zero_memory(n_params, bytes_per_param, world, stage)`` returning bytes
per device for ``"weights"``, ``"gradients"`` and ``"optimizer"``. It is checked in this
process (the answer is a formula, nothing to launch) against

* the chapter's calculator (:func:`disttutor.sharding.memory.per_device`) for GPT-like models in
  fp32 and mixed precision, with SGD, momentum and Adam, on 1..8 devices, stages 0..3;
* a measurement: the bytes a real model and a real Adam optimizer hold after one step
  (:func:`disttutor.sharding.memory.measured_state_bytes`), for one device without sharding.
"""
from __future__ import annotations

import itertools
from typing import Callable

from disttutor.sharding import memory
from disttutor.checks.adapter import CheckResult, function_name, run_local
from disttutor.checks.tolerances import FORMULA_RTOL

PARTS = ("weights", "gradients", "optimizer")
STAGE_NAMES = {0: "plain DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}
SHARDED_FROM = {"optimizer": 1, "gradients": 2, "weights": 3}  # the ZeRO stage that starts sharding a part


def _close(got, want: float) -> bool:
    try:
        return abs(float(got) - want) <= FORMULA_RTOL * max(abs(want), 1.0)
    except (TypeError, ValueError):
        return False


def _compare(fn: Callable, n: int, bpp: dict, world: int, stage: int, want: dict, what: str) -> str | None:
    got = fn(n, dict(bpp), world, stage)
    if not isinstance(got, dict) or not all(p in got for p in PARTS):
        return f"expected a dict with keys {PARTS}, got {got!r}"
    for part in PARTS:
        if not _close(got[part], want[part]):
            split = "shards" if stage >= SHARDED_FROM[part] else "does not shard"
            return (f"{what}, {n:,} parameters, {bpp[part]} bytes/param for {part}, {world} device(s), "
                    f"{STAGE_NAMES[stage]}: {part} should be {want[part]:,.0f} bytes per device, got "
                    f"{got[part]!r} ({STAGE_NAMES[stage]} {split} the {part})")
    return None


def _check(fn: Callable) -> str | None:
    # 1) the calculator, over every combination the chapter's widget offers
    for (layers, hidden, heads), precision, opt, world, stage in itertools.product(
            [(2, 64, 4), (12, 768, 12)], memory.PRECISIONS, memory.OPTIMIZERS, (1, 2, 4, 8), (0, 1, 2, 3)):
        cfg = memory.TrainingSetup(layers=layers, hidden=hidden, heads=heads, batch=8, precision=precision,
                                   optimizer=opt, dp=world, zero=stage)
        want = memory.per_device(cfg)
        problem = _compare(fn, cfg.params, memory.bytes_per_param(precision, opt), world, stage, want,
                           f"the calculator ({precision}, {opt})")
        if problem:
            return problem
    # 2) a measurement: what a real model and Adam hold on one device
    import torch

    from disttutor.workloads.models import MLP, seeded

    model = seeded(MLP, 0, 16, [32, 32], 4)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(8, 16)).sum().backward()
    opt.step()
    measured = memory.measured_state_bytes(model, opt)
    n = sum(p.numel() for p in model.parameters())
    return _compare(fn, n, memory.bytes_per_param("fp32", "adam"), 1, 0, measured,
                    "measured on a real MLP with torch.optim.Adam after one step")


def check_zero_memory(fn: Callable | str) -> CheckResult:
    """Exercise 1.1: ``fn(n_params, bytes_per_param, world, stage) -> {"weights", "gradients", "optimizer"}``."""
    return run_local("1.1", fn, function_name(fn, "zero_memory"), _check)
