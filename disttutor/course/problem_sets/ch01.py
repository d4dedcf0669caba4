"""Chapter 1's worked problems: memory per rank under ZeRO, and the bytes each strategy sends per step.

The model is the calculator's "GPT 7B-like (32 x 4096)" shape (its parameter count computed by
:func:`disttutor.sharding.memory.transformer_params`, never typed); hardware from
:mod:`disttutor.scale.hardware` and :mod:`disttutor.links.presets`, tagged with their sources.
Traffic per rank per step, with S the gradients' bytes and n ranks: DDP and ZeRO-1/2 send
2(n-1)/n S, ZeRO-3 3(n-1)/n S, a middle pipeline stage 2 b s h e (:mod:`disttutor.viz.zero_partition_traffic`).
"""
from __future__ import annotations

from disttutor.course.problems import Problem, register
from disttutor.links.presets import PRESETS as LINKS
from disttutor.scale.hardware import H100, H200, NIC_400G
from disttutor.sharding import memory as mem

LAYERS, HIDDEN, _ = mem.PRESETS["GPT 7B-like (32 x 4096)"]
P7B = mem.transformer_params(LAYERS, HIDDEN)  # the calculator's 7B-like model, counted from its shape
BF16 = 2  # bytes per bf16 gradient (mixed precision: 16-bit weights and gradients)
ETHERNET = LINKS["10GbE"]


def _ring(n: int) -> float:
    return 2 * (n - 1) / n


def _p1() -> dict:
    n, mem_b = 16, H100.memory_bytes.value  # not the calculator's 8 devices: its table is not the answer
    bpp = mem.bytes_per_param("mixed", "adam")
    whole = bpp["weights"] + bpp["gradients"]  # ZeRO-1 keeps these on every GPU
    per_gpu = P7B * (whole + bpp["optimizer"] / n)
    return {"P_b": f"{P7B / 1e9:.2f}", "n": n, "mem_gb": f"{mem_b / 1e9:g}", "whole": whole, "opt": bpp["optimizer"],
            "per_param": f"{whole + bpp['optimizer'] / n:g}", "gb": per_gpu / 1e9,
            "share": f"{per_gpu / mem_b:.0%}", "ddp_gb": f"{P7B * sum(bpp.values()) / 1e9:.3g}"}


def _p2() -> dict:
    n, B = 64, NIC_400G.value
    S = P7B * BF16
    zero3, ddp = 3 * (n - 1) / n * S, _ring(n) * S
    return {"P_b": f"{P7B / 1e9:.2f}", "n": n, "nodes": n // H100.gpus_per_node, "B_gb": f"{B / 1e9:g}", "S_gb": f"{S / 1e9:.1f}",
            "zero3_gb": f"{zero3 / 1e9:.1f}", "ddp_gb": f"{ddp / 1e9:.1f}", "s": zero3 / B,
            "ddp_s": f"{ddp / B:.3g}", "extra_s": f"{(zero3 - ddp) / B:.3g}"}


def _p3() -> dict:
    n, mem_b = 8, H200.memory_bytes.value
    per = sum(mem.bytes_per_param("mixed", "adam").values())  # 16 bytes per parameter
    return {"n": n, "mem_gb": f"{mem_b / 1e9:g}", "per": per, "total_gb": f"{n * mem_b / 1e9:g}",
            "billions": n * mem_b / per / 1e9, "ddp_b": f"{mem_b / per / 1e9:.3g}"}


def _p4(grad_bytes: float, ranks: int) -> dict:
    B = ETHERNET.beta.value
    sent = 3 * (ranks - 1) / ranks * grad_bytes
    return {"G": f"{grad_bytes:,.0f}", "ranks": ranks, "B_gb": f"{B / 1e9:g}", "factor": f"{3 * (ranks - 1) / ranks:.3g}",
            "sent": f"{sent:,.0f}", "ms": sent / B * 1e3, "ddp_ms": f"{_ring(ranks) * grad_bytes / B * 1e3:.3g}"}


def _p5() -> dict:
    # the calculator's 8 devices and bf16, but sequences of 4096 (its default is 32 x 1024, whose ratio it prints)
    n, b, s, e = 8, 32, 4096, BF16
    act = b * s * HIDDEN * e  # one layer's output: b s h e
    pipe = 2 * act  # a middle stage: activations forward, their gradients back
    ddp = _ring(n) * P7B * BF16
    return {"n": n, "b": b, "s": s, "h": HIDDEN, "e": e, "P_b": f"{P7B / 1e9:.2f}", "act_mb": f"{act / 2**20:,.0f}",
            "pipe_gib": f"{pipe / mem.GIB:.3g}", "ddp_gib": f"{ddp / mem.GIB:.3g}", "ratio": ddp / pipe}


