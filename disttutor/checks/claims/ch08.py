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
    return (f"checked: fp16 sends {hrows['fp16']['bytes_per_step'] / grad:.3f}x fp32's bytes, PowerSGD "
            f"{ps['bytes_per_step'] / grad:.3f}x; replicas equal; final losses within 1 % (fp16), 25 % (PowerSGD)")


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


def check_amp_rounding(run: Mapping[str, Any]) -> str:
    """fp32 and autocast trained alike (every per-step loss within 2 % of the loss: bf16 keeps ~3 significant
    digits, so more would mean the runs trained differently) and not identically (no parameter bit-identical:
    the lower precision really ran)."""
    diff = max(abs(p - q) for p, q in zip(run["loss_fp32"], run["loss_amp"]))
    claim(diff < 0.02 * max(run["loss_fp32"]), f"a per-step loss differs by {diff:.2e}, over 2 % of the loss")
    claim(not run["any_param_identical"], "a parameter is bit-identical to fp32's: autocast did not run")
    return f"checked: losses within 2 % (largest difference {diff:.1e}), no parameter bit-identical to fp32's"


def check_clip_order(right: float, wrong_scaled: float) -> str:
    """Unscale then clip gives the asked-for norm 1.0; clip then unscale leaves 1/65536 of it (the threshold
    applied in scaled units). 1e-4 / 1e-3: float32 norms of 9 numbers, far finer than the effect."""
    claim(abs(right - 1.0) < 1e-4, f"unscale then clip should give norm 1.0, got {right}")
    claim(abs(wrong_scaled - 1.0) < 1e-3, f"clip then unscale should give 1/65536, got {wrong_scaled} / 65536")
    return "checked: unscale then clip gives norm 1.0; clip then unscale gives 1/65536 of it"


def check_bucket_sweep(results: Sequence[Mapping[str, Any]]) -> str:
    """The bucket count falls as bucket_cap_mb grows, down to one bucket, and every bucket size gives the
    single-process gradients (fp32 sums of 2 ranks in another order: ~1e-7 relative; 1e-5 absolute on O(1e-2))."""
    rows = results[0]["rows"]
    caps, buckets = [r["cap_mb"] for r in rows], [r["buckets"] for r in rows]
    claim(caps == sorted(caps) and buckets == sorted(buckets, reverse=True) and buckets[0] > buckets[-1] == 1,
          f"bucket counts should fall to 1 as the cap grows: caps {caps}, buckets {buckets}")
    worst = max(r["max_err"] for res in results for r in res["rows"])
    claim(worst < 1e-5, f"a bucket size changed the gradients: {worst:.2e} from one process")
    return f"checked: buckets {buckets} as the cap grows; every size gives the single-process gradients"


def check_probe(probe: Sequence[Mapping[str, Any]], alpha_err: float, beta_err: float, quiet: bool) -> str:
    """The emulated time is a floor for every size (1 %: timer resolution); on a quiet machine alpha and beta
    fitted back from the probe are within 10 % of the link's."""
    claim(all(r["time_s"] >= 0.99 * r["model_s"] for r in probe), "a transfer beat the emulated link's time")
    if quiet:
        claim(alpha_err < 0.1 and beta_err < 0.1, f"fitted alpha/beta off by {alpha_err:.1%}/{beta_err:.1%}")
    return (f"checked: no transfer beat the link; fitted alpha {alpha_err:.1%} off, beta {beta_err:.1%} off"
            + ("" if quiet else " (10 % bound not asserted: machine busy)"))


def check_faster(what: str, fast: str, fast_s: float, slow: str, slow_s: float, quiet: bool) -> str:
    """A timing claim: ``fast`` takes less time than ``slow``, asserted only on a quiet machine; the verdict
    states both numbers and the direction they show."""
    if quiet:
        claim(fast_s < slow_s, f"{what}: {fast} {fast_s * 1e3:.1f} ms should be under {slow} {slow_s * 1e3:.1f} ms")
    sign = "<" if fast_s < slow_s else ">="
    return (f"{what}: {fast} {fast_s * 1e3:.3g} ms {sign} {slow} {slow_s * 1e3:.3g} ms"
            + (" (asserted: quiet machine)" if quiet else " (not asserted: machine busy)"))


def check_link_bytes(comp: Mapping[str, Mapping[str, Any]]) -> str:
    """On the link fp16 puts exactly half of fp32's bytes, PowerSGD's rank-1 factors of 512x512 gradients under 5 %."""
    f32, f16, ps = comp["fp32"]["bytes_per_step"], comp["fp16"]["bytes_per_step"], comp["powersgd"]["bytes_per_step"]
    claim(f16 * 2 == f32, f"fp16 should send exactly half of fp32's bytes: {f16} vs {f32}")
    claim(ps < 0.05 * f32, f"PowerSGD should send under 5 % of fp32's bytes: {ps} vs {f32}")
    return f"checked: on the link fp16 sends {f16 / f32:.3f}x fp32's bytes (exactly half), PowerSGD {ps / f32:.3f}x (under 0.05)"


def check_static_graph(sg: Mapping[bool, Mapping[str, Any]]) -> str:
    """With static_graph the twice-checkpointed layer gets the single-process gradients (1e-5: fp32 sums in
    another order); without it DDP raises or the gradients are off by more than 1e-3."""
    on, off = sg[True], sg[False]
    claim("error" not in on and on["max_err"] < 1e-5, f"static_graph=True should match one process: {on}")
    claim("error" in off or off["max_err"] > 1e-3, f"without static_graph torch handled it here: {off}")
    return "checked: with static_graph the single-process gradients; without it " + (
        "DDP raised" if "error" in off else "wrong gradients")
