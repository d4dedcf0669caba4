"""Chapter 9's worked problems: what a healthy collective should cost, so a measured one can be judged.

The chapter's notation: n ranks, S bytes, α latency (s), B bandwidth (bytes/s); a ring all-reduce takes
2(n-1)α + 2(n-1)/n · S/B. A measured time ten times the model's says the bytes took another path, or a
rank waited for another. Hardware figures come from :mod:`disttutor.scale.hardware` and
:mod:`disttutor.links.presets`, with their tags and sources; two problems take the learner's own runs
(the straggler's profile, the stuck job).
"""
from __future__ import annotations

from disttutor.course.problems import Problem, register
from disttutor.scale.hardware import NIC_400G, NVLINK4, Constant

GLOO_TIMEOUT = Constant(1800.0, "s", "reported",
                        "PyTorch documentation of init_process_group: the timeout defaults to 30 minutes for "
                        "backends other than NCCL (default_pg_timeout)")
BF16 = 2


def _p1() -> dict:
    n, params = 8, 13e9
    s = BF16 * params
    bw = 2 * (n - 1) / n * s / NVLINK4.value
    return {"n": n, "params_b": params / 1e9, "s_gb": s / 1e9, "gb_s": NVLINK4.value / 1e9,
            "factor": 2 * (n - 1) / n, "t_ms": bw * 1e3}


def _p2() -> dict:
    v, measured_ms = _p1(), 950.0                   # the profile's all-reduce: the problem's given
    nic = 2 * (v["n"] - 1) / v["n"] * v["s_gb"] * 1e9 / NIC_400G.value
    return {**v, "measured_ms": measured_ms, "ratio": measured_ms / v["t_ms"], "nic_gb_s": NIC_400G.value / 1e9,
            "nic_ms": nic * 1e3}


def _p3(fast_comm_ms: float, slow_comm_ms: float, steps: int) -> dict:
    wait = (fast_comm_ms - slow_comm_ms) / steps
    return {"fast": fast_comm_ms, "slow": slow_comm_ms, "steps": steps, "diff": fast_comm_ms - slow_comm_ms,
            "wait_ms": wait}


def _p4() -> dict:
    nodes, per_node, params, backward_ms = 16, 8, 7e9, 300.0
    n, s = nodes * per_node, BF16 * params
    t = 2 * (n - 1) / n * s / NIC_400G.value
    return {"nodes": nodes, "per_node": per_node, "n": n, "params_b": params / 1e9, "s_gb": s / 1e9,
            "gb_s": NIC_400G.value / 1e9, "factor": 2 * (n - 1) / n, "comm_ms": t * 1e3, "bwd_ms": backward_ms,
            "exposed_ms": max(0.0, t * 1e3 - backward_ms), "hidden_ms": min(t * 1e3, backward_ms)}


def _p5(timeout_s: float, wall_s: float) -> dict:
    rest = wall_s - timeout_s                       # start-up and teardown: they do not grow with the timeout
    default = GLOO_TIMEOUT.value
    return {"timeout_s": timeout_s, "wall_s": wall_s, "rest_s": rest, "default_min": default / 60,
            "default_s": default, "end_s": default + rest, "end_min": (default + rest) / 60}


