"""Chapter 12: tensor, sequence, context and expert parallelism against one process.

The notebook runs each part on 2 ranks (nbval checks it); here one launch on 4 ranks checks every
part where the split is deeper (a ring of 4 steps, one expert per rank, hidden units split in 4),
the exercises' checkers meet realistic wrong answers.
Timeouts: a 4-rank launch takes ~20 s idle and ~60 s at load average 15 on the shared 2-core box.
"""
from __future__ import annotations

import os

import pytest
import torch

import disttutor
from disttutor.checks import check
from disttutor.checks.tensor_parallel import _cases
from disttutor.checks.tolerances import SPLIT_TENSOR_ATOL
from disttutor.programs.tensor_sequence_expert import SplitDimsConfig
from disttutor.tensor_parallel import counting
from disttutor.tensor_parallel.ring_attention import block_attention, merge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 400
LAUNCH = dict(stream=False, timeout=300)


def test_config_rejects_bad_values():
    for kw, match in (({"part": "pp"}, "part"), ({"seq": 0}, "seq"), ({"dropout": 1.0}, "dropout"),
                      ({"top_k": 5}, "top_k")):
        with pytest.raises(ValueError, match=match):
            SplitDimsConfig(**kw)


def test_recorder_counts_and_always_restores():
    import torch.distributed as dist

    real = dist.all_reduce
    with pytest.raises(ValueError, match="process group has not been initialized"):
        with counting.recording() as rec:
            dist.all_reduce(torch.zeros(3))   # no process group: the real call raises ...
    assert dist.all_reduce is real            # ... and the real function is back
    assert rec.calls == [("all_reduce", 12)]  # the call was recorded before it ran
    assert rec.ring_bytes(2) == 12.0          # 2(n-1)/n x 12 bytes on 2 ranks


def test_merge_is_exact_and_the_cases_accept_it():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    full, lse = block_attention(q, k, v, causal=False)
    a, la = block_attention(q, k[:, :, :3], v[:, :, :3], causal=False)
    b, lb = block_attention(q, k[:, :, 3:], v[:, :, 3:], causal=False)
    out, l = merge(a, la, b, lb)
    # fp32, another summation order: a few ulps (see SPLIT_TENSOR_ATOL)
    assert (out - full).abs().max() <= SPLIT_TENSOR_ATOL and (l - lse).abs().max() <= SPLIT_TENSOR_ATOL
    assert _cases(merge) is None


def test_merge_cases_reject_the_usual_mistakes():
    def average(out_a, lse_a, out_b, lse_b):
        return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)

    def naive(out_a, lse_a, out_b, lse_b):
        ea, eb = torch.exp(lse_a)[..., None], torch.exp(lse_b)[..., None]
        return (ea * out_a + eb * out_b) / (ea + eb), torch.log(torch.exp(lse_a) + torch.exp(lse_b))

    def max_lse(out_a, lse_a, out_b, lse_b):
        out, _ = merge(out_a, lse_a, out_b, lse_b)
        return out, torch.maximum(lse_a, lse_b)

    def nan_when_empty(out_a, lse_a, out_b, lse_b):
        lse = torch.logaddexp(lse_a, lse_b)
        return torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[..., None] * out_b, lse

    assert "plain average" in _cases(average)
    assert "overflows" in _cases(naive)
    assert "not the log-sum-exp" in _cases(max_lse)
    assert "not nan" in _cases(nan_when_empty)


@pytest.fixture(scope="module")
def four_ranks():
    run = disttutor.launch("tensor_sequence_expert", nproc=4, **LAUNCH)
    assert run.ok, run.summary()
    return run.results


@pytest.mark.timeout(TIMEOUT)
def test_every_part_equals_one_process_on_four_ranks(four_ranks, no_leftovers):
    for r in four_ranks:
        diffs = [v["diff"] for v in r["tp"].values()] + [r["sp"]["tp"]["diff"], r["sp"]["sp"]["diff"],
                                                         r["cp"]["diff"], r["ep"]["diff"]]
        assert max(diffs) <= SPLIT_TENSOR_ATOL, diffs  # fp32, other summation orders (tolerances.py)


@pytest.mark.timeout(TIMEOUT)
def test_collectives_per_step_on_four_ranks(four_ranks, no_leftovers):
    for r in four_ranks:
        assert r["tp"]["scratch_mlp"]["forward"] == r["tp"]["scratch_mlp"]["backward"] == {"all_reduce": 1}
        assert r["tp"]["dtensor_attention"]["backward"] == {"all_reduce": 3}  # one per ColwiseParallel
        assert r["sp"]["sp"]["forward"] == {"all_gather_single": 1, "reduce_scatter_single": 1}
        assert r["cp"]["calls"] == {"isend": 3, "irecv": 3}                  # n - 1 ring steps
        assert r["ep"]["calls"] == {"all_to_all_single": 3}
        assert len(r["ep"]["experts_here"]) == 1 and sum(r["ep"]["tokens_per_expert"]) == 12 * 2
    # SP's activations shrink with t: on 4 ranks it saves more of TP's memory than on 2 (notebook: 21%)
    sp, tp = four_ranks[0]["sp"]["sp"]["saved_bytes"], four_ranks[0]["sp"]["tp"]["saved_bytes"]
    assert sp < 0.75 * tp, (sp, tp)


