"""Chapter 13's cost model, fit, planner and failure maths against hand-computed values (pure Python,
no processes), and the scale_bench program once on 2 ranks."""
from __future__ import annotations

import math
import random

import pytest

from disttutor.sharding import memory as M
from disttutor.scale import costmodel as C
from disttutor.scale import failures as F
from disttutor.scale import fit, hardware, local, planner, shapes


def test_bus_factors_are_nccl_tests():
    # doc/PERFORMANCE.md of nccl-tests: 2(n-1)/n, (n-1)/n, (n-1)/n, 1.
    assert C.bus_factor("all_reduce", 8) == 2 * 7 / 8
    assert C.bus_factor("all_gather", 4) == 3 / 4
    assert C.bus_factor("reduce_scatter", 2) == 1 / 2
    assert C.bus_factor("send_recv", 16) == 1.0
    assert C.busbw("all_reduce", 1e9, 0.01, 8) == pytest.approx(1e11 * 1.75)
    with pytest.raises(ValueError, match="op must be"):
        C.bus_factor("all_to_all", 2)


def test_collective_time_by_hand():
    link = C.Link(alpha=1e-5, bandwidth=1e10)
    # all-reduce of 1 GB on 4 ranks: 1e-5 + 1.5 * 1e9 / 1e10 = 0.15001 s
    assert C.collective_time("all_reduce", 1e9, 4, link) == pytest.approx(0.15001, rel=1e-12)
    assert C.collective_time("all_gather", 8e8, 8, link) == pytest.approx(1e-5 + 0.875 * 0.08, rel=1e-12)
    assert C.collective_time("all_reduce", 1e9, 1, link) == 0.0  # a group of one sends nothing
    assert C.compute_time(2e12, 1e12) == 2.0
    # MLP 16 -> 32 -> 4 on 8 rows: 6 * 8 * (16*32 + 32*4) = 30720 FLOPs
    assert C.mlp_step_flops(8, [16, 32, 4]) == 30720


def test_fit_recovers_known_alpha_beta():
    rng = random.Random(0)
    alpha, bw, n = 150e-6, 1.2e9, 2
    sizes = [4096, 65536, 1 << 20, 4 << 20, 16 << 20]
    # +-5 % multiplicative noise, as a loaded machine gives: the fit must still land within 15 %
    # (alpha) and 5 % (bandwidth, pinned by the large sizes).
    times = [C.collective_time("all_gather", s, n, C.Link(alpha, bw)) * (1 + rng.uniform(-0.05, 0.05)) for s in sizes]
    got = fit.fit_link("all_gather", sizes, times, n)
    assert got.alpha == pytest.approx(alpha, rel=0.15)
    assert got.bandwidth == pytest.approx(bw, rel=0.05)
    exact = [C.collective_time("all_reduce", s, 4, C.Link(alpha, bw)) for s in sizes]
    got = fit.fit_link("all_reduce", sizes, exact, 4)  # noise-free: exact up to float rounding
    assert got.alpha == pytest.approx(alpha, rel=1e-9) and got.bandwidth == pytest.approx(bw, rel=1e-9)
    assert fit.fit_gamma([1e6, 1e8, 1e9], [1.0, 1e-3, 1e-2]) == pytest.approx(1e11)
    with pytest.raises(ValueError, match="does not grow"):
        fit.fit_link("all_reduce", [1e3, 1e6], [2e-3, 1e-3], 2)


def test_shapes_count_llama_parameters():
    # Reported sizes: 8B, 70B, 405B (the Llama 3 paper); the count from the reported shape lands
    # within 1.5 % of each name (names are rounded).
    for shape, billions in ((shapes.LLAMA3_8B, 8), (shapes.LLAMA3_70B, 70), (shapes.LLAMA3_405B, 405)):
        assert shape.params() / 1e9 == pytest.approx(billions, rel=0.015)
    g = shapes.gpt(12, 768, 12)
    assert g.params() == M.transformer_params(12, 768)


@pytest.mark.parametrize("kw", [dict(dp=4), dict(dp=4, zero=1), dict(dp=4, zero=3), dict(tp=4), dict(pp=4),
                                dict(dp=2, tp=2, pp=2, zero=2)])
