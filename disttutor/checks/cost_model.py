"""Checker for Exercise 13.1: the learner writes chapter 13's DDP step model (kernel side only).

``ddp_step(machine, model, batch)`` -> seconds: the forward and backward matmuls of ``model`` (an
``nn.Sequential`` of ``nn.Linear`` layers and activations, float32) on ``batch`` rows per rank at
``machine.gamma`` FLOP/s, plus the all-reduce of every gradient in one DDP bucket, from the fitted
``machine.links["all_reduce"]`` (``.alpha`` s, ``.bandwidth`` bytes/s of bus bandwidth) over
``machine.n`` ranks. The machine handed to the learner carries only those numbers (no ``t()``): the
formula is theirs to write.

Checked, in order: several machines, models and world sizes against the course's own
:func:`disttutor.scale.local.ddp_step` (relative tolerance 1e-6: the same arithmetic in another
order differs by rounding only); a miss is matched against the realistic slips (the ring's factor,
the backward's FLOPs, latency, overlap, units) and named. Then, when the chapter passes its fitted
``machine`` and the ``measured`` step time of its DDP run, the prediction for that run must lie
within the band :data:`MEASURED_BAND` of it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from disttutor.checks.adapter import CheckResult, function_name, run_local

EXERCISE = "13.1"
REL_TOL = 1e-6  # the same sums in another order: rounding only
# predicted / measured. Above 1.25 the model counts more work than the run did (beyond a timed run's
# noise): the model is a lower bound (no optimizer, no Python, no other load). Below 1/3 it misses
# two thirds of the step, which forgetting a term does and the terms it leaves out do not.
MEASURED_BAND = (1 / 3, 1.25)


@dataclass(frozen=True)
class Fitted:
    """What the learner's function receives: the fitted constants, nothing that computes."""

    links: dict
    gamma: float
    n: int


@dataclass(frozen=True)
class Link:
    alpha: float
    bandwidth: float


MACHINES = {  # (alpha s, bus bandwidth B/s, gamma FLOP/s): a gloo-on-loopback-like and a GPU-like machine
    "cpu": (80e-6, 1.5e9, 40e9),
    "gpu": (15e-6, 300e9, 400e12),
}
CASES = (  # (machine, layer widths, rows per rank, ranks)
    ("cpu", (16, 512, 512, 512, 4), 256, 2),
    ("cpu", (32, 256, 64), 64, 4),
    ("gpu", (1024, 4096, 1024), 2048, 8),
    ("cpu", (8, 1024, 1024, 10), 16, 3),
)


def make_model(dims):
    import torch

    layers = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def fitted(machine_name: str, n: int) -> tuple[Fitted, Any]:
    from disttutor.scale import costmodel

    alpha, bw, gamma = MACHINES[machine_name]
    course = costmodel.Machine({"all_reduce": costmodel.Link(alpha, bw)}, gamma, n)
    return Fitted({"all_reduce": Link(alpha, bw)}, gamma, n), course


def reference(course, dims, batch: int, n: int) -> float:
    from disttutor.scale import local

    # One bucket holds every gradient: the cap (in elements) is the model's size.
    cap = sum(a * b + b for a, b in zip(dims[:-1], dims[1:]))
    return local.ddp_step(course, dims[0], tuple(dims[1:-1]), dims[-1], batch * n, n, cap)["total"]


