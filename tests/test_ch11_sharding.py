"""Chapter 11: ZeRO-1 / FSDP scratch / FSDP2 / tensor parallel / 2D mesh / FedAvg against one process.

One launch per program (each runs every strategy on the same ranks). Timeouts are generous: the
shared 2-core machine ran a 4-rank launch in ~55 s at load average 10 (~25 s idle).
"""
from __future__ import annotations

import pytest
import torch

import disttutor
from disttutor.sharding import model as S
from disttutor.checks.sharding import BF16_RTOL, FP32_RTOL
from disttutor.sharding.memory import bytes_per_param
from disttutor.programs.fedavg import FedAvgConfig
from disttutor.programs.sharding import ShardingConfig
from disttutor.programs.tensor_parallel import TPConfig
from disttutor.scratch.zero1 import partition

TIMEOUT = 400
LAUNCH = dict(stream=False, timeout=300)


def test_configs_reject_bad_values():
    for bad, match in ((lambda: ShardingConfig(steps=0), "steps"), (lambda: ShardingConfig(lr=0.0), "lr"),
                       (lambda: TPConfig(batch=0), "batch"), (lambda: FedAvgConfig(local_steps=0), "local_steps")):
        with pytest.raises(ValueError, match=match):
            bad()


def test_partition_is_deterministic_and_balanced():
    params = [torch.zeros(n) for n in (100, 10, 60, 50, 5)]
    owners = partition(params, 2)
    assert owners == partition(params, 2)  # every rank computes the same owners
    loads = [sum(p.numel() for p, o in zip(params, owners) if o == r) for r in range(2)]
    assert sorted(loads) == [110, 115]  # greedy: 100 | 60, 50 -> 100+10+5 vs 110
    assert set(partition(params[:1], 4)) == {0}  # more ranks than parameters: some own nothing


def test_prediction_uses_chapter_1s_table():
    bpp = bytes_per_param("fp32", "adam")
    p = S.predicted(1000, 800, 4, 3)
    assert p == {"params": 1000 * bpp["weights"] / 4, "grads": 800 * bpp["gradients"] / 4,
                 "optimizer": 800 * bpp["optimizer"] / 4}
    assert S.predicted(1000, 800, 4, 1)["grads"] == 800 * 4  # stage 1 shards only the state


def test_tiny_lm_has_the_traps():
    m = S.tiny_lm()
    assert m.head.weight is m.emb.weight and not m.pos.weight.requires_grad
    n, trainable = S.counts(m)
    assert n - trainable == m.pos.weight.numel()


@pytest.mark.timeout(TIMEOUT)
def test_every_strategy_trains_like_one_process_and_shards_memory(no_leftovers):
    run = disttutor.launch("sharding", nproc=2, **LAUNCH)
    assert run.ok, run.summary()
    res = run.results
    n_params, n_trainable = res[0]["n_params"], res[0]["n_trainable"]
    for r in res:
        for name, s in r["strategies"].items():
            assert s["update_diff"] <= (BF16_RTOL if name.endswith("bf16") else FP32_RTOL), (name, s)
        assert r["strategies"]["fsdp2"]["vs_ddp"] < 1e-5  # fp32 reordering only
        assert r["checkpoint"]["reloaded_equal"] and ".metadata" in r["checkpoint"]["files"]
        assert r["checkpoint"]["optimizer_equal"] and "meta.json" in r["checkpoint"]["files"]  # chapter 10's format
        ddp = r["strategies"]["ddp"]
        assert ddp["measured"] == {k: int(v) for k, v in ddp["predicted"].items()}  # DDP: everything, everywhere
    total = {s: {k: sum(r["strategies"][s]["measured"][k] for r in res) for k in ("params", "grads", "optimizer")}
             for s in res[0]["strategies"]}
    assert total["zero1"]["optimizer"] == n_trainable * 8  # Adam state stored exactly once over the ranks
    assert total["fsdp2"]["params"] == n_params * 4 and total["fsdp2"]["optimizer"] == n_trainable * 8
    padded = -(-n_trainable // 2) * 2
    assert total["fsdp_scratch"]["grads"] == padded * 4  # one padded flat gradient, split in two
    assert total["fsdp_scratch"]["params"] == padded * 4 + 2 * (n_params - n_trainable) * 4  # + frozen whole


@pytest.mark.timeout(TIMEOUT)
def test_tensor_parallel_and_2d_mesh_match_one_process(no_leftovers):
    run = disttutor.launch("tensor_parallel", nproc=4, **LAUNCH)
    assert run.ok, run.summary()
    for r in run.results:
        for block, backward in (("mlp", 1), ("attention", 3)):
            assert r[block]["out_diff"] < 1e-5 and r[block]["grad_diff"] < 1e-5  # fp32 reordering only
            assert r[block]["forward_comms"] == {"all_reduce": 1}
            assert r[block]["backward_comms"] == {"all_reduce": backward}
        assert r["mesh_2d"]["param_diff"] < 1e-5
        assert r["placements"]["Partial() -> full_tensor()"] == [[10.0, 10.0], [10.0, 10.0]]
    shape = run.results[0]["mesh_2d"]["weight_shape"]
    held = sorted(i for r in run.results for i in r["mesh_2d"]["held"])
    assert held == list(range(shape[0] * shape[1]))  # every element stored by exactly one rank
    assert sorted(tuple(r["mesh_2d"]["coordinate"]) for r in run.results) == [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.timeout(TIMEOUT)
def test_fedavg_is_data_parallel_only_with_one_local_step(no_leftovers):
    run = disttutor.launch("fedavg", nproc=2, **LAUNCH)
    assert run.ok, run.summary()
    r = run.results[0]
    assert r["diff_one_step"] < 1e-6  # fp32: the same sums in another order
    assert r["diff_k_steps"] > 1e-4   # client drift, measured ~1e-3
    assert r["allreduces_fedavg"] * r["local_steps"] == r["allreduces_data_parallel"]
