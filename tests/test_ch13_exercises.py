"""Chapter 13's exercises reject realistic wrong answers with a message naming the slip.

13.1 (the DDP step model) runs in this process: each wrong answer is the solution with one slip.
13.2 (the collective benchmark) runs on 2 gloo ranks under a scripted clock: each mistake is seen in
the recorded calls (which rank read the clock, a barrier before it, the warm-up), not in noisy times.
"""
from __future__ import annotations

import os

import pytest

from disttutor.checks import check
from disttutor.checks.cost_model import check_ddp_step, fitted, reference
from disttutor.checks.bench import structure_problem, value_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DDP_SOL = open(os.path.join(ROOT, "solutions", "ex13_1_ddp_step.py")).read()
BENCH_SOL = open(os.path.join(ROOT, "solutions", "ex13_2_bench_all_reduce.py")).read()


def slipped(src: str, old: str, new: str) -> str:
    assert old in src, old
    return src.replace(old, new)


@pytest.mark.parametrize("old, new, says", [
    ("2 * (n - 1) / n * nbytes", "n * nbytes", "each rank moves 2(n-1)/n S, not n S"),
    ("link.alpha + ", "", "the latency is missing"),
    ("return compute + comm", "return compute", "the all-reduce is treated as hidden"),
    ("6 * batch", "2 * batch", "backward is missing: it costs twice the forward"),
    ("link.alpha", "2 * (n - 1) * link.alpha", "already one whole call's fixed cost"),
    ("nbytes = 4 * sum", "nbytes = sum", "4 bytes per element"),
    ("6 * batch", "6 * n * batch", "batch is rows per rank"),
])
def test_13_1_names_each_slip(old, new, says):
    r = check("13.1", slipped(DDP_SOL, old, new))
    assert not r.passed and says in r.problems[0], r.problems
    assert "ms, the model gives" in r.problems[0]  # both numbers, in words


def test_13_1_agrees_with_the_course_model_and_checks_the_measured_run():
    # the solution equals local.ddp_step exactly where the checker compares them (relative 1e-6)
    mine, course = fitted("cpu", 2)
    assert reference(course, (16, 512, 4), 8, 2) > 0
    # with a "measured" run: the prediction for the chapter's MLP at 256 rows per rank on `course`
    dims = (16, 512, 512, 512, 4)
    pred = reference(course, dims, 256, 2)
    ok = check_ddp_step(DDP_SOL, machine=course, measured=pred / 0.8, dims=dims, batch=256)
    assert ok.passed, ok.problems
    slow = check_ddp_step(DDP_SOL, machine=course, measured=pred * 5, dims=dims, batch=256)
    assert not slow.passed and "a large term is missing" in slow.problems[0]
    fast = check_ddp_step(DDP_SOL, machine=course, measured=pred / 2, dims=dims, batch=256)
    assert not fast.passed and "the prediction exceeds the run" in fast.problems[0]


def test_13_1_the_machine_has_no_formula_to_call():
    r = check("13.1", slipped(DDP_SOL, "return compute + comm", "return compute + machine.t('all_reduce', nbytes)"))
    assert not r.passed and "AttributeError" in r.problems[0]


def test_13_2_structure_and_values_offline():
    # the recorded calls of one rank: x all-reduce of x, b barrier, t clock reading
    good = list("xx") + list("btxt") * 5
    assert structure_problem(good, 2, 5) is None
    assert "never read the clock" in structure_problem(list("xx") + list("bx") * 5, 2, 5)
    assert "warm-up" in structure_problem(list("btxt") * 7, 2, 5)
    assert "no barrier" in structure_problem(list("xx") + list("txt") * 5, 2, 5)
    assert "no barrier" in structure_problem(list("xx") + list("tbxt") * 5, 2, 5)  # barrier inside the timing
    assert "time each call on its own" in structure_problem(list("xx") + ["b", "t"] + ["x"] * 5 + ["t"], 2, 5)
    times = [[0.0010, 0.0012, 0.0090, 0.0011, 0.0010], [0.0020, 0.0015, 0.0010, 0.0025, 0.0018]]
    assert value_problem([0.002, 0.002], 0.002, times) is None
    assert "the mean, not the median" in value_problem([0.00336, 0.00336], 0.002, times)
    assert "the slowest rank's median" in value_problem([0.0018, 0.0018], 0.002, times)
    assert "each rank timed only itself" in value_problem([0.0011, 0.0018], 0.002, times)
    assert "milliseconds" in value_problem([2.0, 2.0], 0.002, times)


RANK0_ONLY = '''
def bench_all_reduce(x, warmup, iters):
    import statistics
    import time

    for _ in range(warmup):
        dist.all_reduce(x)
    own = []
    for _ in range(iters):
        dist.barrier()
        if dist.get_rank() == 0:
            t0 = time.perf_counter()
        dist.all_reduce(x)
        if dist.get_rank() == 0:
            own.append(time.perf_counter() - t0)
    return statistics.median(own) if own else None
'''


@pytest.mark.timeout(600)  # four checker jobs of ~10 s each; minutes on a loaded 2-core machine
def test_13_2_rejects_the_common_mistakes_on_ranks(no_leftovers):
    cases = [
        (RANK0_ONLY, "rank 1: this rank never read the clock"),
        (slipped(BENCH_SOL, "range(warmup)", "range(0)"), "the clock started after 0 of the 2 warm-up calls"),
        (slipped(BENCH_SOL, "        dist.barrier()  # every rank starts the call together\n", ""),
         "timed call 1 of 5: no barrier"),
        (slipped(BENCH_SOL, "statistics.median(slowest", "statistics.mean(slowest"),
         "the mean, not the median"),
    ]
    for src, says in cases:
        r = check("13.2", src)
        assert not r.passed and any(says in p for p in r.problems), (says, r.problems)


def test_roofline_figure_draws_each_roof_with_its_ridge():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from disttutor.viz.roofline import attainable, plot_roofline, ridge

    assert ridge(100.0, 10.0) == 10.0
    assert attainable(1.0, 100.0, 10.0) == 10.0 and attainable(50.0, 100.0, 10.0) == 100.0
    fig = plot_roofline([("a", 100.0, 10.0), ("b", 1e4, 20.0)], kernels=[("add", 1 / 12)])
    ax = fig.axes[0]
    roofs = [ln for ln in ax.lines if ln.get_linestyle() == "-"]
    assert len(roofs) == 2 and max(roofs[1].get_ydata()) == 1e4  # the flat top is the peak
    assert {t.get_text() for t in ax.texts} >= {"ridge 10 FLOP/B", "ridge 500 FLOP/B", " add"}
    plt.close(fig)
