"""Chapter 7's zero-bubble and balance sections: the simulator's I/W orders are torch's, action for action;
on real gloo ranks every schedule equals single-process training and runs the simulator's order; the
balance program checks its splits."""
from __future__ import annotations

import itertools
from unittest import mock

import pytest
import torch
from torch.distributed.pipelining import schedules as torch_schedules

from disttutor import launch
from disttutor.pipeline.schedules import PipeSpec, peak_in_flight, rank_orders, simulate, slots_from_events

# float32 weights; the pipeline sums m micro-batch gradients where the reference takes one full-batch
# gradient, so the last bits differ (seen: ~1e-8). 1e-5 is far below what a real bug (a W never run, a
# missing 1/m) does to the weights (~1e-2).
WEIGHT_TOL = 1e-5
TOL = 1e-12  # exact rationals in the simulator; float summation error only


class _FakeStage:
    """What a schedule's constructor reads of a stage, without a process group."""

    def __init__(self, idx: int, n: int, p: int, rank: int):
        self.stage_index, self.num_stages, self.group_size, self.group_rank = idx, n, p, rank
        self.is_first, self.is_last = idx == 0, idx == n - 1
        self.stage_index_to_group_rank = {}
        self.submod = torch.nn.Linear(1, 1)


def _torch_order(cls, spec: PipeSpec, rank: int) -> list[tuple[str, int, int]]:
    """torch's own pipeline_order for one rank (its constructor, minus the runtime's communication set-up)."""
    n = spec.n_stages
    stages = [_FakeStage(s, n, spec.p, rank) for s in spec.stages_of(rank)]

    def base_init(self, **kw):
        self._n_microbatches, self._num_stages, self._stages = kw["n_microbatches"], n, kw["stages"]

    obj = cls.__new__(cls)
    with mock.patch.object(torch_schedules._PipelineScheduleRuntime, "__init__", base_init), \
            mock.patch.object(cls, "_prepare_schedule_with_comms", lambda self, order: None):
        cls.__init__(obj, stages, spec.m)
    return [(a.computation_type.value, a.microbatch_index, a.stage_index) for a in obj.pipeline_order[rank]
            if a is not None]


@pytest.mark.parametrize("schedule,cls", [("interleaved_zb", torch_schedules.ScheduleInterleavedZeroBubble),
                                          ("zbv", torch_schedules.ScheduleZBVZeroBubble)])
def test_simulator_orders_are_torchs(schedule, cls):
    for p, k, v in itertools.product(range(1, 5), range(1, 4), (1, 2, 3)):
        if schedule == "zbv" and v != 2:
            continue
        spec = PipeSpec(schedule, p, k * p, v)
        for r, acts in enumerate(rank_orders(spec)):
            assert [(a.kind, a.mb, a.stage) for a in acts] == _torch_order(cls, spec, r), (spec, r)


def test_zero_bubble_fills_what_1f1b_leaves_idle():
    for p, k in itertools.product(range(2, 6), (1, 2, 4)):
        m = k * p
        one = simulate(PipeSpec("1f1b", p, m)).bubble_fraction
        inter = simulate(PipeSpec("interleaved", p, m, 2)).bubble_fraction
        for s in ("interleaved_zb", "zbv"):
            zb = simulate(PipeSpec(s, p, m, 2))
            assert zb.bubble_fraction < inter < one, (s, p, m)
            # same work as 1F1B (B = I + W, half each): only the idle time shrinks
            busy = sum(sl.end - sl.start for sl in zb.slots)
            assert abs(busy - p * m * 3.0) < 1e-9


def test_every_action_once_and_w_after_its_i():
    for spec in [PipeSpec("interleaved_zb", 3, 6, 2), PipeSpec("zbv", 3, 6, 2), PipeSpec("zbv", 4, 3, 2)]:
        tl = simulate(spec)
        for r, acts in enumerate(rank_orders(spec)):
            assert {a.stage for a in acts} == set(spec.stages_of(r))
            for kind, stage in itertools.product("FIW", spec.stages_of(r)):
                assert sorted(a.mb for a in acts if a.kind == kind and a.stage == stage) == list(range(spec.m))
        end = {(s.kind, s.stage, s.mb): s.end for s in tl.slots}
        assert all(s.start >= end[("I", s.stage, s.mb)] - TOL for s in tl.slots if s.kind == "W")
        assert len(peak_in_flight(spec)) == spec.p


def test_zero_bubble_specs_are_checked():
    with pytest.raises(ValueError, match="v must be 2"):
        PipeSpec("zbv", 2, 4, 1)
    with pytest.raises(ValueError, match="multiple of p"):
        PipeSpec("interleaved_zb", 4, 6, 2)
    from disttutor.pipeline.schedules import formula
    with pytest.raises(ValueError, match="no closed-form"):
        formula(PipeSpec("zbv", 2, 4, 2))


def test_program_configs_fail_clearly():
    from disttutor.programs.pipeline_balance import BalanceConfig
    from disttutor.programs.pipeline_zb import ZeroBubbleConfig
    with pytest.raises(ValueError, match="--schedules must be some of"):
        ZeroBubbleConfig(schedules=("zb",))
    with pytest.raises(ValueError, match="same model"):
        BalanceConfig(splits=("6,2", "4,3"))
    with pytest.raises(ValueError, match="like 6,2"):
        BalanceConfig(splits=("6;2",))


def _slots(res, i):
    return slots_from_events([r["runs"][i]["events"] for r in res.results])


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_zero_bubble_on_gloo_ranks_equals_single_process(no_leftovers):
    res = launch("pipeline_zb", nproc=2, args={"microbatches": 4, "width": 32, "mb_size": 8}, timeout=200,
                 collective_timeout=60, stream=False)
    assert res.ok, res.summary()
    runs = res.results[0]["runs"]
    assert [r["schedule"] for r in runs] == ["1f1b", "interleaved", "interleaved_zb", "zbv"]
    for i, run in enumerate(runs):
        for r in res.results:
            assert r["runs"][i]["max_weight_diff"] < WEIGHT_TOL, (run["schedule"], r["runs"][i])
        last = next(r["runs"][i] for r in res.results if "losses" in r["runs"][i])
        assert all(abs(a - b) < WEIGHT_TOL for a, b in zip(last["losses"], last["ref_losses"]))
        spec = PipeSpec(run["schedule"], 2, 4, 1 if run["schedule"] == "1f1b" else 2)
        assert [r["runs"][i]["stages"] for r in res.results] == [spec.stages_of(k) for k in range(2)]
        assert all(len(r["runs"][i]["cpu"]) == len(r["runs"][i]["events"]) for r in res.results)  # CPU per slot
        measured = [[(s.kind, s.mb, s.stage) for s in sorted(_slots(res, i), key=lambda s: s.start) if s.rank == k]
                    for k in range(2)]
        # torch ran, rank by rank, exactly the actions the simulator draws, B split into I and W for ZB
        assert measured == [[(a.kind, a.mb, a.stage) for a in acts] for acts in rank_orders(spec)]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_balance_program_runs_each_split_and_matches(no_leftovers):
    res = launch("pipeline_balance", nproc=2, args={"splits": ("3,1", "2,2"), "microbatches": 2, "width": 32,
                                                    "mb_size": 8}, timeout=200, collective_timeout=60, stream=False)
    assert res.ok, res.summary()
    assert [run["counts"] for run in res.results[0]["runs"]] == [[3, 1], [2, 2]]
    for r in res.results:
        assert all(run["max_weight_diff"] < WEIGHT_TOL for run in r["runs"])
