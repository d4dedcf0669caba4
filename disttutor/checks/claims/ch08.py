"""Chapter 8's named checks: fp16's range, accumulation with no_sync, the comm hooks' bytes, bucket views."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from disttutor.checks.claims.base import claim


def check_fp16_underflow(sub: float, g: torch.Tensor) -> str:
    """fp16's smallest subnormal ``sub`` is representable, half of it rounds to zero (a tie, to even) and just
    above half rounds up to it; a 1e-8 gradient underflows in fp16, survives scaled by 2**16, and bf16 keeps it.
    Exact: IEEE conversions of the same values give the same bits on every CPU."""
    claim(torch.tensor(sub).half().item() == sub, f"fp16 should represent its smallest subnormal {sub}")
    claim(torch.tensor(sub / 2).half().item() == 0.0, "half the smallest subnormal is a tie and rounds to even: 0")
    claim(torch.tensor(sub / 2 * 1.01).half().item() == sub, "just above half the smallest subnormal rounds up")
    claim(g.half().item() == 0.0, f"fp16 of {g.item():g} should underflow to 0, got {g.half().item()}")
    back = (g * 2**16).half().float() / 2**16
    claim(abs(back - g) / g < 1e-3,  # 1e-3: fp16's 10 mantissa bits round the scaled value by < 2**-11
          f"scaled by 2**16 the gradient should survive fp16: {back.item():g} vs {g.item():g}")
    claim(g.bfloat16().item() != 0.0, "bf16 has fp32's exponent range: it should keep the gradient")
    return "checked: fp16 underflows below its smallest subnormal, loss scaling rescues the gradient, bf16 keeps it"


def check_no_sync_counts(results: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]], samples: int) -> str:
    """k micro-batches equal one k-times-larger batch on every rank; a full group of k costs exactly 1 all-reduce
    with no_sync and k without; every one of ``samples`` micro-batches is stepped, no gradient is left over."""
    claim(all(res["all_match_reference"] for res in results),
          "with accumulation every step should equal one process on the k-times-larger batch")
    for r in rows:
        full = [n for n, s in zip(r["allreduces"], r["group_sizes"]) if s == r["k"]]
        want = 1 if r["no_sync"] else r["k"]
        claim(set(full) == {want}, f"k={r['k']}, no_sync={r['no_sync']}: {want} all-reduce(s) per full group "
                                   f"expected, counted {full}")
        claim(sum(r["group_sizes"]) == samples and r["grads_left"] == 0,
              f"k={r['k']}, no_sync={r['no_sync']}: {sum(r['group_sizes'])} of {samples} micro-batches stepped, "
              f"{r['grads_left']} gradients left over")
    return "checked: every step equals one process's; all-reduces counted exactly (1 vs k); nothing spills"


def check_hook_bytes(base: Mapping[str, Any], allrows: Mapping[str, Any], hrows: Mapping[str, Mapping[str, Any]],
                     bf16_hook_ok: bool) -> str:
    """fp32 sends every gradient byte once; fp16/bf16 exactly half; PowerSGD under a quarter after its plain warm-up;
    the bf16 hook is refused exactly when this build lacks it; every hook keeps replicas equal and the loss close."""
    grad = base["grad_bytes"]
    claim(base["bytes_per_step"] == grad, f"the fp32 hook should send every gradient byte once: "
                                          f"{base['bytes_per_step']} vs {grad}")
    claim(("refused" in allrows["bf16"]) == (not bf16_hook_ok),
          f"the bf16 hook: refused {'refused' in allrows['bf16']}, but this build supports it: {bf16_hook_ok}")
    for h in ("fp16", "bf16"):
        if h in hrows:
            claim(hrows[h]["bytes_per_step"] == grad / 2, f"{h}: 2-byte floats should send exactly half: "
                                                          f"{hrows[h]['bytes_per_step']} vs {grad / 2}")
    ps = hrows["powersgd"]
    claim(ps["bytes_per_step"] < 0.25 * grad, f"PowerSGD's rank-1 factors should send far less: {ps['bytes_per_step']}")
    claim(ps["bytes_first_step"] == grad, f"PowerSGD's warm-up steps are plain all-reduces: {ps['bytes_first_step']}")
    claim(all(r["replicas_equal"] for r in hrows.values()),
          f"a hook left replicas unequal: {[h for h, r in hrows.items() if not r['replicas_equal']]}")
    # fp16/bf16 rounding of gradients barely changes 30 steps; PowerSGD's error feedback keeps it on course.
    for h, tol in (("fp16", 0.01), ("bf16", 0.02), ("powersgd", 0.25)):
        if h in hrows:
            claim(abs(hrows[h]["loss"][-1] - base["loss"][-1]) <= tol * base["loss"][-1],
                  f"{h}: final loss {hrows[h]['loss'][-1]:.4f} vs fp32's {base['loss'][-1]:.4f} (more than {tol:.0%})")
    return "checked: bytes exact, replicas equal, losses close"


def check_bucket_view(bv: Mapping[bool, Mapping[str, Any]]) -> str:
    """With gradient_as_bucket_view every .grad lives in a bucket (none without), which saves exactly one copy of
    the gradients, and the numbers stay the single process's."""
    on, off = bv[True], bv[False]
    claim(on["grads_in_buckets"] == on["params"] and off["grads_in_buckets"] == 0,
          f"bucket views: {on['grads_in_buckets']}/{on['params']} grads in buckets with the flag, "
          f"{off['grads_in_buckets']} without")
    saved = off["held_bytes"] - on["held_bytes"]
    claim(saved == on["grad_bytes"], f"the flag should save exactly one copy of the gradients: {saved} vs "
                                     f"{on['grad_bytes']} bytes")
    worst = max(v["max_err"] for v in bv.values())
    claim(worst < 1e-5, f"the same numbers as one process expected: {worst:.2e}")  # fp32 sums in another order
    return f"saved: {saved / 2**20:.1f} MiB = one copy of the gradients"
