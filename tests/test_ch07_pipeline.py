"""Chapter 7 on real ranks: torch.distributed.pipelining training equals single-process training,
torch runs the orders the simulator draws, the 2x2 DP x PP mesh equals the reference, and the two
traps end cleanly with a clear message."""
from __future__ import annotations

import pytest

from disttutor import launch
from disttutor.pipeline.schedules import PipeSpec, rank_orders, slots_from_events

# float32 weights; the pipeline sums m micro-batch gradients where the reference takes one full-batch
# gradient, so the last bits differ (seen: ~1e-8). 1e-5 is ~100 float32 ulps at weights of size ~1 over
# a few steps -- far below any real bug (a missing 1/m scale or a lost micro-batch changes weights by ~1e-2).
WEIGHT_TOL = 1e-5
LOSS_TOL = 1e-5

pytestmark = pytest.mark.slow


def _check_matches_reference(res, steps):
    assert res.ok, res.summary()
    for r in res.results:
        assert r["max_weight_diff"] < WEIGHT_TOL, r
    last = res.results[-1]
    assert len(last["losses"]) == steps
    for a, b in zip(last["losses"], last["ref_losses"]):
        assert abs(a - b) < LOSS_TOL
    assert last["losses"][-1] < last["losses"][0]  # it trains


def _measured_orders(res):
    slots = slots_from_events([r["events"] for r in res.results])
    return [[(s.kind, s.mb, s.stage) for s in sorted(slots, key=lambda s: s.start) if s.rank == rank]
            for rank in range(res.world_size)]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("schedule,nproc,m,v", [("gpipe", 2, 4, 1), ("1f1b", 4, 4, 1), ("interleaved", 2, 4, 2)])
def test_pipeline_matches_reference_and_simulator(schedule, nproc, m, v, no_leftovers):
    res = launch("pipeline", nproc=nproc, args={"schedule": schedule, "microbatches": m, "stages_per_rank": v,
                                                "steps": 2}, timeout=150, collective_timeout=60, stream=False)
    _check_matches_reference(res, steps=2)
    for r in res.results:  # every step's time, the last one also as step_s
        assert len(r["steps_s"]) == 2 and r["steps_s"][-1] == r["step_s"] and min(r["steps_s"]) > 0
    assert [r["stages"] for r in res.results] == [list(range(k, nproc * v, nproc)) for k in range(nproc)]
    # torch's schedule issues, rank by rank, exactly the actions the simulator draws (same order).
    expected = [[(a.kind, a.mb, a.stage) for a in acts] for acts in rank_orders(PipeSpec(schedule, nproc, m, v))]
    assert _measured_orders(res) == expected


@pytest.mark.timeout(200)
def test_hybrid_dp_pp_matches_reference(no_leftovers):
    res = launch("pipeline_hybrid", nproc=4, args={"schedule": "1f1b", "microbatches": 2, "steps": 2},
                 timeout=150, collective_timeout=60, stream=False)
    assert res.ok, res.summary()
    assert [(r["dp_rank"], r["pp_rank"]) for r in res.results] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in res.results:
        assert r["max_weight_diff"] < WEIGHT_TOL, r
    # each replica's last stage saw half the batch: the mean of the two half-batch losses is the full-batch loss
    halves = [res.results[1]["losses"], res.results[3]["losses"]]
    for step, ref in enumerate(res.results[1]["ref_losses"]):
        assert abs((halves[0][step] + halves[1][step]) / 2 - ref) < LOSS_TOL
    assert halves[0] != halves[1]  # the replicas really had different data


@pytest.mark.timeout(120)
def test_trap_fewer_microbatches_than_stages(no_leftovers):
    res = launch("pipeline", nproc=2, args={"schedule": "1f1b", "microbatches": 1}, timeout=90,
                 collective_timeout=10, stream=False, check=False)
    assert not res.ok and res.outcome == "finished"
    for r in res.ranks:
        assert "Number of microbatches (1) must be greater than or equal to the number of stages (2)" in r.error


@pytest.mark.timeout(120)
def test_trap_mismatched_stage_shapes_ends_cleanly(no_leftovers):
    res = launch("pipeline", nproc=2, args={"schedule": "1f1b", "microbatches": 2, "bad_shape": True},
                 timeout=90, collective_timeout=10, stream=False, check=False)
    assert not res.ok and res.outcome == "finished"  # ended on its own, not by the wall timeout
    assert res.ranks[1].status == "error" and "shapes cannot be multiplied" in res.ranks[1].error
    assert res.ranks[0].status in ("error", "stopped")


def test_config_errors_are_clear():
    from disttutor.programs.pipeline import PipeConfig

    with pytest.raises(ValueError, match="divisible by --microbatches"):
        PipeConfig(batch=30, microbatches=4)
    with pytest.raises(ValueError, match="needs --schedule interleaved"):
        PipeConfig(schedule="1f1b", stages_per_rank=2)
    with pytest.raises(ValueError, match="--schedule must be one of"):
        PipeConfig(schedule="pipedream")
