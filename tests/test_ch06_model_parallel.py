"""Chapter 6, plain model parallelism: an MLP split by layers over 3 ranks with point-to-point.

One launch checks everything: each rank's slice after training equals the same slice of a
single-process model trained on the same batch, the last rank's losses equal the reference
losses, and the timelines show what naive model parallelism does (no two ranks compute at once).
"""
from __future__ import annotations

import pytest
import torch

import disttutor
from disttutor.programs.model_parallel import MPConfig, full_model, reference, stage_of
from disttutor.pipeline.timeline import compute_overlap_s

NPROC = 3
CFG = MPConfig(steps=4, warmup=1, batch=32, width=16, d_out=4, layers_per_stage=1, lr=0.05, report_params=True)


@pytest.fixture(scope="module")
def run():
    args = {k.replace("_", "-"): v for k, v in CFG.__dict__.items()}
    return disttutor.launch("model_parallel", nproc=NPROC, args=args, stream=False, timeout=120,
                            collective_timeout=30)


@pytest.mark.timeout(180)
def test_split_training_matches_single_process(run, no_leftovers):
    assert run.ok, run.summary()
    model, losses = reference(CFG, NPROC)
    for r in range(NPROC):
        want = torch.cat([p.detach().reshape(-1) for p in stage_of(model, r, NPROC, CFG.layers_per_stage).parameters()])
        got = torch.tensor(run.results[r]["params"])
        assert got.shape == want.shape, f"rank {r} holds the wrong slice"
        # Same float32 ops in the same order on each slice; only the send/recv copies differ,
        # and they are exact, so the error is a few ulps at most.
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=f"rank {r} stage differs from reference")
        assert not torch.equal(got, torch.cat([p.detach().reshape(-1) for p in stage_of(
            full_model(CFG, NPROC), r, NPROC, CFG.layers_per_stage).parameters()])), f"rank {r} never updated"
    # only the last stage computes the loss; same tolerance reasoning as above
    assert run.results[-1]["losses"] == pytest.approx(losses, rel=1e-5)
    assert losses[-1] < losses[0]
    assert all("losses" in run.results[r] and run.results[r]["losses"] == [] for r in range(NPROC - 1))


def test_timelines_show_naive_model_parallel_idles(run):
    assert run.ok, run.summary()
    timed = CFG.steps - CFG.warmup
    for r, res in enumerate(run.results):
        kinds = [k for k, _, _ in res["timeline"]]
        assert kinds.count("fwd") == timed and kinds.count("bwd") == timed
        # first stage never receives activations; last never receives gradients: both wait the other way
        assert kinds.count("recv") == (timed if r in (0, NPROC - 1) else 2 * timed)
        assert 0.0 < res["idle_frac"] < 1.0 and res["wait_s"] > 0.0
    # Each stage waits for the previous one's output, so compute spans of different ranks never
    # overlap. Timestamps come from the system-wide monotonic clock, rounded to 1 us in the report:
    # the 1e-5 s slack covers that rounding, nothing else.
    assert compute_overlap_s(run.results) < 1e-5
    window = max(r["t0"] + r["wall_s"] for r in run.results) - min(r["t0"] for r in run.results)
    assert sum(res["compute_s"] for res in run.results) <= window + 1e-5  # hence mean idle >= 1 - 1/NPROC


def test_config_is_validated():
    with pytest.raises(ValueError, match="warmup"):
        MPConfig(steps=2, warmup=2)
    with pytest.raises(ValueError, match="width"):
        MPConfig(width=0)


def test_reference_is_deterministic_single_process_training():
    # No launch: the reference the notebook and the test above compare against.
    cfg = MPConfig(steps=3, warmup=1, batch=8, width=8, d_out=2, layers_per_stage=2, lr=0.05)
    model, losses = reference(cfg, 2)
    assert len(losses) == cfg.steps and losses[-1] < losses[0]
    again, losses2 = reference(cfg, 2)
    assert losses2 == losses  # same seed, same data, same ops: bit-identical
    flat = lambda m: torch.cat([p.detach().reshape(-1) for p in m.parameters()])  # noqa: E731
    assert torch.equal(flat(model), flat(again))
    assert not torch.equal(flat(model), flat(full_model(cfg, 2)))  # it did train
    assert sum(isinstance(m, torch.nn.Linear) for m in model) == 2 * cfg.layers_per_stage
