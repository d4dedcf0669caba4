"""Chapter 13's pen-and-paper problems: statements, answers on demand, and a checker.

Introduced in chapter 13. Each answer is *computed* by the same functions the chapter uses
(:mod:`~disttutor.scale.costmodel`, :mod:`~disttutor.scale.planner`, :mod:`~disttutor.scale.failures`),
never typed in. ``answer(name)`` prints the worked answer; ``check(name, value)`` says whether the
learner's number is within the problem's tolerance (pen-and-paper rounding, stated per problem).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from disttutor.scale import costmodel, failures, hardware, planner, shapes

H100 = hardware.H100
# The hide rules' problems ask for the A100, whose numbers the chapter does not print (it prints the H100's).
A100 = hardware.A100


@dataclass(frozen=True)
class Problem:
    question: str
    unit: str
    solve: Callable[[], float]
    working: Callable[[], str]
    rel_tol: float | None = None  # None: answer on demand only, no checker


def _busbw() -> float:
    t = 4.0e-3
    return costmodel.busbw("all_reduce", 2**30, t, 8) / 1e9


def _llama_mtbf_h() -> float:
    return failures.mtbf_job(54 * 24 * failures.HOUR, 419) / failures.HOUR


def _half_mtbf_h() -> float:
    """The job MTBF on 8,192 GPUs at Llama 3's per-GPU rate (the chapter prints 16,384 and others)."""
    per_gpu = failures.mtbf_per_gpu(_llama_mtbf_h() * failures.HOUR, 16384)
    return failures.mtbf_for(8192, per_gpu) / failures.HOUR


def _yd_min() -> float:
    return failures.young_daly(60.0, _llama_mtbf_h() * failures.HOUR) / 60


