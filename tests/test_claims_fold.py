"""The named checks of chapters 0, 1, 2 and 4 (disttutor/checks/claims/ch0N.py): each returns its verdict on a
realistic good input (shaped like what the chapter's run reports) and raises an AssertionError naming the problem on
a realistic wrong one. No launches: the notebooks prove the runs under nbval; here the checks themselves."""
from __future__ import annotations

import copy
import math
import sys

import pytest
import torch
import torch.distributed as dist

from disttutor.checks.claims import ch00, ch01, ch02, ch04
from disttutor.launcher.results import RankResult, RunResult
from disttutor.live.report import CellResult
from disttutor.sharding import memory as mem
from disttutor.viz.memory import breakdown_rows
from disttutor.workloads.models import MLP, seeded

WAIT = "a collective waited more than {t}s for the other ranks (one of them never joined it, or died) -- RuntimeError"


def _run(statuses, errors=None, results=None, outcome="finished", logs=None):
    n = len(statuses)
    ranks = [RankResult(r, statuses[r], (errors or [None] * n)[r], (results or [{}] * n)[r], (logs or [[]] * n)[r])
             for r in range(n)]
    return RunResult("hello", n, 1, 0 if all(s == "ok" for s in statuses) else 1, 1.0, ranks, [], "/tmp/x", outcome)


# ---- chapter 0 ----------------------------------------------------------------------------------

def test_ch00_checks_accept_the_runs_and_name_what_went_wrong():
    hello = [{"before": [float(r + 1)] * 3, "after": [10.0] * 3} for r in range(4)]
    assert ch00.check_allreduce_sum(hello) == "all 4 ranks hold 10 = 1 + 2 + 3 + 4"
    averaged = copy.deepcopy(hello)
    averaged[2]["after"] = [2.5] * 3  # a mean instead of the sum
    with pytest.raises(AssertionError, match=r"rank 2 should hold the sum 1 \+ \.\.\. \+ 4 = 10"):
        ch00.check_allreduce_sum(averaged)

    hung = _run(["error", "stopped"], [WAIT.format(t=3), None])
    assert "was stopped" in ch00.check_hang_ended(hung, skipped=1, timeout_s=3)
    with pytest.raises(AssertionError, match="rank 0 should fail after waiting 3 s"):
        ch00.check_hang_ended(_run(["error", "stopped"], ["died with exit code 1", None]), skipped=1, timeout_s=3)

    crashed = _run(["error", "error"], ["another rank died", "died with exit code 3 before reporting"])
    crashed.ranks[0].blame = "peer"  # what the launcher reads from rank 0's error: it failed because rank 1 died
    assert "exit code 3" in ch00.check_crashed(crashed, rank=1, exit_code=3)
    assert "exit code 3" in ch00.check_crashed(_run(["stopped", "error"], [None, "died with exit code 3 before "
                                                                           "reporting"]), rank=1, exit_code=3)
    blamed_self = _run(["error", "error"], ["died with exit code 1", "died with exit code 3 before reporting"])
    with pytest.raises(AssertionError, match="rank 1 should be named first: \\[0, 1\\]"):  # rank 0 failed on its own
        ch00.check_crashed(blamed_self, rank=1, exit_code=3)
    blamed_wrong = _run(["error", "stopped"], ["died with exit code 3 before reporting", None])  # the wrong culprit
    with pytest.raises(AssertionError, match="rank 1 should be reported as an error with exit code 3: stopped"):
        ch00.check_crashed(blamed_wrong, rank=1, exit_code=3)

    assert ch00.check_no_leftovers([]) == "processes left behind: 0"
    with pytest.raises(AssertionError, match="processes left behind: .*torchrun"):
        ch00.check_no_leftovers(["psutil.Process(pid=4242, name='torchrun')"])

    where = ("inside line 3: dist.all_reduce(t) -- waiting in all_reduce (torch/distributed/distributed_c10d.py:3252)")
    stuck = CellResult(ranks=[0, 1, 2, 3], status={0: "stuck", 1: "ok", 2: "stuck", 3: "stuck"},
                       stuck={0: where, 2: where, 3: where}, timed_out=True,
                       message="restarted the pool (4 ranks); every rank's namespace was lost -- re-run the cells")
    assert "rank 1 had finished" in ch00.check_live_hang(stuck, skipped=1, line=3, call="dist.all_reduce(t)")
    elsewhere = copy.deepcopy(stuck)
    elsewhere.stuck[2] = "inside line 1: t = torch.ones(2) -- waiting in <module>"
    with pytest.raises(AssertionError, match="rank 2 should be 'inside line 3: dist.all_reduce"):
        ch00.check_live_hang(elsewhere, skipped=1, line=3, call="dist.all_reduce(t)")


