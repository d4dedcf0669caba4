"""Chapter 3 (nn.DataParallel): traffic formulas vs real ranks, the corrected training code, the notebook."""
from __future__ import annotations

import json
import math
import os

import pytest
import torch
from torch import nn

import disttutor
from disttutor.data_parallel import dataparallel as dp
from disttutor.programs.dp_traffic import TrafficConfig
from disttutor.course.source import source_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH, D, HIDDEN, STEPS, LR = 12, 10, 100, 2, 0.1  # 12: divisible by 2 and 3 ranks


# --------------------------------------------------------------------------- pure formulas
def test_ring_formula_is_the_textbook_volume_when_chunks_are_equal():
    for n in (2, 3, 4, 8):
        numel = 24 * 1000  # divisible by every n above
        for r in range(n):
            b = dp.expected_bytes("ddp-ring", n, r, numel, BATCH * n, D, D)
            assert b["sent"] == b["recv"] == dp.textbook_ring_bytes(numel, n)  # exact: integer chunks
    # uneven chunks: off by at most one element per step (2(n-1) steps, 4 bytes each)
    assert abs(dp.expected_bytes("ddp-ring", 3, 0, 2110, 12, D, D)["sent"] - dp.textbook_ring_bytes(2110, 3)) <= 8


def test_dataparallel_formulas_grow_through_rank0_only():
    S, X, Y = 4 * 2110, 4 * 96 * D, 4 * 96 * D
    for n in (2, 3, 4):
        r0 = dp.expected_bytes("dp-copy", n, 0, 2110, 96, D, D)
        assert r0["sent"] == (n - 1) * S + (n - 1) * (X + Y) // n  # replicate + scatter x + scatter dy
        assert r0["recv"] == (n - 1) * S + (n - 1) * Y // n         # reduce grads + gather y
        chain = dp.expected_bytes("dp-chain", n, 0, 2110, 96, D, D)
        assert chain["sent"] - r0["sent"] == -(n - 2) * S          # the chain sends S once, not n-1 times
        last = dp.expected_bytes("dp-copy", n, n - 1, 2110, 96, D, D)
        assert last == {"sent": Y // n + S, "recv": (X + Y) // n + S}


def test_formula_and_config_errors_are_clear():
    with pytest.raises(ValueError, match="unknown pattern"):
        dp.expected_bytes("allreduce", 2, 0, 10, 4, 1, 1)
    with pytest.raises(ValueError, match="divisible"):
        dp.expected_bytes("dp-copy", 3, 0, 10, 4, 1, 1)
    with pytest.raises(ValueError, match="rank 3"):
        dp.expected_bytes("dp-copy", 3, 3, 10, 6, 1, 1)
    with pytest.raises(ValueError, match="labels"):
        dp.DPTrainConfig(labels="noise")
    with pytest.raises(ValueError, match="min_gpus"):
        dp.DPTrainConfig(min_gpus=1)
    with pytest.raises(ValueError, match="patterns"):
        TrafficConfig(patterns=("dp-copy", "ring"))
    with pytest.raises(ValueError, match="steps"):
        TrafficConfig(steps=0)
    with pytest.raises(ValueError, match="sizes"):
        TrafficConfig(sizes=(3, 2))


# --------------------------------------------------------------------------- real ranks
@pytest.mark.slow
@pytest.mark.timeout(200)
def test_traffic_program_matches_formulas_and_single_process(no_leftovers):
    # One job of 3 ranks measures N = 2 (subgroup 0..1) and N = 3 (all ranks).
    res = disttutor.launch("dp_traffic", nproc=3, args={"steps": STEPS, "batch": BATCH, "lr": LR, "sizes": [2, 3]},
                           timeout=150, stream=False)
    r0 = res.results[0]
    assert r0["n_params"] == 2110  # the article's 10 -> 100 -> 10 model
    assert sorted(r0["runs"]) == ["2", "3"] and sorted(res.results[2]["runs"]) == ["3"]
    ref_losses, ref_params = dp.full_batch_reference(STEPS, BATCH, D, HIDDEN, D, LR)
    for n in (2, 3):
        runs = [res.results[k]["runs"][str(n)] for k in range(n)]
        for pattern in dp.PATTERNS:
            for rank in range(n):
                assert {"sent": runs[rank][pattern]["sent"], "recv": runs[rank][pattern]["recv"]} == \
                    dp.expected_bytes(pattern, n, rank, 2110, BATCH, D, D), (n, pattern, rank)
            # Every pattern is the same training as one process on the whole batch.
            if pattern == "ddp-ring":  # equal shards: the full-batch loss is the mean of the shard losses
                losses = [sum(runs[k][pattern]["losses"][s] for k in range(n)) / n for s in range(STEPS)]
            else:
                losses = runs[0][pattern]["losses"]
            # float32, summed in another order (chunks, chain, ring): 1e-5 is ~100 ulps at loss ~2
            assert losses == pytest.approx(ref_losses, abs=1e-5), (n, pattern)
            assert runs[0][pattern]["params"]["sum"] == pytest.approx(ref_params["sum"],
                                                                      abs=1e-5 * ref_params["abs_sum"])
        # DataParallel sums replica gradients; the article's "average" is off by a factor n.
        for pattern in ("dp-copy", "dp-chain"):
            g = runs[0][pattern]
            assert g["sum_vs_full"] < 1e-5 * g["grad_norm"]   # float32 rounding of a sum of n chunks
            assert g["mean_vs_full"] > 1e-3 * g["grad_norm"]  # 100x the rounding bound: a real error, not noise
    # The plot helpers accept the run as it is (rows and figure).
    import matplotlib.pyplot as plt

    from disttutor.viz.data_parallel import plot_traffic, traffic_rows

    rows = traffic_rows(res)
    assert len(rows) == 3 * (2 + 3) and all(r["matches"] for r in rows)
    fig = plot_traffic(rows, param_bytes=4 * 2110)
    assert len(fig.axes) == 2 and fig.axes[0].get_lines()
    plt.close(fig)


# --------------------------------------------------------------------------- single process
def test_corrected_training_runs_on_cpu_and_learns():
    cfg = dp.DPTrainConfig(n_samples=320, epochs=3, lr=0.05)
    r = dp.train_dataparallel(cfg)
    assert all(b < a for a, b in zip(r.epoch_loss, r.epoch_loss[1:])), r.epoch_loss
    if torch.cuda.device_count() < 2:
        assert r.device_ids == [] and "single module" in r.path
    again = dp.train_dataparallel(cfg)
    assert again.epoch_loss == r.epoch_loss  # seeded: a rerun is bit-identical on CPU
    noise = dp.train_dataparallel(dp.DPTrainConfig(labels="random", n_samples=640, epochs=2))
    assert noise.epoch_loss[-1] > 0.97 * math.log(10)  # random labels: nothing below a uniform guess


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-accelerator path of DataParallel")
def test_dataparallel_without_gpus_just_calls_the_module():
    model = nn.Linear(4, 3)
    wrapped = nn.DataParallel(model)
    x = torch.randn(5, 4)
    assert wrapped.device_ids == [] and wrapped.module is model
    assert torch.equal(wrapped(x), model(x))


def test_source_lines_quotes_installed_torch_and_fails_loudly():
    lines = source_lines(nn.DataParallel.forward, "self.replicate(")
    assert len(lines) == 1 and "data_parallel.py:" in lines[0] and "self.replicate(" in lines[0]
    with pytest.raises(LookupError, match="not found"):
        source_lines(nn.DataParallel.forward, "this line does not exist")


# --------------------------------------------------------------------------- the notebook
def test_notebook_is_built_from_its_source_and_executed():
    import sys

    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import build_notebooks

    src = os.path.join(ROOT, "chapters", "src", "03_data_parallel.py")
    with open(os.path.join(ROOT, "chapters", "03_data_parallel.ipynb")) as f:
        nb = json.load(f)
    cells = build_notebooks.parse(open(src).read())
    assert [("".join(c["source"]), c["cell_type"]) for c in nb["cells"]] == \
        [(c["source"], c["type"]) for c in cells]
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c.get("execution_count") for c in code)  # every cell ran
    tagged = [c for c in code if "nbval-check-output" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) >= 5 and all(c["outputs"] for c in tagged)
    text = "".join("".join(o.get("text", "")) for c in code for o in c["outputs"])
    assert not [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    assert "SKIPPED: real DataParallel needs >= 2 GPUs" in text  # the CPU notebook says so plainly


# --------------------------------------------------------------------------- the chapter's claims
def test_wrap_then_move_reaches_the_wrapped_module():
    """The article's `DataParallel(model)` then `.cuda()`: the wrapper's move is the module's (no GPU needed:
    `.to(dtype)` runs the same `Module._apply` over the registered submodule as `.cuda()`)."""
    from disttutor.checks.claims.ch03 import check_cuda_after_wrap

    inner = nn.Linear(3, 2)
    wrapped = nn.DataParallel(inner).to(torch.float64)
    assert {p.dtype for p in inner.parameters()} == {torch.float64}
    assert "fine before any forward" in check_cuda_after_wrap(wrapped, inner, torch.float64, source_lines, nn.Module)
    stale = nn.Linear(3, 2)  # a module the wrapper does not hold, left in float32
    with pytest.raises(AssertionError, match="very module"):
        check_cuda_after_wrap(wrapped, stale, torch.float64, source_lines, nn.Module)
    with pytest.raises(AssertionError, match="should move"):
        check_cuda_after_wrap(nn.DataParallel(stale), stale, torch.float64, source_lines, nn.Module)


def test_claims_reject_an_average_and_an_uneven_ring():
    import importlib

    from disttutor.checks.claims.ch03 import check_dp_source, check_dp_traffic, check_same_training

    pa = importlib.import_module("torch.nn.parallel.parallel_apply").parallel_apply
    fn = importlib.import_module("torch.nn.parallel._functions")
    assert check_dp_source(source_lines, nn.DataParallel, pa, fn).startswith("✓")
    ok = [{"params match 1 process": True, "sum == full grad": True, "average == full grad": False}]
    assert check_same_training(ok, {(2, "dp-copy"): [1.0]}, [1.0]).startswith("✓")
    with pytest.raises(AssertionError, match="SUM"):  # the article's average taken as right
        check_same_training([dict(ok[0], **{"average == full grad": True})], {}, [])
    S = 4 * 2110
    runs = {n: [{p: {"sent": dp.expected_bytes(p, n, k, 2110, 96, D, D)["sent"]} for p in dp.PATTERNS}
                for k in range(n)] for n in (2, 3, 4)}
    through = {(n, p): sum(dp.expected_bytes(p, n, 0, 2110, 96, D, D).values()) for n in runs for p in dp.PATTERNS}
    others = {(n, p): sum(sum(dp.expected_bytes(p, n, k, 2110, 96, D, D).values()) for k in range(1, n)) / (n - 1)
              for n in runs for p in dp.PATTERNS}
    verdict = check_dp_traffic(through, others, runs, S, dp.textbook_ring_bytes)
    assert "N=4" in verdict
    # the busiest ring rank's bytes, as a multiple of S: 2(N-1)/N at N=4 (chunks round by under 4 bytes)
    assert "a ring rank sends at most 1.50S, under 2S" in verdict, verdict
    with pytest.raises(AssertionError, match="uneven"):
        check_dp_traffic(through, {**others, (4, "ddp-ring"): others[(4, "ddp-ring")] / 2}, runs, S,
                         dp.textbook_ring_bytes)
