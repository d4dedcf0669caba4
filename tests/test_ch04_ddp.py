"""Chapter 4: the corrected article DDP program (sampler, broadcast, checkpoint, Join, unused parameters).

Three torchrun launches, each checked for several things at once (a launch costs seconds).
"""
from __future__ import annotations

import os
from collections import Counter

import pytest

import disttutor
from disttutor.programs.ddp import DDPConfig

pytestmark = pytest.mark.slow
N = 11  # not divisible by 2 ranks: the sampler must pad (or drop) one sample


def test_config_rejects_bad_values(tmp_path):
    with pytest.raises(ValueError, match="epochs"):
        DDPConfig(epochs=0)
    with pytest.raises(ValueError, match="directory"):
        DDPConfig(save=str(tmp_path / "missing" / "m.pt"))


@pytest.mark.timeout(150)
def test_ddp_sampler_broadcast_and_checkpoint(tmp_path, no_leftovers):
    ckpt = str(tmp_path / "model.pt")
    res = disttutor.launch("ddp", 2, {"samples": N, "epochs": 2, "batch_size": 2, "show": 0, "save": ckpt},
                           stream=False, timeout=120, collective_timeout=30)
    r0, r1 = res.results
    # Different initial weights on the two ranks; after wrapping, both hold rank 0's.
    assert r0["init_sum_before_wrap"] != r1["init_sum_before_wrap"]
    assert r0["init_sum_after_wrap"] == r1["init_sum_after_wrap"] == r0["init_sum_before_wrap"]
    # One dataset everywhere (seeded); the article's unseeded one differs per process.
    assert r0["data_sha"] == r1["data_sha"] and r0["article_data_sha"] != r1["article_data_sha"]
    # Padding: ceil(11 / 2) * 2 = 12 indices handed out, so exactly one sample is seen twice.
    assert r0["total_size"] == 12 and r0["per_rank"] == r1["per_rank"] == 6
    for epoch in range(2):
        seen = Counter(r0["orders"][epoch] + r1["orders"][epoch])
        assert set(seen) == set(range(N)) and sum(seen.values()) - N == 1
    assert r0["orders"][0] != r0["orders"][1]  # set_epoch reshuffles every epoch
    # Replicas stay identical, and the reported loss is the same (averaged) number everywhere.
    assert r0["final_sha"] == r1["final_sha"] and r0["epoch_loss"] == r1["epoch_loss"]
    # Checkpoint: plain keys from .module, every rank loaded exactly its own weights.
    assert r0["saved_keys"] == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert all(k.startswith("module.") for k in r0["ddp_keys"])
    assert r0["loaded_equal"] and r1["loaded_equal"] and os.path.isfile(ckpt)


@pytest.mark.timeout(150)
def test_no_set_epoch_drop_last_and_join(no_leftovers):
    res = disttutor.launch("ddp", 2, {"samples": N, "epochs": 3, "batch_size": 2, "show": 0, "set_epoch": False,
                                      "drop_last": True, "uneven": 1, "join": True},
                           stream=False, timeout=120, collective_timeout=30)
    r0, r1 = res.results
    assert r0["orders"][0] == r0["orders"][1] == r0["orders"][2]  # without set_epoch: the same order each epoch
    assert r0["total_size"] == 10  # drop_last: floor(11 / 2) * 2, one sample left out, none repeated
    assert len(set(r0["orders"][0] + r1["orders"][0])) == 10
    # Uneven inputs: the last rank ran one batch fewer each epoch, and Join kept everyone in step.
    assert r0["batches"] == [3, 3, 3] and r1["batches"] == [2, 2, 2]
    assert r0["final_sha"] == r1["final_sha"]


@pytest.mark.timeout(150)
def test_unused_parameters_need_find_unused(no_leftovers):
    res = disttutor.launch("ddp", 2, {"unused_demo": True}, stream=False, timeout=120, collective_timeout=30)
    for r in res.results:
        assert r["find_unused_False"].startswith("RuntimeError at step 1: Expected to have finished reduction")
        assert r["find_unused_True"] == "ok"


@pytest.mark.timeout(150)
def test_uneven_inputs_without_join_fail_cleanly(no_leftovers):
    res = disttutor.launch("ddp", 2, {"samples": 64, "epochs": 1, "batch_size": 8, "uneven": 1}, stream=False,
                           timeout=120, collective_timeout=10, check=False)
    assert not res.ok and res.outcome == "finished"  # ended by itself (mismatch detected or timeout), no hang
    assert set(res.ranks_with("error", "stopped")) == {0, 1}


# --- Section 7's sizing (disttutor.data_parallel.scaling): pure arithmetic, no ranks ---------------

def test_weak_scaling_ranks_never_exceed_the_cores():
    from disttutor.data_parallel.scaling import ranks_for_speed

    # one core still shows 1 vs 2 ranks (what time-sharing costs); otherwise a core per rank, at most 4
    assert [ranks_for_speed(c) for c in (1, 2, 3, 4, 8, 64)] == [[1, 2], [1, 2], [1, 2], [1, 2, 4], [1, 2, 4],
                                                                  [1, 2, 4]]


def test_weak_scaling_batch_is_chosen_from_the_measured_overhead():
    from disttutor.data_parallel.scaling import choose_batch

    # 0.1 ms a sample, 20 ms overhead: the first power of two with >= 8 x 20 ms of compute is 2048
    b = choose_batch(20.0, 0.1, ratio=8, budget_ms=1000)
    assert b == 2048 and b * 0.1 >= 8 * 20 > (b // 2) * 0.1
    # the budget wins over the ratio on a slow machine: compute stays within it
    assert choose_batch(20.0, 0.1, ratio=8, budget_ms=60) * 0.1 <= 60
    assert choose_batch(0.0, 0.1) == 64  # no overhead: the smallest batch already wins
    with pytest.raises(ValueError, match="per_sample_ms"):
        choose_batch(10.0, 0.0)


def test_weak_scaling_verdict_is_computed_from_the_numbers():
    from disttutor.data_parallel.scaling import speedup, verdict

    assert speedup({1: 100.0, 2: 110.0}, 2) == pytest.approx(200 / 110)
    ok = verdict(1.8, 2, 1.7, 10, 100, load=0.1, cores=2)
    assert "1.80x" in ok and "reached" in ok and "NOT" not in ok and "100 ms" in ok
    slow = verdict(1.1, 2, 1.7, 50, 60, load=3.0, cores=2)
    assert "NOT reached" in slow and "load average 3.0" in slow and "not large against the overhead" in slow
    assert "time-share 1 core" in verdict(0.6, 2, 1.7, 10, 100, load=0.0, cores=1)
    assert "noise" in verdict(2.5, 2, 1.7, 10, 100, load=0.0, cores=2)  # above linear is not parallelism


def test_compute_per_sample_is_measured_on_one_thread_and_restores_threads():
    import torch

    from disttutor.data_parallel.scaling import compute_ms_per_sample

    before = torch.get_num_threads()
    assert compute_ms_per_sample({"d_in": 16, "hidden": (16,), "d_out": 4}, batch=8, repeats=1) > 0
    assert torch.get_num_threads() == before