def slips(dims, batch: int, n: int, alpha: float, bw: float, gamma: float) -> list[tuple[float, str]]:
    """(value, what went wrong) for the realistic wrong answers."""
    mm = sum(a * b for a, b in zip(dims[:-1], dims[1:]))
    nbytes = 4 * sum(a * b + b for a, b in zip(dims[:-1], dims[1:]))
    compute = 6 * batch * mm / gamma
    ring = 2 * (n - 1) / n
    comm = alpha + ring * nbytes / bw
    bias_flops = 6 * batch * sum(dims[1:]) / gamma
    return [
        (compute + alpha + n * nbytes / bw, "the ring's bandwidth factor: each rank moves 2(n-1)/n S, not n S"),
        (compute + alpha + (n - 1) * nbytes / bw, "the ring's bandwidth factor: each rank moves 2(n-1)/n S, not "
                                                  "(n-1) S (a chunk is S/n)"),
        (compute + alpha + 2 * (n - 1) * nbytes / bw, "the ring's bandwidth factor: 2(n-1) steps of one chunk "
                                                      "S/n each, not of the whole tensor"),
        (compute + alpha + nbytes / bw, "the ring's bandwidth factor: an all-reduce moves 2(n-1)/n S per rank, "
                                        "not S"),
        (compute + alpha + (n - 1) / n * nbytes / bw, "(n-1)/n is an all-gather's or a reduce-scatter's factor; "
                                                      "an all-reduce is both, 2(n-1)/n"),
        (compute + ring * nbytes / bw, "the latency is missing: every call pays alpha, whatever its size"),
        (compute + 2 * (n - 1) * alpha + ring * nbytes / bw,
         "the fitted alpha is already one whole call's fixed cost (it was fitted on whole all-reduces): "
         "do not multiply it by the ring's 2(n-1) steps"),
        (compute, "the all-reduce is treated as hidden: with one bucket it starts only once backward has "
                  "produced the last gradient, so all of it is exposed"),
        (max(compute, comm), "compute and communication overlap here: with one bucket the all-reduce starts "
                             "only after backward, so add its time"),
        (compute / 3 + comm, "backward is missing: it costs twice the forward (the input's gradient and the "
                             "weight's), 6 FLOPs per row and weight in all"),
        (2 * compute / 3 + comm, "backward costs two matmuls per layer (the input's gradient and the weight's), "
                                 "twice the forward, not once"),
        (n * compute + comm, "batch is rows per rank: each rank computes only its own rows"),
        (compute / n + comm, "batch is already rows per rank: do not divide it by n"),
        (compute + alpha + ring * nbytes / 4 / bw, "the all-reduce's S is in bytes: float32 gradients are 4 "
                                                   "bytes per element"),
        (compute + alpha + ring * 4 * mm / bw, "the biases have gradients too: S is every parameter's bytes"),
        (compute + bias_flops + comm, "count the matmuls only: bias adds and activations are memory-bound "
                                      "work the model leaves out"),
        ((compute + comm) * 1e3, "return seconds, not milliseconds"),
    ]


def _close(a: float, b: float, rel: float = REL_TOL) -> bool:
    return abs(a - b) <= rel * abs(b)


def _problem(fn: Callable, machine=None, measured: float | None = None, dims=None, batch: int | None = None) -> str | None:
    for name, dims_c, batch_c, n in CASES:
        learner_machine, course = fitted(name, n)
        got = fn(learner_machine, make_model(dims_c), batch_c)
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return f"ddp_step returned {type(got).__name__}: return the step time in seconds, one number"
        want = reference(course, dims_c, batch_c, n)
        if _close(float(got), want):
            continue
        alpha, bw, gamma = MACHINES[name]
        where = f"MLP {'-'.join(map(str, dims_c))}, {batch_c} rows per rank, {n} ranks"
        why = next((msg for value, msg in slips(dims_c, batch_c, n, alpha, bw, gamma)
                    if _close(float(got), value, 1e-4) and not _close(value, want, 1e-4)), None)
        return (f"{where}: yours is {float(got) * 1e3:.4g} ms, the model gives {want * 1e3:.4g} ms"
                + (f" -- {why}" if why else " (compute: 6 FLOPs per row and weight at gamma; plus one all-reduce "
                                            "of every gradient's bytes)"))
    if machine is None or measured is None:
        return None
    dims = dims or (16, 512, 512, 512, 4)
    mine = Fitted(machine.links, machine.gamma, machine.n)
    pred = float(fn(mine, make_model(dims), batch))
    ratio = pred / measured
    lo, hi = MEASURED_BAND
    if not lo <= ratio <= hi:
        return (f"on your machine: predicted {pred * 1e3:.3g} ms, measured {measured * 1e3:.3g} ms, a ratio of "
                f"{ratio:.2f}, outside {lo:.2f}-{hi:.2f}" + (" -- the prediction exceeds the run" if ratio > hi
                                                            else " -- a large term is missing"))
    return None


def check_ddp_step(fn: Callable | str, machine=None, measured: float | None = None,
                   dims: tuple[int, ...] | None = None, batch: int = 256) -> CheckResult:
    """Exercise 13.1: is ``fn(machine, model, batch)`` the chapter's DDP step model? With the chapter's
    fitted ``machine`` and its DDP run's ``measured`` seconds (``dims`` its layer widths, ``batch`` its
    rows per rank), also: does its prediction land near that run?"""
    return run_local(EXERCISE, fn, function_name(fn, "ddp_step"),
                     lambda f: _problem(f, machine, measured, dims, batch))
