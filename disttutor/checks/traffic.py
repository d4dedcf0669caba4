"""Checker for Exercise 3.1 (chapter 3): the bytes rank 0 sends per training step, DataParallel's
pattern (``dp-copy``) versus DDP's ring all-reduce (``ddp-ring``).

The learner writes ``predict_sent(pattern, n, n_params, batch, d_in, d_out, elem=4)``. The
checker runs the chapter's traffic program (:mod:`disttutor.programs.dp_traffic`) once, on 3
real ranks measuring groups of 2 and 3, and compares the prediction with the bytes rank 0
really handed to gloo; then with the chapter's formula
(:func:`disttutor.data_parallel.dataparallel.expected_bytes`, itself tested against measurements) for 4
and 8 devices, which this machine does not launch. Byte counts are integers: exact.
"""
from __future__ import annotations

from typing import Callable

from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, function_name, load_learner
from disttutor.data_parallel.dataparallel import expected_bytes

PATTERNS = ("dp-copy", "ddp-ring")
MEASURED_SIZES = (2, 3)


def measure(timeout: float = JOB_TIMEOUT_S) -> dict:
    """Rank 0's measured bytes per step: ``{(pattern, n): sent}`` and the model's shape."""
    from disttutor.launcher.launch import launch

    res = launch("dp_traffic", max(MEASURED_SIZES),
                 {"steps": 1, "sizes": list(MEASURED_SIZES), "patterns": list(PATTERNS)},
                 stream=False, timeout=timeout)
    r0 = res.results[0]
    sent = {(p, int(n)): runs[p]["sent"] for n, runs in r0["runs"].items() for p in PATTERNS}
    return {"sent": sent, "shape": {k: r0[k] for k in ("n_params", "batch", "d_in", "d_out")}}


def _why(pattern: str) -> str:
    if pattern == "ddp-ring":
        return ("the ring sends 2(n-1) chunks of tensor_split(n_params, n); with n_params not divisible by n "
                "the chunks differ in size, so count the chunks rank 0 really sends")
    return ("rank 0 sends each of the n-1 other devices a copy of the parameters and its shard of the inputs "
            "and of the output gradients")


def check_predict_sent(fn: Callable | str, timeout: float = JOB_TIMEOUT_S) -> CheckResult:
    """Exercise 3.1: is ``fn(pattern, n, n_params, batch, d_in, d_out)`` the bytes rank 0 sends per step?"""
    try:
        predict = load_learner(fn, function_name(fn, "predict_sent"), "3.1")
        shape = dict(n_params=2110, batch=96, d_in=10, d_out=10)  # dp_traffic's defaults; checked below
        for pattern in PATTERNS:  # a stub fails here, before anything is launched
            predict(pattern, 2, **shape)
    except NotImplementedError as e:
        return CheckResult("3.1", False, [f"still a stub -- {e}"])
    except Exception as e:
        return CheckResult("3.1", False, [f"the function raised {type(e).__name__}: {e}"])
    m = measure(timeout)
    if m["shape"] != shape:
        raise RuntimeError(f"internal: dp_traffic's model changed shape: {m['shape']} (update the checker)")
    cases = [(p, n, m["sent"][(p, n)], "measured on real ranks") for n in MEASURED_SIZES for p in PATTERNS]
    cases += [(p, n, expected_bytes(p, n, 0, **shape)["sent"], "the chapter's formula") for n in (4, 8)
              for p in PATTERNS]
    for pattern, n, want, source in cases:
        try:
            got = predict(pattern, n, **shape)
        except Exception as e:
            return CheckResult("3.1", False, [f"{pattern}, n={n}: the function raised {type(e).__name__}: {e}"])
        if got != want:
            return CheckResult("3.1", False, [
                f"{pattern}, n={n} ranks, {shape['n_params']} parameters, batch {shape['batch']}: rank 0 sends "
                f"{want} bytes per step ({source}), you predicted {got!r} -- {_why(pattern)}"], [m])
    return CheckResult("3.1", True, [], [m])
