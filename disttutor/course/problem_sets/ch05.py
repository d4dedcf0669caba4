"""Chapter 5's worked problems: ranks across nodes, and a ring all-reduce bounded by the link between nodes.

torchrun numbers ranks node by node: RANK = GROUP_RANK × LOCAL_WORLD_SIZE + LOCAL_RANK. A ring in RANK
order crosses between nodes on one hop per node; every step waits for its slowest hop, so a ring
all-reduce of S bytes over n ranks takes about 2(n-1)α + 2(n-1)/n · S/B_slowest (the chapter's
derivation). NICs against NVLink, each figure with its tag and source. The last problem takes the
learner's own run's layout.
"""
from __future__ import annotations

from disttutor.course.problems import Problem, register
from disttutor.links.presets import PRESETS
from disttutor.scale.hardware import NIC_200G, NIC_400G, NVLINK3, NVLINK4

NVLINK, IB = PRESETS["NVLink"], PRESETS["IB100"]
NET_ALPHA = IB.alpha                  # NCCL's per-step latency on a network link (tuning.cc, NET)
GIB = 1 << 30


def _ring(n: int, alpha: float, nbytes: float, bandwidth: float) -> float:
    """Ring all-reduce: 2(n-1) steps of S/n; each step lasts as long as its slowest hop."""
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bandwidth


def _p1() -> dict:
    nnodes, p, g, l = 16, 8, 9, 5
    return {"nnodes": nnodes, "p": p, "g": g, "l": l, "before": g * p, "rank": g * p + l, "world": nnodes * p,
            "last": nnodes * p - 1}


def _p2() -> dict:
    n, params = 8, 7e9
    s = 2 * params
    inside = _ring(n, NVLINK.alpha.value, s, NVLINK.beta.value)
    across = _ring(n, NET_ALPHA.value, s, NIC_400G.value)
    return {"n": n, "params_b": params / 1e9, "s_gb": s / 1e9, "nv_gb_s": NVLINK.beta.value / 1e9,
            "nv_us": NVLINK.alpha.value * 1e6, "nic_gb_s": NIC_400G.value / 1e9, "net_us": NET_ALPHA.value * 1e6,
            "factor": 2 * (n - 1) / n, "steps": 2 * (n - 1), "inside_ms": inside * 1e3, "across_ms": across * 1e3,
            "bw_ratio": NVLINK.beta.value / NIC_400G.value, "ratio": across / inside}


def _p3() -> dict:
    nodes, per_node, params = 2, 8, 1.3e9
    n, s = nodes * per_node, 2 * params
    slow = 2 * (n - 1) / n * s / NIC_200G.value
    fast = 2 * (n - 1) / n * s / NVLINK3.value
    return {"nodes": nodes, "per_node": per_node, "n": n, "params_b": params / 1e9, "s_gb": s / 1e9,
            "nv_gb_s": NVLINK3.value / 1e9, "nic_gb_s": NIC_200G.value / 1e9, "factor": 2 * (n - 1) / n,
            "t_ms": slow * 1e3, "fast_ms": fast * 1e3, "times": slow / fast}


def _p4() -> dict:
    nodes, per_node, budget = 4, 8, 0.5
    n = nodes * per_node
    a, b = NET_ALPHA.value, IB.beta.value
    lat = 2 * (n - 1) * a
    s = (budget - lat) * b * n / (2 * (n - 1))
    return {"nodes": nodes, "per_node": per_node, "n": n, "budget_s": budget, "alpha_us": a * 1e6,
            "gb_s": b / 1e9, "steps": 2 * (n - 1), "lat_ms": lat * 1e3, "factor": 2 * (n - 1) / n,
            "s_gb": s / 1e9, "params_b": s / 2 / 1e9}


def _p5(nnodes: int, nproc_per_node: int) -> dict:
    if nnodes < 2 or nproc_per_node < 1:
        raise ValueError(f"this problem needs a run on 2 or more nodes, got {nnodes} x {nproc_per_node}")
    n, s = nnodes * nproc_per_node, GIB
    t = _ring(n, NET_ALPHA.value, s, NIC_400G.value)
    return {"nnodes": nnodes, "p": nproc_per_node, "n": n, "cross": nnodes, "inside": n - nnodes,
            "steps": 2 * (n - 1), "net_us": NET_ALPHA.value * 1e6, "nic_gb_s": NIC_400G.value / 1e9,
            "nv_gb_s": NVLINK4.value / 1e9, "factor": 2 * (n - 1) / n, "s_gb": s / 1e9,
            "lat_ms": 2 * (n - 1) * NET_ALPHA.value * 1e3, "t_ms": t * 1e3}