register(
    Problem(
        "9.p1",
        "A {params_b:.0f}B-parameter model trains with DDP on one node of {n} H100s. What should the ring "
        "all-reduce of its bf16 gradients take over NVLink 4, in **milliseconds** (bandwidth term)?",
        "* $S$ = {params_b:.0f}e9 × 2 B = {s_gb:.0f} GB.\n"
        "* $\\frac{{2(n-1)}}{{n}} S/B$ = {factor:.2f} × {s_gb:.0f} GB / {gb_s:.0f} GB/s = **{t_ms:.0f} ms**; "
        "the latency term adds microseconds.",
        _p1, answer="t_ms", unit="ms",
        rel_tol=0.15,  # 15 %: rounding S and B; dropping 2(n-1)/n (0.57x) or fp32 gradients (2x) fails
        constants=(NVLINK4,),
    ),
    Problem(
        "9.p2",
        "The profiler of that job shows the gradient all-reduce at **{measured_ms:.0f} ms**. How many **times** "
        "slower is that than 9.p1's expectation?",
        "* {measured_ms:.0f} ms / {t_ms:.0f} ms = **{ratio:.1f}x**: not noise, the bytes took another path.\n"
        "* The same ring at {nic_gb_s:.0f} GB/s (the 400 Gb/s NIC): {factor:.2f} × {s_gb:.0f} GB / "
        "{nic_gb_s:.0f} GB/s = {nic_ms:.0f} ms, close to the measurement.\n"
        "* So suspect traffic that left NVLink; `NCCL_DEBUG=INFO` prints the transport each channel uses.",
        _p2, answer="ratio", unit="x",
        rel_tol=0.15,  # 15 %: rounding 9.p1's time and the profile's
        constants=(NVLINK4, NIC_400G),
    ),
    Problem(
        "9.p3",
        "Your profile: over {steps} recorded steps, rank 0's all-reduces total {fast:.2f} ms, the straggler "
        "rank 1's {slow:.2f} ms. Both move the same bytes. How many **ms per step** did rank 0 wait inside "
        "its all-reduce for rank 1?",
        "* The transfer is the same on both ranks, so the difference is waiting: {fast:.2f} − {slow:.2f} = "
        "{diff:.2f} ms.\n"
        "* Per step: {diff:.2f} / {steps} = **{wait_ms:.0f} ms**; compare it with the sleep in "
        "`profile_step.py`.\n"
        "* Long communication on a fast rank is exposed waiting, not a slow link.",
        _p3, answer="wait_ms", unit="ms",
        rel_tol=0.1,  # 10 %: rounding the printed totals; forgetting to divide by the steps (3x) fails
        run=("fast_comm_ms", "slow_comm_ms", "steps"),
        example={"fast_comm_ms": 126.0, "slow_comm_ms": 3.0, "steps": 3},
    ),
    Problem(
        "9.p4",
        "A {params_b:.0f}B model trains with DDP on {nodes} nodes of {per_node} H100s: one flat ring of {n} "
        "ranks whose slowest link is the 400 Gb/s NIC. Backward takes {bwd_ms:.0f} ms and the bf16 gradient "
        "all-reduce overlaps it as well as it can. At least how many **ms** of communication stay exposed per step?",
        "* All-reduce: {factor:.3f} × {s_gb:.0f} GB / {gb_s:.0f} GB/s = {comm_ms:.0f} ms (bandwidth term).\n"
        "* At most the backward's {bwd_ms:.0f} ms can hide it; the rest, **{exposed_ms:.0f} ms**, "
        "is exposed.\n"
        "* A profile shows all {comm_ms:.0f} ms as communication: only its exposed part costs step time.",
        _p4, answer="exposed_ms", unit="ms",
        rel_tol=0.15,  # 15 %: rounding the all-reduce; taking the whole all-reduce as exposed (2.2x) fails
        constants=(NIC_400G,),
    ),
    Problem(
        "9.p5",
        "Your stuck job had a {timeout_s:g} s collective timeout, and the whole launch took {wall_s:.1f} s. "
        "With gloo's default timeout instead, after how many **minutes** would the same hang end the launch?",
        "* The launch is start-up + timeout + teardown: here {wall_s:.1f} − {timeout_s:g} = {rest_s:.1f} s "
        "besides the timeout.\n"
        "* With the default {default_min:.0f} min ({default_s:.0f} s): {default_s:.0f} + {rest_s:.1f} = "
        "{end_s:.0f} s = **{end_min:.1f} min**, every rank idle.\n"
        "* Debug with a timeout of seconds.",
        _p5, answer="end_min", unit="min",
        rel_tol=0.05,  # 5 %: start-up and teardown are seconds of 30 min; NCCL's 10 min (0.33x) fails
        run=("timeout_s", "wall_s"),
        constants=(GLOO_TIMEOUT,),
        example={"timeout_s": 12, "wall_s": 14.5},
    ),
)