@pytest.mark.timeout(TIMEOUT)
def test_sizes_that_do_not_split_fail_in_one_line(no_leftovers):
    run = disttutor.launch("tensor_sequence_expert", nproc=3, check=False, **LAUNCH)
    assert not run.ok
    assert any("does not split over 3 ranks" in (r.error or "") for r in run.ranks), run.summary()
    run = disttutor.launch("tensor_sequence_expert", nproc=2, args={"part": "placements"}, check=False, **LAUNCH)
    assert any("run it on 4 ranks" in (r.error or "") for r in run.ranks), run.summary()


@pytest.mark.timeout(TIMEOUT)
def test_12_1_rejects_a_backward_that_communicates_or_splits_the_bias(no_leftovers):
    sol = open(os.path.join(ROOT, "solutions", "ex12_1_row_parallel.py")).read()
    res = check("12.1", sol.replace("grad_x_shard = grad_y @ w_shard ",
                                    "dist.all_reduce(grad_y); grad_x_shard = grad_y @ w_shard "))
    assert not res.passed and "no communication" in str(res)
    res = check("12.1", sol.replace("grad_y.sum(0)", "grad_y.sum(0) / dist.get_world_size()"))
    assert not res.passed and "grad_bias" in str(res) and "not split" in str(res)
    res = check("12.1", sol.replace("grad_y.T @ x_shard", "x_shard.T @ grad_y"))
    assert not res.passed and "grad_w_shard has shape [4, 6], expected [6, 4]" in str(res)


def test_placement_pictures_from_hand_made_reports():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from disttutor.viz import placements as viz

    assert viz.holders([[0, 1], [1, 2]], 3) == [(0,), (0, 1), (1,)]
    rows = lambda *r: [i for k in r for i in range(8 * k, 8 * k + 8)]  # the elements of rows r
    coords = [(0, 0), (0, 1), (1, 0), (1, 1)]
    held = {c: rows(*pair) for c, pair in zip(coords, ((0, 1), (4, 5), (2, 3), (6, 7)))}
    reports = [{"placements": {"coordinate": list(c), "two_dim": {
        "(S(0), S(0))": {"held": rows(2 * i, 2 * i + 1)},
        "FSDP2 over TP": {"held": held[c], "placements": "(_StridedShard(dim=0, sf=2), Shard(dim=0))"}}}}
        for i, c in enumerate(coords)]
    fig = viz.two_dim_figure(reports)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[1] == "(S(0), S(0))" and titles[2].startswith("FSDP2 over TP:\n_StridedShard(dim=0, sf=2),")
    labels = [t.get_text() for t in fig.axes[2].texts]
    assert labels[:8] == ["0"] * 8 and labels[16:24] == ["2"] * 8  # row 2 is rank 2's (dp=1, tp=0), not rank 1's
    plt.close(fig)
    one = [{"placements": {"one_dim": {"R": {"held": list(range(16))},
                                       "Partial()": {"local": [r + 1.0] * 16, "sum": [3.0] * 16}}}} for r in range(2)]
    fig = viz.one_dim_figure(one)
    assert [t.get_text() for t in fig.axes[0].texts] == ["all"] * 16
    assert any(ax.get_title().startswith("= full_tensor()") for ax in fig.axes)
    plt.close(fig)


def test_the_plain_tp_and_ring_bytes_claims_catch_a_wrong_run():
    """The notebook's proof cells: the learner's parallelize_module MLP and the derived ring bytes of a block."""
    from disttutor.checks.claims import ch12

    assert "on all 2 ranks" in ch12.check_plain_tp([2e-7, 3e-7], SPLIT_TENSOR_ATOL)
    with pytest.raises(AssertionError, match="differs from the unsplit copy"):
        ch12.check_plain_tp([2e-7, 0.5], SPLIT_TENSOR_ATOL)  # e.g. a bias added on every rank
    s, b, d, t = 16, 2, 16, 2   # one block: 2 all-reduces of [s*b, d] fp32, each 2(t-1)/t of it per rank
    SP = {"tp": {"ring_bytes": 4096.0}, "sp": {"ring_bytes": 4096.0 + 192}}
    assert "TP 4,096, SP 4,096 + 192" in ch12.check_block_ring_bytes(SP, s, b, d, t)
    twice = {"tp": {"ring_bytes": 8192.0}, "sp": {"ring_bytes": 4288.0}}  # a gradient all-reduced twice
    with pytest.raises(AssertionError, match="ring bytes"):
        ch12.check_block_ring_bytes(twice, s, b, d, t)
    four = {"tp": {"ring_bytes": 6144.0}, "sp": {"ring_bytes": 6144.0 + 288}}  # t = 4: 3/4 where 2 ranks send 1/2
    assert "TP 6,144, SP 6,144 + 288" in ch12.check_block_ring_bytes(four, s, b, d, 4)