register(
    Problem(
        "1.p1",
        "The calculator's {P_b}-billion-parameter model, mixed precision with Adam, trained with ZeRO-1 on {n} H100s "
        "of {mem_gb} GB. How many **GB** of model states does each GPU hold, before any activation?",
        "* ZeRO-1 shards only the optimizer states ({opt} B per parameter); the bf16 weights and gradients "
        "({whole} B per parameter) stay whole on every GPU.\n"
        "* Per parameter: {whole} + {opt}/{n} = {per_param} B; × {P_b}e9 = **{gb:.3g} GB**, {share} of an H100.\n"
        "* Plain DDP would need {ddp_gb} GB on each GPU: more than the H100 has.",
        _p1, answer="gb", unit="GB",
        rel_tol=0.1,  # 10 %: GB vs GiB is 7 % apart, both count; ZeRO-3 (1 B per parameter) is 4.75x off
        constants=(H100.memory_bytes,)),
    Problem(
        "1.p2",
        "The same {P_b}-billion-parameter model, bf16, with ZeRO-3 (FSDP) on {n} H100s ({nodes} nodes). Each "
        "GPU's traffic leaves through its own {B_gb} GB/s NIC. Ignoring latency and overlap, how many "
        "**seconds** of communication does one step cost each GPU?",
        "* $S$ = {S_gb} GB of bf16 weights, and as many of gradients.\n"
        "* ZeRO-3 all-gathers the weights for the forward and again for the backward, and reduce-scatters the "
        "gradients: $3\\frac{{n-1}}{{n}}S$ = {zero3_gb} GB sent per GPU.\n"
        "* {zero3_gb} GB / {B_gb} GB/s = **{s:.3g} s**; DDP's $2\\frac{{n-1}}{{n}}S$ = {ddp_gb} GB would take "
        "{ddp_s} s: sharding the weights costs {extra_s} s more a step.",
        _p2, answer="s", unit="s",
        rel_tol=0.1,  # 10 %: hand rounding; DDP's 2(n-1)/n instead of ZeRO-3's 3(n-1)/n is 33 % off
        constants=(NIC_400G,)),
    Problem(
        "1.p3",
        "Mixed precision with Adam keeps {per} bytes of model state per parameter. With ZeRO-3 over {n} H200s "
        "of {mem_gb} GB each and no room spent on activations, how many **billion parameters** fit at most?",
        "* ZeRO-3 shards weights, gradients and optimizer states: the {n} GPUs pool {total_gb} GB.\n"
        "* {total_gb} GB / {per} B per parameter = **{billions:.3g} billion** parameters.\n"
        "* Plain DDP keeps everything on each GPU: {mem_gb} GB / {per} B = {ddp_b} billion, {n} times fewer.",
        _p3, answer="billions", unit="billion parameters",
        rel_tol=0.1,  # 10 %: GB vs GiB is 7 % apart, both count as right
        constants=(H200.memory_bytes,)),
    Problem(
        "1.p4",
        "Section 1 measured {G} bytes of gradients for the MLP trained with Adam (fp32). Train it with ZeRO-3 on "
        "your run's {ranks} ranks, joined by 10 GbE ({B_gb} GB/s per direction). Ignoring latency, how many "
        "**milliseconds** of communication does each step cost a rank?",
        "* ZeRO-3 sends $3\\frac{{n-1}}{{n}}S$ per rank: {factor} × {G} = {sent} bytes.\n"
        "* {sent} bytes / {B_gb} GB/s = **{ms:.3g} ms** a step; DDP's ring would take {ddp_ms} ms.",
        _p4, answer="ms", unit="ms",
        rel_tol=0.1,  # 10 %: hand rounding; dropping the (n-1)/n factor (4/3 on 4 ranks) is 33 % off
        run=("grad_bytes", "ranks"), constants=(ETHERNET.beta,),
        example={"grad_bytes": 1597480, "ranks": 4}),
    Problem(
        "1.p5",
        "The calculator's {P_b}-billion-parameter model ({h} wide) on {n} devices, global batch {b} × "
        "sequence **{s}**, bf16. Per step, how many **times** more bytes does each rank send under DDP than the "
        "busiest stage of an {n}-stage pipeline?",
        "* A middle stage sends its output activations forward and the gradient of its input back: "
        "$2\\,b s h e$ = 2 × {b} × {s} × {h} × {e} B = {pipe_gib} GiB (one layer's output: {act_mb} MiB).\n"
        "* DDP sends $2\\frac{{n-1}}{{n}}S$ = {ddp_gib} GiB of gradients.\n"
        "* Ratio: **{ratio:.3g}×**. The pipeline's traffic does not grow with the model's parameters, only with "
        "its width, the batch and the sequence length.",
        _p5, answer="ratio", unit="×",
        rel_tol=0.1,  # 10 %: hand rounding; counting only one direction of the stage's traffic is 2x off
    ),
)