def test_ch00_first_script_setup_spawn_and_interrupt_checks(monkeypatch):
    """The first script's printed sums, runtime.setup() read as that script, why a notebook function cannot be
    mp.spawn'ed (one fresh interpreter, ~0.1 s), gloo's own timeout message, an interrupt; each one also wrong."""
    logs = [[f"rank {r}/4 on cpu: [10.0, 10.0, 10.0]"] for r in range(4)]
    assert ch00.check_script_sum(logs) == "all 4 ranks printed 10 = 1 + 2 + 3 + 4"
    logs[2] = ["rank 2/4 on cpu: [2.5, 2.5, 2.5]"]  # an average instead of the sum
    with pytest.raises(AssertionError, match="rank 2 should print 'rank 2/4 on DEVICE: \\[10.0, 10.0, 10.0\\]'"):
        ch00.check_script_sum(logs)
    assert "init_process_group(timeout=...)" in ch00.check_setup_is_the_script()

    def train(rank):
        pass
    train.__module__, train.__qualname__ = "__main__", "train"  # as a function typed into a notebook cell is
    monkeypatch.setattr(sys.modules["__main__"], "train", train, raising=False)
    assert ch00.check_spawn_pickle(train).endswith("a fresh interpreter fails: AttributeError")
    with pytest.raises(AssertionError, match="should pickle as a reference"):
        ch00.check_spawn_pickle(math.sqrt)  # an importable function: the child would find it

    gloo = "RuntimeError: Timed out waiting 3000ms for recv operation to complete"
    assert "was stopped" in ch00.check_hang_ended(_run(["error", "stopped"], [gloo, None]), skipped=1, timeout_s=3)
    with pytest.raises(AssertionError, match="rank 1 .* should be stopped: error"):  # it reached the collective
        ch00.check_hang_ended(_run(["error", "error"], [gloo, "Connection closed by peer"]), skipped=1, timeout_s=3)

    stopped = _run(["interrupted", "interrupted"], outcome="interrupted")
    assert ch00.check_interrupted(stopped, []).endswith("processes left: 0")
    with pytest.raises(AssertionError, match="processes left behind"):
        ch00.check_interrupted(stopped, ["psutil.Process(pid=4242, name='python')"])
    with pytest.raises(AssertionError, match="should be interrupted: finished"):
        ch00.check_interrupted(_run(["ok", "ok"]), [])


# ---- chapter 1 ----------------------------------------------------------------------------------

def _step(model, opt):
    opt.zero_grad()
    model(torch.randn(8, 16)).pow(2).mean().backward()
    opt.step()