def test_planner_memory_is_chapter_1s_calculator(kw):
    setup = M.TrainingSetup(layers=24, hidden=2048, heads=16, seq=1024, batch=16, **kw)
    want = M.per_device(setup)
    lay = planner.Layout(**{"zero": 0, **kw}, schedule="gpipe", microbatch=16 // setup.dp, flash=False, sp=False)
    # chapter 1 counts the steady parts: no units in flight, logits or allocator reserve
    got = planner.memory(shapes.gpt(24, 2048, 16, max_seq=1024), lay, 1024, 16, transient=False)
    for part in M.PARTS + ("total",):
        assert got[part] == pytest.approx(want[part], rel=1e-12), part


def test_planner_extensions_of_the_calculator():
    s = shapes.LLAMA3_8B
    base = planner.memory(s, planner.Layout(dp=8, zero=3), 8192, 16)
    cp = planner.memory(s, planner.Layout(dp=4, cp=2, zero=3), 8192, 8)
    assert cp["weights"] == pytest.approx(base["weights"])               # ZeRO shards over dp * cp
    assert cp["activations"] == pytest.approx(base["activations"] / 2)   # half the tokens per GPU
    ac = planner.memory(s, planner.Layout(dp=8, zero=3, checkpointing="full"), 8192, 16)
    assert ac["activations"] < base["activations"] / 5


def test_predict_by_hand_pure_fsdp():
    s, hw = shapes.LLAMA3_8B, hardware.H100
    p = planner.predict(s, planner.Layout(dp=8, zero=3), hw, 8192, 16, efficiency=1.0)
    tokens_per_gpu = 2 * 8192
    compute = tokens_per_gpu * s.flops_per_token(8192) / 989.4e12
    assert p.compute_s == pytest.approx(compute, rel=1e-12)
    # FSDP on NVLink: 3 x 16 GB x 7/8 / 450 GB/s = 0.093 s < compute: fully hidden
    assert p.comm_s["dp"] == 0.0 and p.bubble_s == 0.0 and p.mfu == pytest.approx(1.0)
    slow = planner.predict(s, planner.Layout(dp=8, zero=3), hw, 8192, 16, efficiency=0.5)
    assert slow.step_s == pytest.approx(2 * p.step_s)
    # a pipeline's bubble: (pp - 1) / (v m) of compute
    pp = planner.predict(s, planner.Layout(dp=2, pp=4, v=2), hw, 8192, 32, efficiency=1.0)
    assert pp.bubble_s == pytest.approx(pp.compute_s * 3 / (2 * 16))
    with pytest.raises(ValueError, match="multiple of dp"):
        planner.predict(s, planner.Layout(dp=3), hw, 8192, 16)


def test_rules_and_ranking():
    r = planner.rules(shapes.LLAMA3_70B, hardware.H100)
    assert r["fsdp_min_tokens_per_replica"] == pytest.approx(989.4e12 / 50e9)
    assert r["tp_max_degree"] == pytest.approx(28672 * 450e9 / 989.4e12)
    ranked = planner.rank_layouts(shapes.LLAMA3_70B, 512, hardware.H100, 8192, 512, efficiency=0.5)
    assert ranked and all(p.fits for p in ranked)
    assert [p.tokens_per_s_per_gpu for p in ranked] == sorted((p.tokens_per_s_per_gpu for p in ranked), reverse=True)


def test_failures_math():
    m_job = F.mtbf_job(54 * 24 * F.HOUR, 419)
    assert m_job / F.HOUR == pytest.approx(54 * 24 / 419)
    assert F.mtbf_per_gpu(m_job, 16384) == pytest.approx(m_job * 16384)
    assert F.young_daly(60.0, 3 * F.HOUR) == pytest.approx(math.sqrt(2 * 60 * 3 * 3600))
    # at the optimum, the two losses C/tau and tau/(2M) are equal: efficiency = 1 - 2 C / tau
    tau = F.young_daly(60.0, 3 * F.HOUR)
    assert F.efficiency(tau, 60.0, 3 * F.HOUR) == pytest.approx(1 - 2 * 60 / tau)
    assert F.efficiency(tau * 1.3, 60.0, 3 * F.HOUR) < F.efficiency(tau, 60.0, 3 * F.HOUR)
    assert F.plan(16384, F.mtbf_per_gpu(m_job, 16384), 60.0)["mtbf_s"] == pytest.approx(m_job)


def test_local_predictions_by_hand():
    m = C.Machine({op: C.Link(1e-4, 1e9) for op in C.COLLECTIVES}, gamma=1e11, n=2)
    # MLP 16 -> 512 -> 4, 64 rows on 2 ranks; one bucket of all gradients
    d = local.ddp_step(m, 16, (512,), 4, 64, 2, 1 << 22)
    params = 16 * 512 + 512 + 512 * 4 + 4
    assert d["buckets"] == 1
    assert d["comm"] == pytest.approx(1e-4 + 1.0 * params * 4 / 1e9)
    assert d["compute"] == pytest.approx(6 * 32 * (16 * 512 + 512 * 4) / 1e11)
    assert local.ddp_buckets([4, 4, 4, 4], 8, 4) == [4, 8, 4]
    p = local.pipeline_step(m, 16, 64, 4, 1, 32, 4, 2)
    assert p["bubble"] == pytest.approx(p["compute"] / 4)  # (p-1) = 1 slot of m = 4


def test_overhead_terms_by_hand():
    m = C.Machine({op: C.Link(1e-4, 1e9) for op in C.COLLECTIVES}, gamma=1e11, n=2)
    small = {"total": 0.002}
    assert local.fixed_overhead(0.005, small) == pytest.approx(0.003)
    assert local.fixed_overhead(0.001, small) == 0.0  # a small run faster than its model: no negative cost
    base = local.ddp_step(m, 16, (512,), 4, 64, 2, 1 << 22)
    got = local.with_overheads(base, 1000, "sgd", 0.004, {"sgd": 2e-9, "adamw": 9e-9})
    assert got["update"] == pytest.approx(2e-6) and got["fixed"] == 0.004
    assert got["total"] == pytest.approx(base["total"] + 2e-6 + 0.004)
    ddp = {"hidden": (512,), "batch": 64, "bucket_cap": 1 << 22}
    fsdp = {"time_dim": 32, "time_ff": 64, "batch": 8}
    pipe = {"width": 64, "layers_per_stage": 1, "batch": 32, "microbatches": 4}
    el = local.updated_params(ddp, fsdp, pipe, 2)
    assert el["DDP (ch 4)"] == (16 * 512 + 512 + 512 * 4 + 4, "sgd")
    assert el["FSDP2 (ch 11)"][0] * 2 == el["DDP (ch 11)"][0]  # FSDP2 updates a half shard on 2 ranks
    assert el["GPipe (ch 7)"] == (16 * 64 + 64, "sgd")  # stage 0 (16 -> 64) is larger than stage 1 (64 -> 4)
    assert local.predict_runs(m, ddp, fsdp, pipe, 2)["DDP (ch 4)"] == base


def test_profiled_compute_by_hand():
    m = C.Machine({op: C.Link(1e-4, 1e9) for op in C.COLLECTIVES}, gamma=1e11, n=2)
    ddp = {"hidden": (512,), "batch": 64, "bucket_cap": 1 << 22}
    fsdp = {"time_dim": 32, "time_ff": 64, "batch": 8}
    pipe = {"width": 64, "layers_per_stage": 1, "batch": 32, "microbatches": 4}
    assert local.compute_args(ddp, fsdp, pipe, 2) == {
        "models": ("mlp", "tinylm", "stage"), "rows": (32, 4, 8), "hidden": (512,), "dim": 32, "ff": 64,
        "width": 64, "layers_per_stage": 1, "microbatches": 4}
    pred = local.predict_runs(m, ddp, fsdp, pipe, 2)
    alone = {"mlp": 0.010, "tinylm": 0.020, "stage": 0.040}
    got = local.profiled(pred, alone, 4, 2)
    # measured compute replaces FLOPs / gamma; the communication is the first model's
    assert got["DDP (ch 4)"]["total"] == pytest.approx(0.010 + pred["DDP (ch 4)"]["comm"])
    for run in ("DDP (ch 11)", "FSDP2 (ch 11)"):  # both compute the TinyLM's forward and backward
        assert got[run]["compute"] == 0.020 and got[run]["comm"] == pred[run]["comm"]
    # GPipe: the slowest rank's m micro-batches, plus p - 1 idle slots of t_c / m
    assert got["GPipe (ch 7)"]["bubble"] == pytest.approx(0.040 / 4)
    assert got["GPipe (ch 7)"]["total"] == pytest.approx(0.040 * 5 / 4 + pred["GPipe (ch 7)"]["comm"])
    # measured hand-offs: each of the 2 (p - 1) phases waits for the slowest of its m = 4
    with_h = local.profiled(pred, alone, 4, 2, handoffs=[0.001, 0.003])
    assert with_h["GPipe (ch 7)"]["comm"] == pytest.approx(2 * local.expected_max([0.001, 0.003], 4))
    assert with_h["DDP (ch 4)"] == got["DDP (ch 4)"]  # only the pipeline hands off


def test_expected_max_by_hand():
    # two equally likely values: the largest of k draws is the small one only if every draw is (1/2**k)
    assert local.expected_max([1.0, 3.0], 1) == pytest.approx(2.0)
    assert local.expected_max([3.0, 1.0], 4) == pytest.approx(1 / 16 + 3 * 15 / 16)
    assert local.expected_max([2.0] * 5, 7) == pytest.approx(2.0)
    rng = random.Random(0)  # against sampling: 20,000 maxima of 4 draws
    xs = [rng.expovariate(1.0) for _ in range(20)]
    sim = sum(max(rng.choice(xs) for _ in range(4)) for _ in range(20000)) / 20000
    assert local.expected_max(xs, 4) == pytest.approx(sim, rel=0.03)  # 3 %: sampling error of 20,000 maxima
    with pytest.raises(ValueError, match="k >= 1"):
        local.expected_max([1.0], 0)


@pytest.mark.timeout(120)
def test_compute_bench_program(no_leftovers):
    import disttutor

    pipe = {"width": 32, "layers_per_stage": 1, "batch": 16, "microbatches": 2}
    args = local.compute_args({"hidden": (32, 32), "batch": 16}, {"time_dim": 16, "time_ff": 32, "batch": 4}, pipe, 2)
    res = disttutor.launch("compute_bench", nproc=2, args={**args, "iters": 2, "warmup": 1}, stream=False, timeout=60)
    r = res.results
    for model in ("mlp", "tinylm", "stage"):
        assert r[0]["seconds"][model] > 0 and len(r[0]["times_s"][model]) == 2, model
        assert r[0]["times_s"][model] == r[1]["times_s"][model]  # every rank reports the slowest rank's
    params = {model: [x["params"][model] for x in r] for model in r[0]["params"]}
    # each rank times its own stage: the layers chapter 13's model counts
    assert params["stage"] == local.stage_params(16, 32, 4, 1, 2)
    assert params["mlp"] == [sum(local.mlp_param_bytes([16, 32, 32, 4])) // 4] * 2
    # TinyLM: the tied weight once, the frozen positional table too
    assert params["tinylm"] == [sum(local.tinylm_units(16, 32, local.VOCAB, local.SEQ).values())] * 2


def test_compute_bench_rejects_bad_input():
    from disttutor.programs.compute_bench import ComputeBenchConfig

    with pytest.raises(ValueError, match=r"unknown model\(s\) \['cnn'\]; choose from mlp, tinylm, stage"):
        ComputeBenchConfig(models=("mlp", "cnn"), rows=(8, 8))
    with pytest.raises(ValueError, match=r"--rows needs one count >= 1 per model \(2\), got \(8,\)"):
        ComputeBenchConfig(models=("mlp", "stage"), rows=(8,))
    with pytest.raises(ValueError, match="hidden widths"):
        ComputeBenchConfig(hidden=(8, 0))


def test_hardware_constants_are_tagged():
    for hw in hardware.PRESETS.values():
        for name, c in hw.constants().items():
            assert c.tag in hardware.TAGS and c.source, name
    assert hardware.H100.peak_flops.tag == "reported" and hardware.H100.intra_bw.tag == "derived"
    with pytest.raises(ValueError, match="tag"):
        hardware.Constant(1.0, "s", "guessed", "x")


@pytest.mark.timeout(120)
def test_scale_bench_program(no_leftovers):
    import disttutor

    res = disttutor.launch("scale_bench", nproc=2, args={"sizes": (4096, 1 << 20), "iters": 2, "matmul": (64, 128),
                                                         "checkpoint_mb": 1.0, "handoff_bytes": 4096,
                                                         "handoff_busy_ms": 2.0, "handoff_iters": 3},
                           stream=False, timeout=100)
    r = res.results[0]
    assert {row["op"] for row in r["rows"]} == set(C.COLLECTIVES)
    assert all(row["time_s"] > 0 for row in r["rows"]) and len(r["rows"]) == 8
    assert [m["n"] for m in r["matmul"]] == [64, 128]
    ck = r["checkpoint"]
    # fp32 weights + two AdamW moments = 12 bytes per parameter, plus DCP metadata and RNG files
    assert ck["bytes_on_disk"] >= 12 * ck["params"] and ck["seconds"] > 0
    # sizes are S in nccl-tests' sense, rounded to whole float32 shards
    assert {row["bytes"] for row in r["rows"]} == {4096, 1 << 20}
    # both optimizers' updates timed, per element; AdamW does more element-wise passes than plain SGD
    u = r["update_s_per_elem"]
    assert set(u) == {"sgd", "adamw"} and u["adamw"] > u["sgd"] > 0
    # the hand-off: rank 1's arrival times, one per iteration, their mean
    h = r["handoff"]
    assert h["bytes"] == 4096 and len(h["times_s"]) == 3 and min(h["times_s"]) > 0
    assert h["mean_s"] == pytest.approx(sum(h["times_s"]) / 3)


def test_figures_and_planner_view():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from disttutor.viz import scale as viz

    rows, fig = viz.planner_view("Llama 3 70B", 512, "H100", 8192, 512, efficiency=0.5, top=4)
    assert len(rows) == 4 and fig is not None and all(r["fits"] for r in rows)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == [r["layout"] for r in rows]  # the bars are the ranked layouts, in order
    plt.close(fig)
    link = C.Link(1e-4, 1e9)
    data = [{"op": "all_reduce", "bytes": s, "time_s": C.collective_time("all_reduce", s, 2, link)}
            for s in (4096, 1 << 20)]
    plt.close(viz.plot_fit(data, {"all_reduce": link}, 2))
    plt.close(viz.plot_checkpoint_interval(3.0, 3 * 3600))
    with pytest.raises(ValueError, match="unknown model"):
        viz.planner_view("GPT-5")


def test_problems_answers_and_checker(capsys):
    from disttutor.scale import problems

    assert sum(p.rel_tol is not None for p in problems.PROBLEMS.values()) >= 3 and len(problems.PROBLEMS) >= 6
    # busbw by hand: 2^30 / 4 ms * 1.75 = 469.8 GB/s
    assert problems.check("busbw", 470.0) and not problems.check("busbw", 268.4)
    # by hand: 54 days / 419 on 16,384 GPUs, at the same rate per GPU on half the GPUs: twice the MTBF
    assert problems.check("mtbf", 2 * 54 * 24 / 419) and not problems.check("mtbf", 54 * 24 / 419)
    # A100: C/W = 312e12 / 25e9 tokens; F W / C = 28,672 x 300e9 / 312e12-way; the H100 figures are wrong here
    assert problems.check("fsdp_tokens", 312e12 / 25e9) and not problems.check("fsdp_tokens", 989.4e12 / 50e9)
    assert problems.check("tp_degree", 28672 * 300e9 / 312e12) and not problems.check("tp_degree", 13.0)
    problems.answer("bubble")
    assert "15 / 128" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no checker"):
        problems.check("bubble", 0.1)
    with pytest.raises(ValueError, match="no problem"):
        problems.answer("nope")


def test_scale_bench_handoff_rejects_bad_input():
    from disttutor.programs.scale_bench import ScaleBenchConfig

    with pytest.raises(ValueError, match="handoff_busy_ms must be > 0, got 0.0"):
        ScaleBenchConfig(handoff_busy_ms=0.0)
    with pytest.raises(ValueError, match="handoff_bytes"):
        ScaleBenchConfig(handoff_bytes=-1)


@pytest.mark.timeout(120)
def test_sharding_time_mode_reports_what_chapter_13_predicts(no_leftovers):
    import platform

    import disttutor

    res = disttutor.launch("sharding", nproc=2, args={"time": True, "batch": 8, "steps": 2, "rounds": 2,
                                                      "time_dim": 16, "time_ff": 32}, stream=False, timeout=100)
    t = res.results[0]["timing"]
    assert set(t["step_ms"]) == {"ddp", "fsdp2"} and all(len(v) == 2 for v in t["samples_ms"].values())
    # the two FSDP2 units the program wraps are the ones the model counts
    units = local.tinylm_units(16, 32, local.VOCAB, local.SEQ)
    assert t["unit_params"] == {"mlp": units["mlp"], "root": units["root"]}
    assert t["local_tokens"] == 8 // 2 * local.SEQ
    # subnormals flushed where torch supports it (x86 with SSE3, AArch64), and said so
    assert t["flush_denormal"] is (platform.machine().lower() in ("x86_64", "amd64", "aarch64", "arm64"))
