"""Chapters 5, 6, 9, 11 and 12's named checks (disttutor/checks/claims/chNN.py): each returns its verdict on the
shape of input its chapter feeds it, and rejects a realistic wrong run in words that name the problem. No launches."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from disttutor.checks.claims import ch05, ch06, ch09, ch11, ch12
from disttutor.launcher.results import RankResult, RunResult

TOL = 1e-5


# ---- chapter 5 ---------------------------------------------------------------------------------

def _env(g, l, port="29500"):
    return {"RANK": str(2 * g + l), "GROUP_RANK": str(g), "LOCAL_RANK": str(l), "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "TORCHELASTIC_RUN_ID": "17"}


def test_ch05_rank_layout_and_launchers():
    envs = [_env(g, l) for g in (0, 1) for l in (0, 1)]
    reports = [{"ranks_per_node": [2.0, 2.0], "rank_sum": 6.0}] * 4
    assert "all 4 ranks" in ch05.check_rank_layout(envs, reports, 4)
    two_stores = envs[:3] + [_env(1, 1, port="29501")]
    with pytest.raises(AssertionError, match="one store"):
        ch05.check_rank_layout(two_stores, reports, 4)
    crossed = [dict(e) for e in envs]
    crossed[1]["RANK"] = "2"  # a rank numbered as if it sat on the other node
    with pytest.raises(AssertionError, match="RANK 2 != GROUP_RANK 0"):
        ch05.check_rank_layout(crossed, reports, 4)
    twice = [_env(0, 0), _env(0, 0), _env(1, 1), _env(1, 1)]  # two ranks on one number: 0+0+3+3 is 6 too
    with pytest.raises(AssertionError, match=r"every RANK once: got \[0, 0, 3, 3\]"):
        ch05.check_rank_layout(twice, reports, 4)
    assert "pid order" in ch05.check_group_rank_order("for i, p in enumerate(sorted(state.participants)):", [10, 12])
    with pytest.raises(AssertionError, match=r"pids by GROUP_RANK \[12, 10\]"):
        ch05.check_group_rank_order("enumerate(sorted(state.participants))", [12, 10])
    warn = "FutureWarning: The module torch.distributed.launch is deprecated ... Use torchrun."
    assert "torchrun" in ch05.check_launch_deprecated(0, warn, "usage: ... [--use-env] ...")
    with pytest.raises(AssertionError, match="exited with 2"):
        ch05.check_launch_deprecated(2, warn, "--use-env")
    def rec(argv, lr):
        return {"argv": argv, "LOCAL_RANK": lr}

    passed = {"torch.distributed.launch": [rec(["--local-rank=0"], "0"), rec(["--local-rank=1"], "1")],
              "torch.distributed.launch --use-env": [rec([], "0"), rec([], "1")],
              "torchrun": [rec([], "0"), rec([], "1")]}
    assert "--local-rank" in ch05.check_what_launchers_pass(passed)
    old_style = copy.deepcopy(passed)
    old_style["torch.distributed.launch"] = [rec(["--local_rank=0"], "0"), rec(["--local_rank=1"], "1")]
    with pytest.raises(AssertionError, match="torch.distributed.launch passed"):
        ch05.check_what_launchers_pass(old_style)


def _child(pid, parent, rank, ok=True, total=2, error=None):
    return {"pid": pid, "parent_pid": parent, "rank": rank, "world_size": 2, "ok": ok, "sum": total if ok else None,
            "error": error, "launched_rank": parent - 100}


def test_ch05_double_spawn_fixed_launch_slurm_and_kubeflow():
    children = [_child(1, 100, 0), _child(2, 100, 1), _child(3, 101, 0, ok=False, error="Connection refused"),
                _child(4, 101, 1)]
    assert "ranks 0, 0, 1, 1" in ch05.check_double_spawn(children, [100, 101])
    silent = copy.deepcopy(children)
    silent[2].update(ok=False, error=None)  # failed, yet said nothing
    with pytest.raises(AssertionError, match="neither joined a group of 2 nor failed with an error"):
        ch05.check_double_spawn(silent, [100, 101])
    recs = [{"rank": 0, "ok": True, "sum": 2, "parent_pid": 1}, {"rank": 1, "ok": True, "sum": 2, "parent_pid": 1}]
    launched = [{"launched_pid": 100}, {"launched_pid": 101}]
    assert "2 distinct ranks" in ch05.check_fixed_launch(recs, launched)
    with pytest.raises(AssertionError, match="spawned by another"):
        ch05.check_fixed_launch(recs, [{"launched_pid": 1}, {"launched_pid": 101}])

    reports = {2 * g + l: {"results": {"env": _env(g, l), "slurm_node": f"n{g + 1}", "ranks_per_node": [2.0, 2.0],
                                       "rank_sum": 6.0}} for g in (0, 1) for l in (0, 1)}
    run = {"reports": reports, "info": {"JobState": "COMPLETED"}, "id": "17",
           "output": ["whoami-2x2: 2 nodes x 2, rendezvous at 127.0.0.1:40123"]}
    assert "COMPLETED" in ch05.check_slurm_job(run, 4)
    on_name = dict(run, output=["whoami-2x2: 2 nodes x 2, rendezvous at n1:40123"])
    with pytest.raises(AssertionError, match="head's NodeAddr"):
        ch05.check_slurm_job(on_name, 4)
    failed = dict(run, info={"JobState": "FAILED"})
    with pytest.raises(AssertionError, match="job state FAILED"):
        ch05.check_slurm_job(failed, 4)

    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 1}}}}
    pod_env = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "MASTER_ADDR": "whoami-2x4-master-0"}
    args = SimpleNamespace(node_rank=1, master_addr="whoami-2x4-master-0", nnodes="2")
    assert "worker pod 1" in ch05.check_pytorchjob(job, 2, args, pod_env)
    with pytest.raises(AssertionError, match="node_rank, master_addr, nnodes"):
        ch05.check_pytorchjob(job, 2, SimpleNamespace(node_rank=0, master_addr="localhost", nnodes="2"), pod_env)


# ---- chapter 6 ---------------------------------------------------------------------------------

def test_ch06_checks():
    rows = [{"rank": r, "matches reference": True} for r in range(4)]
    ref = [2.31, 2.05, 1.83]
    assert "4 stages" in ch06.check_split_model(rows, [2.310001, 2.05, 1.83], ref)
    with pytest.raises(AssertionError, match="last rank's losses"):
        ch06.check_split_model(rows, [2.31, 2.06, 1.83], ref)  # 5e-3 relative: another training, not rounding
    results = [{"compute_s": 0.010}, {"compute_s": 0.012}, {"compute_s": 0.011}, {"compute_s": 0.009}]
    assert "at once for 0.000 ms" in ch06.check_one_rank_at_a_time(0.0, results, 0.060)
    with pytest.raises(AssertionError, match="exceeds the window"):  # more compute than time: ranks overlapped
        ch06.check_one_rank_at_a_time(0.0, results, 0.030)
    with pytest.raises(AssertionError, match="two ranks computed at once for 3.000 ms"):
        ch06.check_one_rank_at_a_time(0.003, results, 0.060)
    ok_art = SimpleNamespace(ok=False, ranks=[SimpleNamespace(status="error", error="TypeError: embedding(): "
                             "argument 'input' (position 1) must be Tensor, not PyRRef")], summary=lambda: "")
    assert "PyRRef" in ch06.check_article_rpc_fails(ok_art)
    with pytest.raises(AssertionError, match="should fail on the master"):
        ch06.check_article_rpc_fails(SimpleNamespace(ok=True, ranks=[SimpleNamespace(status="ok", error=None)],
                                                     summary=lambda: "ok"))
    out = {"output_shape": [8, 10, 10], "output_requires_grad": True,
           "remote_grads": {"worker1": (0, 1), "worker2": (0, 148), "worker3": (0, 2)}}
    assert "no worker" in ch06.check_no_remote_grads(out, [8, 10, 10])
    with pytest.raises(AssertionError, match="worker2"):
        ch06.check_no_remote_grads(dict(out, remote_grads={**out["remote_grads"], "worker2": (148, 148)}), [8, 10, 10])
    wrows = [{"worker": f"worker{i}", "changed": True, "matches reference": True, ".grad stayed None": True}
             for i in (1, 2, 3)]
    assert "loss 2.300 -> 2.100" in ch06.check_rpc_training(wrows, True, [2.3, 2.1])
    with pytest.raises(AssertionError, match="the master's losses differ"):
        ch06.check_rpc_training(wrows, False, [2.3, 2.1])
    with pytest.raises(AssertionError, match="go down"):
        ch06.check_rpc_training(wrows, True, [2.1, 2.3])


def test_ch06_checks_of_the_rewritten_page():
    """The master's empty optimizer, the one-process split, the RPC stack's own warnings (fast, no ranks)."""
    import torch

    out = {"output_shape": [8, 10, 10], "output_requires_grad": True, "local_params": 0,
           "remote_grads": {"worker1": (0, 1), "worker2": (0, 148), "worker3": (0, 2)}}
    with pytest.raises(ValueError, match="empty parameter list") as e:
        torch.optim.SGD([], lr=0.1)  # what the master's local optimizer would do
    assert "raises: optimizer got an empty" in ch06.check_no_remote_grads(out, [8, 10, 10], str(e.value))
    with pytest.raises(AssertionError, match="hold no parameter"):
        ch06.check_no_remote_grads(dict(out, local_params=12), [8, 10, 10], str(e.value))
    a = [torch.ones(3), torch.zeros(2)]
    assert "bit-identical" in ch06.check_one_process_split(a, [t.clone() for t in a], same_device=True)
    off = [a[0] + 1e-7, a[1]]  # one ulp-scale change: rounding, not another training
    with pytest.raises(AssertionError, match="bit-identically"):
        ch06.check_one_process_split(off, a, same_device=True)
    assert "float32 rounding" in ch06.check_one_process_split(off, a, same_device=False)
    with pytest.raises(AssertionError, match="float32 rounding"):
        ch06.check_one_process_split([a[0] * 1.01, a[1]], a, same_device=False)
    seen = ["UserWarning: ... This usage is deprecated since PyTorch 2.0. ...",
            "DeprecationWarning: `TorchScript` support for functional optimizers is deprecated"]
    assert "2 distinct warnings" in ch06.check_rpc_warnings(seen)
    with pytest.raises(AssertionError, match="TorchScript deprecation"):
        ch06.check_rpc_warnings(seen[:1])


# ---- chapter 9 ---------------------------------------------------------------------------------

def _rank(rank, status, blame=None, error=None, evidence="report", results=None):
    return RankResult(rank=rank, status=status, error=error, results=results or {}, log=[], blame=blame,
                      evidence=evidence)


def _run(ranks, wall_s=4.0, outcome="finished"):
    return RunResult(program="disttutor.programs.hello", nproc=3, nnodes=1, returncode=1, wall_s=wall_s, ranks=ranks,
                     agent_log=[], run_dir="/tmp/x", outcome=outcome)


def test_ch09_checks_and_question_one_reads_the_reports_not_the_clock():
    good_run = SimpleNamespace(ok=True, summary=lambda: "finished ok")
    assert "all 20 failure modes" in ch09.check_reproduced(good_run, [], 20)
    with pytest.raises(AssertionError, match="1 of 20 modes no longer match the index: set_epoch: 'x'"):
        ch09.check_reproduced(good_run, ["set_epoch: 'x' does not match 'y'"], 20)
    with pytest.raises(AssertionError, match="did not finish cleanly: rank 1: stuck"):
        ch09.check_reproduced(SimpleNamespace(ok=False, summary=lambda: "rank 1: stuck"), [], 20)
    det = {"mismatched_collective": SimpleNamespace(detail="... OpType=ALLREDUCE ... OpType=BROADCAST ..."),
           "rank_dependent_shape": SimpleNamespace(detail="... Tensor shapes: 2 vs 3 ...")}
    assert "BROADCAST" in ch09.check_detail_names_mismatch(det)
    with pytest.raises(AssertionError, match="tensor shapes"):
        ch09.check_detail_names_mismatch({**det, "rank_dependent_shape": SimpleNamespace(detail=None)})
    tot = {0: {"forward": 2.0, "backward": 153.0}, 1: {"forward": 124.0, "backward": 31.0}}
    assert "rank 0 waits" in ch09.check_straggler_profile(tot, slow_rank=1, sleep_ms=40, steps=3)
    with pytest.raises(AssertionError, match="rank 1's forward should exceed rank 0's"):
        ch09.check_straggler_profile({0: {"forward": 2.0, "backward": 153.0}, 1: {"forward": 60.0, "backward": 31.0}},
                                     slow_rank=1, sleep_ms=40, steps=3)
    dead = _rank(1, "error", error="died with exit code 3 before reporting", evidence="exit")
    peer = "another rank died in the middle of a collective -- RuntimeError: Connection reset by peer."
    noticed = [_rank(0, "error", "peer", peer), dead, _rank(2, "error", "peer", peer)]
    # a loaded machine: 45 s of wall time, more than the 30 s timeout, and still "b": the reports decide
    letter, said = ch09.crash_outcome(_run(noticed, wall_s=45.0), crashed=1, timeout_s=30)
    assert letter == "b" and "failed because another rank died" in said and "took 45.0 s (collective timeout 30 s)" in said
    waited = [_rank(0, "error", "wait", "Timed out waiting 30000ms"), dead, _rank(2, "error", "wait", "Timed out")]
    assert ch09.crash_outcome(_run(waited, wall_s=3.0), crashed=1, timeout_s=30)[0] == "a"
    ok = {"after": [6.0] * 3, "expected": 6.0}
    short = [_rank(0, "ok", results={"after": [5.0] * 3, "expected": 6.0}), dead, _rank(2, "ok", results=ok)]
    assert ch09.crash_outcome(_run(short), crashed=1, timeout_s=30)[0] == "c"
    with pytest.raises(AssertionError, match="rank 1 should have died on its own"):
        ch09.crash_outcome(_run([noticed[0], _rank(1, "ok", results=ok), noticed[2]]), crashed=1, timeout_s=30)


# ---- chapter 11 --------------------------------------------------------------------------------

def _strategies(update=1e-7, bf16=0.02):
    s = {name: {"update_diff": update} for name in ("ddp", "zero1", "fsdp2")}
    s["fsdp2_bf16"] = {"update_diff": bf16}
    s["fsdp2"]["vs_ddp"] = 3e-8
    s["ddp"].update(measured={"all_reduce": 1024}, predicted={"all_reduce": 1024.0})
    return {"strategies": s, "checkpoint": {"reloaded_equal": True, "optimizer_equal": True}}


def _fsdp_calls(prefetch):
    calls = []
    for u in ["root"] + [f"blocks.{i}" for i in range(4)]:
        calls.append({"op": "all_gather", "phase": "forward", "unit": u, "backend_op": "all_gather"})
    order = ["3", "2", "1", "0"]
    for i, b in enumerate(order):
        calls.append({"op": "all_gather", "phase": "backward", "unit": f"blocks.{b}", "backend_op": "all_gather"})
        calls.append({"op": "reduce_scatter", "phase": "backward", "unit": f"blocks.{b}", "backend_op": "all_reduce"})
    if prefetch:  # AG3 AG2 RS3 ...: block 2's gather issued before block 3's reduce-scatter
        calls[6], calls[7] = calls[7], calls[6]
    calls += [{"op": "all_gather", "phase": "backward", "unit": "root", "backend_op": "all_gather"},
              {"op": "reduce_scatter", "phase": "backward", "unit": "root", "backend_op": "all_reduce"}]
    return calls


def test_ch11_training_collectives_and_bytes():
    by_world = {2: [_strategies(), _strategies()], 4: [_strategies()] * 4}
    assert "every strategy" in ch11.check_strategies_agree(by_world)
    bad = {2: [_strategies(), _strategies(update=3e-3)]}  # an fp32 strategy 30x over its tolerance
    with pytest.raises(AssertionError, match="2 ranks, rank 1, ddp: the update differs"):
        ch11.check_strategies_agree(bad)
    F2 = [{"comm": {c: {"calls": _fsdp_calls(c == "prefetch on")} for c in ("prefetch off", "prefetch on")}}
          for _ in range(2)]
    off, on = ["AG3", "RS3", "AG2", "RS2"], ["AG3", "AG2", "RS3", "RS2"]
    assert "1 reduce-scatter" in ch11.check_fsdp_collectives(F2, off, on)
    with pytest.raises(AssertionError, match="with prefetching backward should start AG3 AG2 RS3"):
        ch11.check_fsdp_collectives(F2, off, off)
    extra = copy.deepcopy(F2)
    extra[1]["comm"]["prefetch off"]["calls"].append(dict(extra[1]["comm"]["prefetch off"]["calls"][0]))
    with pytest.raises(AssertionError, match="prefetch off, rank 1: collectives per"):
        ch11.check_fsdp_collectives(extra, off, on)
    P = 4000
    row = {"ddp_payload": P, "payload": 3 * P, "formula": 1.5 * P * 2 * 0.5, "ddp_formula": P * 2 * 0.5,
           "gloo": 2 * P, "sent": int(2 * P * 1.004), "ddp_sent": int(P * 1.006)}
    assert "FSDP2 3P" in ch11.check_fsdp_bytes([row, row], P, 8000 // 2, 8000)
    with pytest.raises(AssertionError, match="FSDP2 sent .* ratio 1.1000 outside"):
        ch11.check_fsdp_bytes([dict(row, sent=int(2 * P * 1.1))], P, 4000, 8000)


def test_ch11_memory_precision_checkpoint_views():
    def m(full, total, act):
        return {"UNSHARDED_PARAM": full, "Total": total, "ACT": act, "ACT_PEAK": act}
    mem = {r: {"reshard_after_forward=True": m(27000, 90000, 40000), "reshard_after_forward=False": m(60000, 120000, 40000),
               "True + activation checkpointing": m(27000, 80000, 9000)} for r in (0, 1)}
    assert "lower activation peak" in ch11.check_fsdp_memory(mem, block_bytes=8448, root_bytes=10240, ac_vs_no_ac=0.0)
    too_many = copy.deepcopy(mem)
    too_many[1]["reshard_after_forward=True"]["UNSHARDED_PARAM"] = 4 * 8448 + 10240  # all four blocks full
    with pytest.raises(AssertionError, match="rank 1: 44032 full-weight bytes with resharding > 2 blocks"):
        ch11.check_fsdp_memory(too_many, block_bytes=8448, root_bytes=10240, ac_vs_no_ac=0.0)
    # the CI run that found this: both snapshots at the total's peak held 17,160 activation bytes; the claim
    # reads the activations' own peak, so equal bytes at the total's peak pass, an equal own peak fails
    same_at_total = copy.deepcopy(mem)
    for r in same_at_total.values():
        r["True + activation checkpointing"]["ACT"] = r["reshard_after_forward=True"]["ACT"] = 17160
    assert "lower activation peak" in ch11.check_fsdp_memory(same_at_total, 8448, 10240, ac_vs_no_ac=0.0)
    for r in same_at_total.values():
        r["True + activation checkpointing"]["ACT_PEAK"] = r["reshard_after_forward=True"]["ACT_PEAK"]
    with pytest.raises(AssertionError, match="activation checkpointing's activation peak 40000 should be below"):
        ch11.check_fsdp_memory(same_at_total, 8448, 10240, ac_vs_no_ac=0.0)
    mpd = {"in_forward": {"weight": "torch.bfloat16", "output": "torch.bfloat16"}, "sharded_param": "torch.float32",
           "grad_after_step": "torch.float32", "optimizer_state": "torch.float32"}
    assert "fp32" in ch11.check_mixed_precision(mpd, {"float"})
    with pytest.raises(AssertionError, match="reduce-scatters should run in fp32"):
        ch11.check_mixed_precision(mpd, {"c10::BFloat16"})
    ck = {"params_equal": True, "optimizer_equal": True, "resumed_diff": 0.0,
          "files": [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.json"]}
    assert "2 .distcp" in ch11.check_fsdp_checkpoint([{"checkpoint": ck}] * 2, 2)
    with pytest.raises(AssertionError, match="rank 0: a step from the reloaded state differs by 1e-07"):
        ch11.check_fsdp_checkpoint([{"checkpoint": dict(ck, resumed_diff=1e-7)}], 2)
    views = {"flat (FSDP1-style)": {"parameters": [("shard", [6016], [3008], "Parameter", "")], "n_placeholders": 14,
                                    "frozen_weight_moved": 0.03, "n_parameters": 1},
             "per-parameter (FSDP2)": {"parameters": [("embed.weight", [60, 16], [30, 16], "DTensor", "S(0)")],
                                       "n_parameters": 14, "frozen_weight_moved": 0.0}}
    assert "DTensor" in ch11.check_flat_vs_per_param(views)
    moved = copy.deepcopy(views)
    moved["per-parameter (FSDP2)"]["frozen_weight_moved"] = 0.03
    with pytest.raises(AssertionError, match="the weight frozen after wrapping moved"):
        ch11.check_flat_vs_per_param(moved)


def test_ch11_tensor_parallel_mesh_and_fedavg():
    P = [{"Shard(0)": [[4.0 * r + c for c in range(4)]], "Shard(1)": [[4.0 * i + r] for i in range(4)],
          "Partial() -> full_tensor()": [[10.0] * 2] * 2} for r in range(4)]
    assert "pending sum" in ch11.check_tp_placements(P)
    with pytest.raises(AssertionError, match="Shard"):
        ch11.check_tp_placements(P[::-1])
    def blk(bwd):
        return {"out_diff": 2e-7, "grad_diff": 4e-7, "forward_comms": {"all_reduce": 1},
                "backward_comms": {"all_reduce": bwd}}

    results = [{"mlp": blk(1), "attention": blk(3)}] * 4
    assert "column-split" in ch11.check_tp_blocks(results)
    with pytest.raises(AssertionError, match="attention backward: expected 3"):
        ch11.check_tp_blocks([{"mlp": blk(1), "attention": blk(1)}] * 4)
    m2 = [{"param_diff": 1e-7, "weight_shape": [4, 4], "held": list(range(4 * r, 4 * r + 4))} for r in range(4)]
    assert "16 elements" in ch11.check_mesh_2d(m2)
    with pytest.raises(AssertionError, match="exactly once: 16 stored, 12 distinct"):
        ch11.check_mesh_2d(m2[:3] + [dict(m2[3], held=list(range(4)))])
    fed = {"diff_one_step": 6e-8, "diff_k_steps": 0.02, "allreduces_fedavg": 4, "local_steps": 5,
           "allreduces_data_parallel": 20}
    assert "5x fewer" in ch11.check_fedavg(fed)
    with pytest.raises(AssertionError, match="clients should drift"):
        ch11.check_fedavg(dict(fed, diff_k_steps=1e-6))


# ---- chapter 12 --------------------------------------------------------------------------------

def _tp_rank():
    one = {"all_reduce": 1}
    return {"tp": {"scratch_mlp": {"diff": 1e-7, "forward": one, "backward": one},
                   "dtensor_mlp": {"diff": 1e-7, "forward": one, "backward": one},
                   "scratch_attention": {"diff": 2e-7, "forward": one, "backward": one},
                   "dtensor_attention": {"diff": 2e-7, "forward": one, "backward": {"all_reduce": 3}}}}


def test_ch12_tensor_and_sequence_parallel():
    assert "Megatron" in ch12.check_tp_collectives([_tp_rank(), _tp_rank()], TOL)
    hung = [_tp_rank(), _tp_rank()]
    hung[1]["tp"]["scratch_mlp"]["backward"] = {"all_reduce": 2}
    with pytest.raises(AssertionError, match=r"rank 1 made other calls than rank 0 in \['scratch_mlp'\]"):
        ch12.check_tp_collectives(hung, TOL)
    ag_rs = {"all_gather_single": 1, "reduce_scatter_single": 1}
    sp = {"sp": {"tp": {"diff": 1e-7, "forward": {"all_reduce": 1}, "backward": {"all_reduce": 1}, "saved_bytes": 8448,
                        "ring_bytes": 4096.0},
                 "sp": {"diff": 1e-7, "forward": ag_rs, "backward": {**ag_rs, "all_reduce": 1}, "saved_bytes": 5376,
                        "ring_bytes": 4192.0}}}
    assert "fewer bytes" in ch12.check_sp_collectives([sp, sp], TOL)
    more = copy.deepcopy(sp)
    more["sp"]["sp"]["saved_bytes"] = 9000
    with pytest.raises(AssertionError, match="SP should save fewer bytes"):
        ch12.check_sp_collectives([more], TOL)
    assert "the formula" in ch12.check_sp_bytes(sp["sp"], 8448, 5376, 96.0)
    with pytest.raises(AssertionError, match="not LayerNorm's all-reduce"):
        ch12.check_sp_bytes(sp["sp"], 8448, 5376, 48.0)


def test_ch12_ring_experts_and_placements():
    CP = [{"diff": 3e-7, "calls": {"isend": 3, "irecv": 3}}] * 4
    assert "3 isend" in ch12.check_ring_attention(CP, TOL)
    with pytest.raises(AssertionError, match="expected 3 isend and irecv on 4 ranks"):
        ch12.check_ring_attention(CP[:3] + [{"diff": 3e-7, "calls": {"isend": 4, "irecv": 4}}], TOL)
    EP = [{"diff": 1e-7, "calls": {"all_to_all_single": 3}, "tokens_per_expert": [7, 5, 6, 6]}] * 2
    assert "3 all-to-alls" in ch12.check_expert_parallel(EP, TOL, tokens=12, top_k=2)
    with pytest.raises(AssertionError, match="rank 0: MoE differs from one process"):
        ch12.check_expert_parallel([dict(EP[0], diff=0.3)], TOL, tokens=12, top_k=2)
    ONE = [{"S(0)": {"held": list(range(4 * r, 4 * r + 4))}, "S(1)": {"held": list(range(r, 16, 4))},
            "R": {"held": list(range(16))}, "Partial()": {"sum": [10.0] * 16}} for r in range(4)]
    assert "pending sum" in ch12.check_one_dim_placements(ONE)
    swapped = [dict(o, **{"S(0)": o["S(1)"]}) for o in ONE]
    with pytest.raises(AssertionError, match="Shard\\(0\\) should give rank r row r"):
        ch12.check_one_dim_placements(swapped)
    nested = {(0, 0): [0, 1], (0, 1): [2, 3], (1, 0): [4, 5], (1, 1): [6, 7]}
    strided = {(0, 0): [0, 1], (0, 1): [4, 5], (1, 0): [2, 3], (1, 1): [6, 7]}
    placements = "(_StridedShard(dim=0, sf=2), Shard(dim=0))"
    assert "strided rows" in ch12.check_two_dim_placements(nested, strided, placements)
    with pytest.raises(AssertionError, match="FSDP2 over TP rows"):
        ch12.check_two_dim_placements(nested, nested, placements)