PROBLEMS: dict[str, Problem] = {
    "busbw": Problem(
        "nccl-tests reports an all-reduce of 1 GiB (2^30 bytes) on 8 GPUs taking 4.0 ms. What bus "
        "bandwidth does it print, in GB/s (10^9 bytes/s)?", "GB/s", _busbw,
        lambda: f"algbw = S/t = 2^30 B / 4.0 ms = {2**30 / 4e-3 / 1e9:.1f} GB/s; busbw = algbw * 2(n-1)/n = "
                f"algbw * 1.75 = {_busbw():.0f} GB/s", rel_tol=0.03),
    "fsdp_tokens": Problem(
        "On the A100 preset (312 TFLOP/s bf16, 25 GB/s per GPU between nodes), how many tokens must each "
        "data-parallel replica process per step for FSDP's all-gathers and reduce-scatter to hide under "
        "compute?", "tokens", lambda: planner.rules(shapes.LLAMA3_70B, A100)["fsdp_min_tokens_per_replica"],
        lambda: "compute 6 P T / C; traffic: 2 all-gathers + 1 reduce-scatter of 2P bytes = 6P / W. "
                f"6 P T / C > 6 P / W  =>  T > C / W = 312e12 / 25e9 = "
                f"{planner.rules(shapes.LLAMA3_70B, A100)['fsdp_min_tokens_per_replica']:,.0f} tokens (the H100's "
                f"{planner.rules(shapes.LLAMA3_70B, H100)['fsdp_min_tokens_per_replica']:,.0f}: more compute per "
                "byte of network needs more tokens)", rel_tol=0.05),
    "tp_degree": Problem(
        "Llama 3 70B has FFN width F = 28,672. Over NVLink 3 (300 GB/s one way) on A100s, up to what tensor-"
        "parallel degree does the MLP stay compute-bound?", "way",
        lambda: planner.rules(shapes.LLAMA3_70B, A100)["tp_max_degree"],
        lambda: "per token and layer: compute ~ 2 h F / y FLOPs per GPU at C, traffic ~ 2h bytes at W: "
                f"compute-bound while F / y > C / W, i.e. y < F W / C = 28672 * 300e9 / 312e12 = "
                f"{planner.rules(shapes.LLAMA3_70B, A100)['tp_max_degree']:.1f} (the H100's faster compute "
                f"lowers it to {planner.rules(shapes.LLAMA3_70B, H100)['tp_max_degree']:.1f})", rel_tol=0.10),
    "mtbf": Problem(
        "Llama 3's 405B run saw 419 unexpected interruptions in a 54-day snapshot on 16,384 GPUs. At the same "
        "failure rate per GPU, what is the mean time between failures of a job on 8,192 GPUs, in hours?", "h",
        _half_mtbf_h,
        lambda: f"16,384 GPUs: 54 days * 24 h / 419 = {_llama_mtbf_h():.2f} h; per GPU: {_llama_mtbf_h():.2f} h * "
                f"16,384 = {_llama_mtbf_h() * 16384:,.0f} h; on 8,192 GPUs: {_llama_mtbf_h() * 16384:,.0f} h / 8,192 "
                f"= {_half_mtbf_h():.2f} h (half the GPUs, twice the time between failures)", rel_tol=0.03),
    "young_daly": Problem(
        "With the 16,384-GPU job's MTBF and a checkpoint that stalls training for 60 s, how many minutes apart should "
        "checkpoints be (Young's first-order optimum)?", "min", _yd_min,
        lambda: f"tau = sqrt(2 delta M) = sqrt(2 * 60 s * {_llama_mtbf_h() * 3600:,.0f} s) = {_yd_min() * 60:,.0f} s = "
                f"{_yd_min():.1f} min; useful fraction 1 - delta/tau - tau/(2M) = "
                f"{failures.efficiency(_yd_min() * 60, 60, _llama_mtbf_h() * 3600):.1%} (before restart costs)",
        rel_tol=0.05),
    "bubble": Problem(
        "A pipeline of 16 stages with interleaving v = 4 runs m = 32 micro-batches per step. What fraction of "
        "the compute time is the bubble?", "", lambda: (16 - 1) / (4 * 32),
        lambda: f"(p - 1) / (v m) = 15 / 128 = {15 / 128:.1%}; with m = 16 (twice the data-parallel width at a "
                f"fixed global batch) it doubles to {15 / 64:.1%}"),
    "state_405b": Problem(
        "Mixed-precision AdamW keeps 16 bytes per parameter. How many GB of weights + gradients + optimizer "
        "state does a GPU hold for Llama 3 405B with TP 8 x PP 16 and the optimizer state sharded over DP 64?",
        "GB", lambda: sum(v for k, v in planner.memory(shapes.LLAMA3_405B, planner.Layout(dp=64, tp=8, pp=16, zero=1),
                                                        8192, 2048).items() if k in ("weights", "gradients", "optimizer")) / 1e9,
        lambda: (lambda P: f"P = {P / 1e9:.1f}e9 from the shape; per model shard P/128: weights 2 B "
                           f"({2 * P / 128 / 1e9:.1f} GB) + gradients 2 B ({2 * P / 128 / 1e9:.1f} GB) + optimizer "
                           f"12 B / 64 ({12 * P / 128 / 64 / 1e9:.2f} GB) = "
                           f"{(4 + 12 / 64) * P / 128 / 1e9:.1f} GB; activations come on top")(shapes.LLAMA3_405B.params())),
    "dp_allreduce": Problem(
        "How long does a ring all-reduce of Llama 3 8B's bf16 gradients take over 128 GPUs at 50 GB/s bus "
        "bandwidth per GPU (ignore alpha)?", "s",
        lambda: costmodel.collective_time("all_reduce", 2 * shapes.LLAMA3_8B.params(), 128,
                                          costmodel.Link(0.0, 50e9)),
        lambda: f"2(n-1)/n * S / B = 2 * 127/128 * {2 * shapes.LLAMA3_8B.params() / 1e9:.1f} GB / 50 GB/s = "
                f"{2 * 127 / 128 * 2 * shapes.LLAMA3_8B.params() / 50e9:.2f} s: the factor tends to 2, so the time "
                "hardly grows with n -- but it must hide under the step's compute"),
}


def question(name: str) -> str:
    return PROBLEMS[_known(name)].question


def _known(name: str) -> str:
    if name not in PROBLEMS:
        raise ValueError(f"no problem {name!r}; problems are {list(PROBLEMS)}")
    return name


def answer(name: str) -> None:
    """Print the worked answer (call it when you have tried)."""
    p = PROBLEMS[_known(name)]
    print(f"{name}: {p.working()}")


def check(name: str, value: float) -> bool:
    """Is ``value`` within the problem's tolerance of the answer? Prints the verdict."""
    p = PROBLEMS[_known(name)]
    if p.rel_tol is None:
        raise ValueError(f"problem {name!r} has no checker: read its answer with answer({name!r})")
    if not isinstance(value, (int, float)):
        raise ValueError(f"give a number (in {p.unit}), got {value!r}")
    want = p.solve()
    ok = abs(value - want) <= p.rel_tol * abs(want)
    print(f"{name}: {value:g} {p.unit} -- " + ("right" if ok else "not yet") +
          f" (within {p.rel_tol:.0%} of the answer{'' if not ok else f', {want:,.4g} {p.unit}'})")
    return ok