register(
    Problem(
        "5.p1",
        "A job runs on {nnodes} nodes with {p} processes each, numbered by torchrun node by node. Which global "
        "`RANK` has the process with `GROUP_RANK` {g} and `LOCAL_RANK` {l}?",
        "* Nodes 0 to {g} − 1 come first, {p} ranks each: {before} ranks before node {g}.\n"
        "* $\\text{{RANK}} = \\text{{GROUP\\_RANK}} \\times p + \\text{{LOCAL\\_RANK}}$ = {g} × {p} + {l} = "
        "**{rank}**.\n"
        "* `WORLD_SIZE` = {nnodes} × {p} = {world}: ranks 0 to {last}.",
        _p1, answer="rank", unit="rank",
        # a rank is exact: 0.5 % still rejects the neighbouring ranks (1.3 % away)
        rel_tol=0.005),
    Problem(
        "5.p2",
        "8 H100s ring-all-reduce the bf16 gradients of a {params_b:g}B-parameter model. First inside one node, "
        "over NVLink 4 ($B$ = {nv_gb_s:g} GB/s, $\\alpha$ = {nv_us:g} µs); then one GPU on each of 8 nodes, "
        "over 400 Gb/s NICs ($B$ = {nic_gb_s:g} GB/s, $\\alpha$ = {net_us:g} µs). How many times longer "
        "does the second take?",
        "* $S$ = {s_gb:g} GB; both rings take {steps} steps of $S/n$: "
        "$T = 2(n-1)\\alpha + \\frac{{2(n-1)}}{{n}} \\cdot \\frac{{S}}{{B}}$.\n"
        "* Inside the node: {inside_ms:.3g} ms. Across the nodes: {across_ms:.3g} ms.\n"
        "* Ratio **{ratio:.3g}**, nearly $B_\\text{{NVLink}}/B_\\text{{NIC}}$ = {bw_ratio:.3g}: at these "
        "sizes the latencies hardly count, and the bandwidth sets the time.",
        _p2, answer="ratio", unit="times",
        # the ratio is the bandwidths' to 0.2 %; 10 % rejects confusing bits with bytes (8x)
        rel_tol=0.1, constants=(NVLINK.alpha, NVLINK.beta, NET_ALPHA, NIC_400G)),
    Problem(
        "5.p3",
        "Two DGX A100 nodes, {per_node} GPUs each: {n} ranks in one ring, in `RANK` order. The hops inside a "
        "node use NVLink 3 ($B$ = {nv_gb_s:g} GB/s); the two hops between the nodes each use one 200 Gb/s HDR "
        "port ($B$ = {nic_gb_s:g} GB/s). How long does a ring all-reduce of {s_gb:g} GB (the fp16 gradients "
        "of a {params_b:g}B model) take, in ms, ignoring $\\alpha$?",
        "* Every step, every rank sends $S/n$ at once; the step ends when its slowest hop, a node-to-node one, "
        "ends.\n"
        "* $T = \\frac{{2(n-1)}}{{n}} \\cdot \\frac{{S}}{{B_\\text{{HDR}}}}$ = {factor:g} × {s_gb:g} GB / "
        "{nic_gb_s:g} GB/s = **{t_ms:.3g} ms**.\n"
        "* Over NVLink alone it would take {fast_ms:.3g} ms: the two slow hops make the whole ring "
        "{times:.3g} times slower.",
        _p3, answer="t_ms", unit="ms",
        # two-digit rounding stays within a few %; using NVLink's B (12x too fast) must fail
        rel_tol=0.1, constants=(NVLINK3, NIC_200G)),
    Problem(
        "5.p4",
        "{nodes} nodes of {per_node} GPUs, joined by 100 Gb/s InfiniBand EDR, one port per node ($B$ = "
        "{gb_s:g} GB/s, $\\alpha$ = {alpha_us:g} µs per ring step). The {n} ranks' ring all-reduce of the bf16 "
        "gradients may take at most {budget_s:g} s per training step. How large can the gradients be, in GB?",
        "* $T = 2(n-1)\\alpha + \\frac{{2(n-1)}}{{n}} \\cdot \\frac{{S}}{{B}}$, bounded by the EDR hops; "
        "solve for $S$: $S = (T - 2(n-1)\\alpha) \\cdot B \\cdot \\frac{{n}}{{2(n-1)}}$.\n"
        "* Latency: {steps} × {alpha_us:g} µs = {lat_ms:.3g} ms, almost nothing of {budget_s:g} s.\n"
        "* $S$ = ({budget_s:g} s − {lat_ms:.3g} ms) × {gb_s:g} GB/s / {factor:.4g} ≈ **{s_gb:.3g} GB**: "
        "about {params_b:.2g}B parameters in bf16.",
        _p4, answer="s_gb", unit="GB",
        # rounding 2(n-1)/n to 2 is 3 % off and passes; forgetting the factor (S = T·B, 1.9x) must fail
        rel_tol=0.1, constants=(NET_ALPHA, IB.beta)),
    Problem(
        "5.p5",
        "Your run had {nnodes} nodes × {p} processes. Make each process an H100: NVLink 4 inside a node "
        "($B$ = {nv_gb_s:g} GB/s), one 400 Gb/s NIC per node between nodes ($B$ = {nic_gb_s:g} GB/s, "
        "$\\alpha$ = {net_us:g} µs a step). How long does a ring all-reduce of 1 GiB over all {n} ranks, "
        "in `RANK` order, take, in ms?",
        "* In `RANK` order, {cross} of the ring's {n} hops cross between nodes (the last rank of a node to "
        "the first of the next, and back around); {inside} stay on NVLink.\n"
        "* Each of the {steps} steps ends with its slowest hop, on a NIC: "
        "$T = 2(n-1)\\alpha + \\frac{{2(n-1)}}{{n}} \\cdot \\frac{{S}}{{B_\\text{{NIC}}}}$.\n"
        "* $T$ = {lat_ms:.3g} ms + {factor:.3g} × {s_gb:.3g} GB / {nic_gb_s:g} GB/s ≈ **{t_ms:.3g} ms**.",
        _p5, answer="t_ms", unit="ms",
        # two-digit rounding stays within a few %; using NVLink's B (9x too fast) must fail
        rel_tol=0.1, run=("nnodes", "nproc_per_node"), example={"nnodes": 2, "nproc_per_node": 2},
        constants=(NVLINK4, NIC_400G, NET_ALPHA)),
)
