"""Chapter 2 all-reduce lab: from-scratch algorithms, the Exercise 2.1 checker, timing helpers.

Multi-process tests run the checker program, which compares every element of
each algorithm's result with a single-process reference sum and with
``dist.all_reduce`` for 12 shapes/dtypes (exact: the inputs are small integers).
"""
from __future__ import annotations

import os

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

import disttutor.scratch.allreduce as scratch  # noqa: E402
from disttutor.checks.allreduce import (CASES, CheckConfig, check_all_reduce, check_ring_allreduce,  # noqa: E402
                                        first_problem, make_input, reference_sum)
from disttutor.programs.allreduce_bench import BenchConfig  # noqa: E402
from disttutor.viz import allreduce as viz  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOLUTION = os.path.join(ROOT, "solutions", "ex2_1_ring_allreduce.py")
CHAPTER = os.path.join(ROOT, "chapters", "src", "02_process_groups_collectives.py")


def notebook_stub() -> str:
    """The exercise cell exactly as the chapter ships it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_notebooks", os.path.join(ROOT, "scripts", "build_notebooks.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cells = [c["source"] for c in mod.parse(open(CHAPTER).read()) if c["type"] == "code"]
    (stub,) = [c for c in cells if c.startswith("def ring_all_reduce")]
    return stub


# ---- pure functions (no processes) ----

def test_first_problem_names_rank_chunk_and_values():
    want = torch.arange(12.0)
    got = want.clone()
    got[5] = 0.0
    msg = first_problem(got, want, world=3)
    assert msg == ("chunk 1 (elements 4..7) of a float32 tensor of shape (12,): expected 5.0, got 0.0 at element 5")
    got[4] = -1.0
    assert "(2 of 4 elements of this chunk wrong)" in first_problem(got, want, world=3)
    assert first_problem(want.clone(), want, world=3) is None


@pytest.mark.parametrize("shape,dtype", CASES)
def test_reference_sum_is_exact_in_every_dtype(shape, dtype):
    # exact in low precision too: that is what lets the checker compare with == and no tolerance
    for world in (2, 3, 4):
        exact = sum(make_input(shape, dtype, r, 0).double() for r in range(world))
        assert torch.equal(reference_sum(shape, dtype, world, 0).double(), exact)


def test_configs_reject_bad_input():
    with pytest.raises(ValueError, match="unknown algorithm"):
        BenchConfig(algos=("ring", "butterfly"))
    with pytest.raises(ValueError, match=">= 4"):
        BenchConfig(sizes=(2,))
    with pytest.raises(ValueError, match="iters"):
        BenchConfig(iters=0)
    with pytest.raises(ValueError, match="must be a Python name"):
        CheckConfig(source="x.py", name=("ring all reduce",))
    with pytest.raises(ValueError, match="world_sizes"):
        check_ring_allreduce(SOLUTION, world_sizes=(0,))
    with pytest.raises(ValueError, match="nprocs"):
        viz.sweep(nprocs=(1,))


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_ring_schedule_ends_with_every_chunk_complete(n):
    steps = viz.ring_schedule(n)
    assert len(steps) == 1 + 2 * (n - 1)
    assert all(len(st["sends"]) == n for st in steps[1:])               # every rank sends once per step
    after_rs = steps[n - 1]["count"]
    assert all(after_rs[r][(r + 1) % n] == n for r in range(n))          # rank r owns chunk r+1 after reduce-scatter
    assert all(c == n for row in steps[-1]["count"] for c in row)


def test_alpha_beta_fit_recovers_the_model():
    sizes = np.array([4e3, 6.4e4, 1e6, 1.6e7])
    t = 2e-4 + sizes / 1.5e9
    m = viz.fit_alpha_beta(sizes, t)
    # exact data: only floating-point rounding separates fit and truth
    assert m.alpha == pytest.approx(2e-4, rel=1e-6) and m.bandwidth == pytest.approx(1.5e9, rel=1e-6)
    assert np.allclose(m.predict(sizes), t, rtol=1e-6)
    flat = viz.fit_alpha_beta([1e3, 1e4], [1e-3, 1e-3])                  # pure latency
    assert flat.alpha == pytest.approx(1e-3) and flat.per_byte == pytest.approx(0.0, abs=1e-18)
    assert flat.bandwidth > 1e18  # no slope to speak of: B beyond any link
    with pytest.raises(ValueError):
        viz.fit_alpha_beta([1e3], [1e-3])


def test_bus_bandwidth_and_sizes():
    assert viz.bus_bandwidth(8e6, 1e-2, 4) == pytest.approx(8e8 * 2 * 3 / 4)
    assert viz.bus_bandwidth(8e6, 1e-2, 2) == pytest.approx(8e8)         # n=2: busbw == algbw
    sizes = viz.default_sizes(4 << 10, 1 << 20, 3)
    assert sizes[0] == 4 << 10 and sizes[-1] == 1 << 20 and all(s % 4 == 0 for s in sizes)


def test_plots_from_plain_data():
    data = [{"algo": a, "nproc": 2, "bytes": b, "time_s": 1e-4 + b / 1e9,
             "busbw": viz.bus_bandwidth(b, 1e-4 + b / 1e9, 2)} for a in ("builtin", "ring") for b in (4096, 65536, 1 << 20)]
    fig = viz.plot_sweep(data)
    assert len(fig.axes) == 2 and fig.axes[0].get_yscale() == "log"
    assert set(viz.fits(data)) == {("builtin", 2), ("ring", 2)}
    assert len(viz.plot_ring_schedule(3).axes) == 5


# ---- real ranks ----

@pytest.mark.slow
@pytest.mark.timeout(240)
def test_reference_algorithms_equal_dist_all_reduce(no_leftovers):
    # 4 ranks here (a full tree; uneven ring chunks come from the (10,), (17,), (1,) cases); the
    # chapter's nbval run checks 3 and 4, and the ring's code is also run on 2, 3, 4 via the solution.
    res = check_all_reduce(scratch.__file__, ["naive_all_reduce", "tree_all_reduce", "ring_all_reduce"],
                           world_sizes=(4,), timeout=120)
    assert res.passed, str(res)
    assert len(res.details) == 4
    assert all(d["cases"] == 3 * (len(CASES) + 1) for d in res.details)  # every case, every algorithm, every rank


# The solution passing on 2, 3 and 4 ranks (the learner's default): tests/test_exercises.py::test_solution_passes.


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_untouched_stub_fails_with_a_helpful_message(no_leftovers):
    res = check_ring_allreduce(notebook_stub(), timeout=300)
    assert not res.passed
    text = str(res)
    assert "Exercise 2.1: not passed yet" in text and "still a stub" in text
    assert "implement the ring all-reduce" in text
    assert len(res.problems) == 1  # stops at the first world size, says it once (not once per rank)


BUGGY = '''
def ring_all_reduce(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.view(-1).tensor_split(n)
    for step in range(n - 1):  # reduce-scatter only: the all-gather is missing
        s, r = (rank - step) % n, (rank - step - 1) % n
        buf = torch.empty_like(chunks[r])
        reqs = [dist.isend(chunks[s], (rank + 1) % n), dist.irecv(buf, (rank - 1) % n)]
        for q in reqs:
            q.wait()
        chunks[r].add_(buf)
    return tensor
'''

HANGS = '''
def ring_all_reduce(tensor):
    n = dist.get_world_size()
    buf = torch.empty_like(tensor)
    dist.recv(buf, (dist.get_rank() - 1) % n)   # everybody receives first: nobody sends
    dist.send(tensor, (dist.get_rank() + 1) % n)
    return tensor
'''


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_wrong_ring_is_reported_by_rank_and_chunk(no_leftovers):
    res = check_ring_allreduce(BUGGY, world_sizes=(3,), timeout=300)
    assert not res.passed
    # First case: 12 float32 elements on 3 ranks -> chunks of 4. After the reduce-scatter only,
    # rank 2 holds the full sum of chunk 0 but rank 2's chunk 1 (elements 4..7) is partial.
    x = [make_input((12,), "float32", r, 0) for r in range(3)]
    want = float(sum(x)[4])
    got = float(x[2][4] + x[1][4])  # rank 2's chunk 1 after 1 step: itself + its left neighbour
    expected = (f"with 3 ranks, rank 2: chunk 1 (elements 4..7) of a float32 tensor of shape (12,): "
                f"expected {want}, got {got} at element 4")
    assert any(p.startswith(expected) for p in res.problems), res.problems


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_mismatched_send_recv_fails_instead_of_hanging(no_leftovers):
    res = check_ring_allreduce(HANGS, world_sizes=(2,), collective_timeout=3, timeout=60)
    assert not res.passed
    assert any("waited more than 3s" in p for p in res.problems)
    assert res.problems[-1].startswith("hint: a rank waited for a message nobody sent")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_widget_callback_measures_and_plots(no_leftovers):
    data, fig = viz.measure_and_plot(["builtin", "naive", "tree", "ring"], [2], 4, 16, points=2, iters=1,
                                     stream=False)
    assert {(r["algo"], r["bytes"]) for r in data} == {(a, b) for a in viz.ALGOS for b in (4096, 16384)}
    for r in data:
        assert r["time_s"] > 0 and r["busbw"] == pytest.approx(viz.bus_bandwidth(r["bytes"], r["time_s"], 2))
    assert len(fig.axes) == 2
    w = viz.widget()  # builds without a kernel; its button calls measure_and_plot
    assert w.children[-2].description == "measure"


def _solution_text() -> str:
    return open(SOLUTION).read()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_strided_case_and_missing_helper_are_named(no_leftovers):
    # 1) .view(-1) on every input: right for contiguous tensors, crashes on the transposed one
    view_only = _solution_text().replace(
        "flat = tensor.view(-1) if tensor.is_contiguous() else tensor.reshape(-1).clone()", "flat = tensor.view(-1)")
    res = check_ring_allreduce(view_only, world_sizes=(2,), timeout=300)
    assert not res.passed
    assert "a transposed, non-contiguous view (tensor.t() of a (6, 4) tensor) made the function fail" in str(res)
    # 2) a helper from another cell: only the exercise's function travels to the ranks
    helper_elsewhere = '''
def ring_all_reduce(tensor):
    return _my_ring(tensor)
'''
    res = check_ring_allreduce(helper_elsewhere, world_sizes=(2,), timeout=300)
    assert not res.passed
    assert "name '_my_ring' is not defined -- only the code of `ring_all_reduce` is sent to the ranks" in str(res)
