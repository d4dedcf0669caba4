"""Introduced in chapter 10: one optimiser step of the capstone's loop (:func:`disttutor.lm.loop.train`).

:func:`train_step` is the step :func:`~disttutor.lm.loop.train` runs unless it is handed another
function of the same signature -- Exercise 10.2's learner writes one, and its checker
(:mod:`disttutor.checks.lm_step`) runs it inside the same loop and compares it with this one:

1. ``zero_grad``, then the micro-batches; all but the last backward run inside ``ddp.no_sync()``
   (gradients only accumulate locally), the last one all-reduces the sum once (chapter 8); each
   micro-batch's loss is divided by their number, so the step's gradient is of the mean loss;
2. ``scaler.unscale_`` **before** ``clip_grad_norm_`` -- the norm is of the true gradients
   (with bf16 or fp32 the scaler is usually disabled and both are no-ops);
3. the optimiser's step through the scaler, then the learning-rate schedule's step.
"""
from __future__ import annotations

import contextlib
import time

import torch
from torch.profiler import record_function


def train_step(ddp_model, optimizer, scheduler, scaler, micro_batches, loss_fn, clip, times=None):
    """One optimiser step over ``micro_batches``; returns this rank's mean loss over them (a 0-d tensor).

    ``loss_fn(model, batch)`` is a micro-batch's mean loss (autocast inside, when the loop uses it).
    ``times`` (the loop's own step only) adds the seconds spent in no_sync backward ("local"), the
    synchronised one ("sync") and the optimiser ("step"). The ``record_function`` regions are those
    chapter 9's :mod:`disttutor.troubleshoot.traces` reads.
    """
    n = len(micro_batches)
    optimizer.zero_grad(set_to_none=True)
    step_loss = torch.zeros((), device=micro_batches[0].device)
    for j, xb in enumerate(micro_batches):
        t0 = time.perf_counter()
        last = j == n - 1
        # no_sync(): accumulate locally; only the last backward of the step all-reduces.
        with (contextlib.nullcontext() if last else ddp_model.no_sync()):
            with record_function("forward"):
                loss = loss_fn(ddp_model, xb) / n  # / n: the step's gradient is a mean
            with record_function("backward"):  # (activation checkpointing re-runs forward in here)
                scaler.scale(loss).backward()
        step_loss += loss.detach()
        if times is not None:
            times["sync" if last else "local"] += time.perf_counter() - t0
    t1 = time.perf_counter()
    with record_function("optimizer"):
        scaler.unscale_(optimizer)  # clip the TRUE gradients (a no-op when the scaler is disabled)
        torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), clip)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
    if times is not None:
        times["step"] += time.perf_counter() - t1
    return step_loss