def test_ch01_memory_checks_hold_for_real_tensors_and_reject_a_wrong_table():
    measured = {}
    for name, make in [("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1)),
                       ("momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
                       ("adam", lambda ps: torch.optim.Adam(ps, lr=1e-3))]:
        m = seeded(MLP, 0, 16, [32], 4)
        opt = make(m.parameters())
        _step(m, opt)
        measured[name] = mem.measured_state_bytes(m, opt)
    P = sum(p.numel() for p in m.parameters())
    assert "exactly the table's fp32 bytes" in ch01.check_state_bytes(measured, P, n_tensors=4)
    wrong = copy.deepcopy(measured)
    wrong["adam"]["optimizer"] //= 2  # an Adam that kept one moment
    with pytest.raises(AssertionError, match="adam, optimizer: measured"):
        ch01.check_state_bytes(wrong, P, n_tensors=4)

    mixed = {"weights": 2 * P, "gradients": 2 * P, "optimizer": 12 * P}
    assert ch01.check_mixed_precision(mixed, P).endswith("16 in all")
    with pytest.raises(AssertionError, match="mixed precision, optimizer"):
        ch01.check_mixed_precision({**mixed, "optimizer": 8 * P}, P)  # forgot the fp32 master copy

    auto = seeded(MLP, 0, 16, [32], 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = auto(torch.randn(8, 16))
    y.float().sum().backward()
    assert "parameters and gradients torch.float32" in ch01.check_autocast(y, auto)
    with pytest.raises(AssertionError, match="autocast's output should be torch.bfloat16"):
        ch01.check_autocast(y.float(), auto)

    assert "12h^2 + 13h" in ch01.check_transformer_layer(12 * 64 * 64 + 13 * 64, 64, ratio=1.3)
    with pytest.raises(AssertionError, match="not within 2x"):
        ch01.check_transformer_layer(12 * 64 * 64 + 13 * 64, 64, ratio=2.4)

    cfg = mem.TrainingSetup(layers=32, hidden=4096, heads=32, seq=1024, batch=32)
    rows = breakdown_rows(cfg, 8)
    assert "8 with ZeRO-3: yes" in ch01.check_calculator(rows, cfg.params, n=8, device_gib=80)
    with pytest.raises(AssertionError, match=r"one 40 GiB device should be too small .* and 8 with ZeRO-3 enough"):
        ch01.check_calculator(rows, cfg.params, n=8, device_gib=40)  # 40 GiB devices: ZeRO-3 x8 needs ~49 GiB
    sharded_dp = [{**r, "optimizer": r["optimizer"] / 8} if r["strategy"] == "DP x8" else r for r in rows]
    with pytest.raises(AssertionError, match="DP x8 should keep every model state whole"):
        ch01.check_calculator(sharded_dp, cfg.params, n=8, device_gib=80)  # the mistake: DP is not ZeRO


def test_ch01_parallelism_checks_accept_the_four_splits_and_reject_wrong_ones():
    want = torch.randn(32, 4)
    samples = [list(range(r, 32, 4)) for r in range(4)]
    assert "exactly one rank" in ch01.check_data_parallel(samples, [want.tolist()] * 4, want, n_samples=32)
    with pytest.raises(AssertionError, match="rank 1's averaged gradient"):
        ch01.check_data_parallel(samples, [want, 2 * want, want, want], want, n_samples=32)  # a SUM, not a mean
    with pytest.raises(AssertionError, match="exactly one rank"):
        ch01.check_data_parallel([list(range(8))] * 4, [want] * 4, want, n_samples=32)  # no sampler: same samples

    units = [list(range(8 * r, 8 * r + 8)) for r in range(4)]
    assert "full output" in ch01.check_tensor_parallel(units, [want] * 4, want, n_units=32)
    with pytest.raises(AssertionError, match="rank 3's output"):
        ch01.check_tensor_parallel(units, [want, want, want, want / 4], want, n_units=32)  # a partial sum

    layers = [[0, 1], [2, 3], [4, 5], [6]]
    ticks = [[r] for r in range(4)]
    assert ch01.check_layer_parallel(layers, want, want, ticks, n_modules=7).startswith("4 ticks")
    with pytest.raises(AssertionError, match="expected 4 ticks"):
        ch01.check_layer_parallel(layers, want, want, [[0]] * 4, n_modules=7)  # no dependency between stages

    stages = [{"layers": l, "micro_batches": [0, 1, 2, 3], "ticks": [r + m for m in range(4)], "out": want.tolist(),
               "samples": list(range(32))} for r, l in enumerate(layers)]
    assert "7 ticks (M + N - 1)" in ch01.check_pipeline(stages, layers, want, M=4)
    serial = copy.deepcopy(stages)
    for r, p in enumerate(serial):
        p["ticks"] = [4 * r + m for m in range(4)]  # each stage waits for the whole batch: no overlap
    with pytest.raises(AssertionError, match="stage r should do micro-batch m at tick r \\+ m"):
        ch01.check_pipeline(serial, layers, want, M=4)

    table = [{"ranks holding each layer": [4], "ranks processing each sample": [1]},
             {"ranks holding each layer": [1], "ranks processing each sample": [4]}]
    assert "pipeline: each layer on 1 rank" in ch01.check_opposites(table, 4)
    with pytest.raises(AssertionError, match="pipeline should keep each layer on one rank"):
        ch01.check_opposites([table[0], table[0]], 4)  # "a mix of data and model parallelism"


# ---- chapter 2 ----------------------------------------------------------------------------------

def _groups(n):
    out = []
    for r in range(n):
        parity = [q for q in range(n) if q % 2 == r % 2]
        block = [q for q in range(n) if q // 2 == r // 2]
        out.append({"rank": r, "parity_group": parity, "parity_rank": parity.index(r),
                    "parity_sum": float(sum(q + 1 for q in parity)), "block_group": block,
                    "block_rank": block.index(r), "block_sum": float(sum(q + 1 for q in block)),
                    "world_sum": float(n * (n + 1) / 2),
                    "env": {"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n)}})
    return out


def _collectives(n=4):
    X = torch.stack([torch.tensor([10. * r + 1, 10. * r + 2]) for r in range(n)])
    X_BIG = torch.stack([10. * r + 1 + torch.arange(2. * n) for r in range(n)])
    res = []
    for r in range(n):
        rs = X_BIG.sum(0).tensor_split(n)[r].tolist()
        res.append({"broadcast": {"after": X[0].tolist()}, "reduce": {"after": X.sum(0).tolist() if r == 0 else None},
                    "all_reduce": {"after": X.sum(0).tolist()}, "all_gather": {"after": X.reshape(-1).tolist()},
                    "reduce_scatter": {"after": rs, "equivalent": rs},
                    "gather": {"after": X.reshape(-1).tolist() if r == 0 else None},
                    "scatter": {"after": X_BIG[0].tensor_split(n)[r].tolist()},
                    "all_to_all": {"after": torch.cat([X_BIG[j].tensor_split(n)[r] for j in range(n)]).tolist()},
                    "send_recv": {"after": X[r - r % 2].tolist()}, "isend_irecv": {"after": X[(r - 1) % n].tolist()}})
    return res, X, X_BIG


def test_ch02_group_env_and_backend_checks():
    assert "1 + ... + 2 = 3" in ch02.check_process_groups(_groups(2))
    assert "1 + ... + 4 = 10" in ch02.check_process_groups(_groups(4))
    leaked = _groups(4)
    leaked[3]["parity_sum"] = 10.0  # the group's all-reduce ran over the world
    with pytest.raises(AssertionError, match="rank 3: the parity group's sum 10.0 != 6"):
        ch02.check_process_groups(leaked)

    assert "WORLD_SIZE = 4" in ch02.check_torchrun_env(_groups(4))
    two_nodes = _groups(4)
    two_nodes[2]["env"]["LOCAL_RANK"] = "0"
    with pytest.raises(AssertionError, match="rank 2: one machine, so LOCAL_RANK should be 2"):
        ch02.check_torchrun_env(two_nodes)

    assert "USE_MPI" in ch02.check_backends({"gloo": True, "mpi": False}, {"MPI": "OFF", "GLOO": "ON"})
    with pytest.raises(AssertionError, match="MPI available True but the build says USE_MPI=OFF"):
        ch02.check_backends({"gloo": True, "mpi": True}, {"MPI": "OFF"})

    logs = [["entering new_group([0, 1])"], ["skipping new_group", "entering all_reduce over the world"]]
    skip = _run(["stopped", "error"], [None, WAIT.format(t=10)], logs=logs)
    where = {r.rank: r.log for r in skip.ranks}
    assert "10 s collective timeout" in ch02.check_skipped_new_group(skip, where, timeout_s=10)
    with pytest.raises(AssertionError, match="rank 0 should stop inside new_group"):
        ch02.check_skipped_new_group(skip, {0: ["entering new_group([0, 1])", "left new_group"], 1: logs[1]}, 10)

    dead = _run(["error", "stopped"], [WAIT.format(t=3), None])
    assert "ended the deadlock" in ch02.check_deadlock_ended(dead, timeout_s=3)
    with pytest.raises(AssertionError, match="no rank names the 3 s timeout"):
        ch02.check_deadlock_ended(_run(["error", "error"], ["exit code 1", "exit code 1"]), timeout_s=3)


def test_ch02_every_collective_against_one_process_and_wrong_moves_named():
    res, X, X_BIG = _collectives()
    for op in ch02._SAYS:
        assert ch02.check_collective(op, res, X, X_BIG).endswith("== the one-process reference")
    wrong = copy.deepcopy(res)
    wrong[1]["all_to_all"]["after"] = wrong[1]["scatter"]["after"]  # rank 1 kept rank 0's chunks only
    with pytest.raises(AssertionError, match="all_to_all, rank 1"):
        ch02.check_collective("all_to_all", wrong, X, X_BIG)
    wrong[2]["reduce_scatter"]["equivalent"] = [0.0, 0.0]
    with pytest.raises(AssertionError, match="reduce_scatter's all-reduce equivalent, rank 2"):
        ch02.check_collective("reduce_scatter", wrong, X, X_BIG)

    y = [X.sum(0)] * 4
    z = [X[[q for q in range(4) if q % 2 == r % 2]].sum(0) for r in range(4)]
    g = [list(X)] * 4
    assert ch02.check_live_collectives(y, z, g, X) == "live results == one-process reference on every rank"
    with pytest.raises(AssertionError, match="rank 0: the group's all_reduce gave"):
        ch02.check_live_collectives(y, y, g, X)  # the group argument forgotten: the world's sum

    renamed = {"all_gather_into_tensor": "all_gather_single", "reduce_scatter_tensor": "reduce_scatter_single"}
    assert "only the current names" in ch02.check_current_names(dist, renamed, ["dist.all_gather_single(out, x)"])
    with pytest.raises(AssertionError, match="still calls the deprecated \\['reduce_scatter_tensor'\\]"):
        ch02.check_current_names(dist, renamed, ["    dist.reduce_scatter_tensor(out, x)  # old"])


def test_ch02_cost_model_and_timing_claims_only_assert_on_a_quiet_machine():
    model = {"naive": lambda n: n - 1, "tree": lambda n: math.ceil(math.log2(n)), "ring": lambda n: 2 * (n - 1) / n}
    assert "ring < 2 tensors < tree < naive" in ch02.check_cost_model(model)
    with pytest.raises(AssertionError, match="on 16 ranks expected ring < 2 < tree < naive"):
        ch02.check_cost_model({**model, "ring": lambda n: n - 1 if n > 2 else 1})  # a ring that sends whole tensors

    sizes = (64 << 10, 1 << 20, 16 << 20)

    def sweep(big_busbw):
        return [{"algo": a, "nproc": n, "bytes": b, "time_s": 1e-3, "busbw": big_busbw if b == sizes[-1] else 1e8}
                for a in ("builtin", "naive", "ring") for n in (2, 4) for b in sizes]

    assert ch02.check_sweep(sweep(1e9), ("builtin", "naive", "ring"), (2, 4), sizes, quiet=True).startswith("big")
    assert "not asserted" in ch02.check_sweep(sweep(1e7), ("builtin", "naive", "ring"), (2, 4), sizes, quiet=False)
    with pytest.raises(AssertionError, match="big messages should use the link better"):
        ch02.check_sweep(sweep(1e7), ("builtin", "naive", "ring"), (2, 4), sizes, quiet=True)
    with pytest.raises(AssertionError, match="expected 18 positive timings"):
        ch02.check_sweep(sweep(1e9)[:-1], ("builtin", "naive", "ring"), (2, 4), sizes, quiet=False)

    runs = [{"world": n, "naive_s": 0.2 * n, "naive_model_s": 0.19 * n, "ring_s": 0.07, "ring_model_s": 0.066}
            for n in (4, 8)]
    assert "every rank count" in ch02.check_emulated_link(runs, quiet=True)
    with pytest.raises(AssertionError, match="8 ranks, ring: 0.050 s, below the link's 0.066 s"):
        ch02.check_emulated_link([runs[0], {**runs[1], "ring_s": 0.05}], quiet=False)


# ---- chapter 4 ----------------------------------------------------------------------------------

def _ddp(n=2):
    return [{"init_sum_before_wrap": 1.5 + r, "init_sum_after_wrap": 1.5, "data_sha": "ab12", "final_sha": "cd34",
             "epoch_loss": [2.31, 2.29, 2.27], "article_data_sha": f"e{r}", "saved_keys": ["0.weight", "0.bias"],
             "ddp_keys": ["module.0.weight", "module.0.bias"], "loaded_equal": True} for r in range(n)]


def test_ch04_checks_accept_ddp_runs_and_name_the_broken_guarantee():
    assert "rank 0's weights" in ch04.check_ddp_run(_ddp())
    no_broadcast = _ddp()
    no_broadcast[1]["init_sum_after_wrap"] = 2.5  # a wrapper that does not broadcast
    with pytest.raises(AssertionError, match="after the wrap every rank should hold rank 0's weights"):
        ch04.check_ddp_run(no_broadcast)
    drifted = _ddp()
    drifted[1]["final_sha"] = "ff00"
    with pytest.raises(AssertionError, match="final_sha should be the same on every rank"):
        ch04.check_ddp_run(drifted)

    shuffled = [[5, 1, 9], [2, 7, 0], [8, 3, 4]]
    assert "508 distinct" in ch04.check_set_epoch(shuffled, [shuffled[0]] * 3,
                                                  {"handed": 508, "distinct": 508, "repeated": 0}, samples=510, world=4)
    with pytest.raises(AssertionError, match="with set_epoch two consecutive epochs had the same order"):
        ch04.check_set_epoch([shuffled[0]] * 3, [shuffled[0]] * 3, {"handed": 508, "distinct": 508, "repeated": 0},
                             samples=510, world=4)
    with pytest.raises(AssertionError, match="drop_last=True: .*'repeated': 2"):
        ch04.check_set_epoch(shuffled, [shuffled[0]] * 3, {"handed": 512, "distinct": 510, "repeated": 2},
                             samples=510, world=4)

    runs = [{"max_rel_err": [3e-8, 6e-8, 9e-8, 1.2e-7]}] * 2
    assert "within 1e-05" in ch04.check_equals_single_process("torch DDP", runs, 1e-5)
    with pytest.raises(AssertionError, match="naive, rank 1: max relative error per step"):
        ch04.check_equals_single_process("naive", [runs[0], {"max_rel_err": [0.0, 0.5]}], 1e-5)  # a missing division

    g_local = [torch.randn(32, 16), torch.randn(32, 16)]
    mean = (g_local[0] + g_local[1]) / 2
    assert "mean of the ranks' local gradients" in ch04.check_ddp_gradients([mean, mean.clone()], g_local)
    with pytest.raises(AssertionError, match="not the mean of the local ones"):
        ch04.check_ddp_gradients([2 * mean, 2 * mean], g_local)  # a SUM, not divided by the world size
    with pytest.raises(AssertionError, match="DDP's gradients differ between ranks"):
        ch04.check_ddp_gradients(g_local, g_local)  # no all-reduce at all

    unused = [{"find_unused_False": "RuntimeError at step 1: Expected to have finished reduction ...",
               "find_unused_True": "ok"}] * 2
    assert "RuntimeError at step 1" in ch04.check_unused_parameters(unused)
    with pytest.raises(AssertionError, match="without the flag: 'ok'"):
        ch04.check_unused_parameters([{"find_unused_False": "ok", "find_unused_True": "ok"}] * 2)


def test_ch04_padding_is_checked_when_given():
    shuffled = [[5, 1, 9], [2, 7, 0], [8, 3, 4]]
    dropped = {"handed": 508, "distinct": 508, "repeated": 0}
    assert "padding: 2 repeats" in ch04.check_set_epoch(shuffled, [shuffled[0]] * 3, dropped, samples=510, world=4,
                                                        padded={"handed": 512, "distinct": 510, "repeated": 2})
    with pytest.raises(AssertionError, match="padding .*expected"):  # a sampler that drops instead of padding
        ch04.check_set_epoch(shuffled, [shuffled[0]] * 3, dropped, samples=510, world=4, padded=dropped)


def test_ch04_plain_script_run():
    logs = [["epoch 0: loss 2.3100 over 512 samples", "epoch 1: loss 2.2000 over 512 samples",
             "rank 0: 256 samples an epoch"], ["rank 1: 256 samples an epoch"]]
    assert "256 samples each" in ch04.check_plain_script(logs, samples=512, saved=True)
    with pytest.raises(AssertionError, match="rank 1 should print"):  # a rank that trained on everything
        ch04.check_plain_script([logs[0], ["rank 1: 512 samples an epoch"]], samples=512, saved=True)
    with pytest.raises(AssertionError, match="over all 512 samples"):  # rank 0's share printed as the epoch loss
        ch04.check_plain_script([[ln.replace("over 512", "over 256") for ln in logs[0]], logs[1]], samples=512,
                                saved=True)
    with pytest.raises(AssertionError, match="did not fall"):
        ch04.check_plain_script([list(reversed(logs[0][:2])) + logs[0][2:], logs[1]], samples=512, saved=True)
    with pytest.raises(AssertionError, match="checkpoint"):
        ch04.check_plain_script(logs, samples=512, saved=False)


def test_ch04_overlap_order_and_verdict():
    trace = [("grad", "2.bias"), ("grad", "2.weight"), ("launch", 0), ("grad", "0.bias"), ("grad", "0.weight"),
             ("launch", 1)]
    assert "2 gradients still to compute, 0.weight" in ch04.check_overlap_order(trace, first_layer="0.weight")
    with pytest.raises(AssertionError, match="after 0.weight's gradient"):  # all-reduces only after backward
        ch04.check_overlap_order([t for t in trace if t[0] == "grad"] + [("launch", 0), ("launch", 1)], "0.weight")

    o = {"compute_s": 0.16, "comm_s": 0.07, "overlap_s": 0.19, "deferred_s": 0.25, "late": 0, "transfers": 10}
    assert "0.76x the 250 ms without it (faster)" in ch04.overlap_verdict(o, quiet=True)
    slow = {**o, "overlap_s": 0.26}
    assert "(not faster in this run)" in ch04.overlap_verdict(slow, quiet=False)  # a busy machine: said, not asserted
    with pytest.raises(AssertionError, match="overlap should beat no overlap"):
        ch04.overlap_verdict(slow, quiet=True)


def test_ch04_join():
    from types import SimpleNamespace as NS

    def run(ok, statuses, results=()):
        return NS(ok=ok, ranks=[NS(rank=r, status=s) for r, s in enumerate(statuses)], results=list(results))

    uneven = run(False, ["error", "error"])
    joined = run(True, ["ok"] * 2, [{"batches": [4, 4], "final_sha": "a"}, {"batches": [3, 3], "final_sha": "a"}])
    assert "2 batches apart over 2 epochs, identical replicas" in ch04.check_join(uneven, joined)
    with pytest.raises(AssertionError, match="should make the job fail"):
        ch04.check_join(run(True, ["ok", "ok"]), joined)
    drifted = run(True, ["ok"] * 2, [{"batches": [4, 4], "final_sha": "a"}, {"batches": [3, 3], "final_sha": "b"}])
    with pytest.raises(AssertionError, match="replicas differ"):
        ch04.check_join(uneven, drifted)
