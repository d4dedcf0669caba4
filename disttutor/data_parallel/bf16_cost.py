"""Introduced in chapter 8: why bf16 autocast is (or is not) faster on *this* CPU -- measured, in parts.

Autocast makes a trade at every matmul: it **casts** the fp32 weights and activations to bf16
(extra memory traffic, on every call), then runs the matmul in bf16 (half the bytes, and on
hardware with bf16 matrix units, several times the FLOP/s). Whether the trade pays is a property
of the hardware and of the size of the matmuls, so this module measures the two sides apart:

* :func:`cpu_bf16_support` -- what the CPU offers: torch's vector capability
  (``torch.backends.cpu.get_cpu_capability()``), the bf16-related flags of ``/proc/cpuinfo``
  (``avx512_bf16``: bf16 dot products in AVX-512; ``amx_bf16``: Intel's matrix tiles) and
  whether oneDNN (torch's CPU matmul library) reports bf16 support;
* :func:`cast_vs_matmul` -- for a stack of Linear layers at a batch size: the fp32 matmuls,
  the same matmuls on bf16 inputs, the casts autocast adds, and the layer under autocast,
  each timed on one thread (as a rank runs).
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_bf16_support(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """torch's CPU capability, which of :data:`FLAGS` the CPU lists, and oneDNN's bf16 verdict."""
    try:
        line = next((ln for ln in open(cpuinfo) if ln.startswith("flags")), "")
        flags = set(line.split(":", 1)[-1].split())
        found = {f: f in flags for f in FLAGS}
    except OSError:  # not Linux: the flags are unknown, not absent
        found = {f: None for f in FLAGS}
    onednn = bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return {"capability": torch.backends.cpu.get_cpu_capability(), "flags": found, "onednn_bf16": onednn}


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm-up: first-call allocation and kernel choice
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3


def cast_vs_matmul(widths: list[int], batch: int, repeats: int = 7, seed: int = 0) -> dict:
    """Forward of ``Linear(widths[i], widths[i+1])`` layers at ``batch`` rows, timed in parts (ms, one thread).

    ``fp32``: the matmuls in fp32; ``bf16``: the same matmuls on inputs already in bf16;
    ``casts``: converting each layer's input and weight to bf16 (what autocast adds per call);
    ``autocast``: the layers under ``torch.autocast("cpu", bfloat16)`` (casts + bf16 matmuls + bookkeeping).
    """
    g = torch.Generator().manual_seed(seed)
    ws = [torch.randn(o, i, generator=g) for i, o in zip(widths, widths[1:])]
    xs = [torch.randn(batch, i, generator=g) for i in widths[:-1]]
    wb, xb = [w.bfloat16() for w in ws], [x.bfloat16() for x in xs]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def run_autocast():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for x, w in zip(xs, ws):
                F.linear(x, w)

    try:
        out = {"fp32": _median_ms(lambda: [F.linear(x, w) for x, w in zip(xs, ws)], repeats),
               "bf16": _median_ms(lambda: [F.linear(x, w) for x, w in zip(xb, wb)], repeats),
               "casts": _median_ms(lambda: [(x.bfloat16(), w.bfloat16()) for x, w in zip(xs, ws)], repeats),
               "autocast": _median_ms(run_autocast, repeats)}
    finally:
        torch.set_num_threads(threads)
    out["gflop"] = 2 * batch * sum(i * o for i, o in zip(widths, widths[1:])) / 1e9
    return out


def explain(small: dict, large: dict, small_name: str, large_name: str, cpu: dict | None = None) -> str:
    """Sentences about where autocast's time went on this CPU, from two :func:`cast_vs_matmul` results.

    ``cpu`` (:func:`cpu_bf16_support`) names the flags the CPU lists, beside the measured verdict.
    """
    flags = (cpu or {}).get("flags", {})
    listed = ", ".join(f"{f}: {'yes' if flags[f] else 'no'}" for f in ("amx_bf16", "avx512_bf16")
                       if flags.get(f) is not None)
    where = f"this CPU ({listed})" if listed else "this CPU"
    def part(r: dict, name: str) -> str:
        return (f"{name}: fp32 matmuls {r['fp32']:.3f} ms, bf16 matmuls {r['bf16']:.3f} ms "
                f"({r['bf16'] / r['fp32']:.2f}x), casts {r['casts']:.3f} ms, all under autocast {r['autocast']:.3f} ms "
                f"({r['autocast'] / r['fp32']:.2f}x fp32)")

    lines = [part(small, small_name), part(large, large_name)]
    if large["bf16"] >= large["fp32"]:
        lines.append(f"=> even where the matmuls dominate, bf16 matmuls are not faster than fp32 on {where}: without "
                     "a bf16 matrix unit that torch uses, bf16 saves no FLOP time, so autocast only adds its casts.")
    elif small["autocast"] >= small["fp32"]:
        lines.append(f"=> bf16 matmuls are faster on {where} ({large['fp32'] / large['bf16']:.1f}x at the large size), but "
                     "at the small size the casts and autocast's bookkeeping cost more than the matmuls save.")
    else:
        lines.append(f"=> bf16 matmuls are faster on {where} and outweigh the casts at both sizes.")
    return "\n".join(lines)
