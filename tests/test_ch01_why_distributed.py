"""Chapter 1: memory formulas vs measured tensors, the calculator callback, and the
parallelism demo program's splits (one 4-rank launch checks all four modes)."""
from __future__ import annotations

import types

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
from torch import nn

import disttutor
from disttutor.sharding import memory as mem
from disttutor.workloads.data import regression
from disttutor.workloads.models import MLP, seeded
from disttutor.programs import parallelism as par
from disttutor.viz import memory as viz

W = 4  # ranks of the demo launch


# --- formulas vs measurements ---------------------------------------------------------------

@pytest.mark.parametrize("name,make", [
    ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1)),
    ("momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
    ("adam", lambda ps: torch.optim.Adam(ps, lr=1e-3)),
])
def test_fp32_bytes_per_param_match_real_tensors(name, make):
    model = seeded(MLP, 0, 24, [40, 40], 3)
    opt = make(model.parameters())
    nn.functional.mse_loss(model(torch.randn(5, 24)), torch.randn(5, 3)).backward()
    opt.step()
    got = mem.measured_state_bytes(model, opt)
    P = sum(p.numel() for p in model.parameters())
    want = mem.bytes_per_param("fp32", name)
    # Exact: byte counts are integers, nothing is approximate here.
    assert {k: got[k] for k in want} == {k: v * P for k, v in want.items()}
    n_tensors = len(list(model.parameters()))
    assert got["step_counters"] == (4 * n_tensors if name == "adam" else 0)


def test_adam_is_16_bytes_per_param_in_both_precisions():
    for precision in mem.PRECISIONS:
        assert sum(mem.bytes_per_param(precision, "adam").values()) == 16
    assert mem.bytes_per_param("mixed", "adam") == {"weights": 2, "gradients": 2, "optimizer": 12}


def test_mlp_activation_formula_is_exact():
    model = seeded(MLP, 0, 24, [40, 56], 3)
    for batch in (1, 7):
        x = torch.randn(batch, 24)
        got = mem.saved_activation_bytes(lambda: model(x).sum(), params=model.parameters())
        assert got == mem.mlp_activation_bytes(batch, 24, [40, 56], elem_bytes=4)


def test_transformer_formulas():
    h, a = 32, 4
    layer = nn.TransformerEncoderLayer(h, a, 4 * h, batch_first=True)
    block = sum(p.numel() for p in layer.parameters())
    assert block == 12 * h * h + 13 * h
    # The model formula = L blocks + embeddings + final norm.
    assert mem.transformer_params(3, h, vocab=50, max_seq=10) == 3 * block + 60 * h + 2 * h
    # The generalised activation estimate reduces to the paper's 34 sbh + 5 a s^2 b for 2-byte values.
    s, b = 128, 3
    assert mem.activation_bytes_per_layer(s, b, h, a, 2) == s * b * h * 34 + 5 * a * s * s * b
    # ... and to 10 sbh + 24 sbh / t + 5 a s^2 b / t with tensor parallelism (t = 4).
    assert mem.activation_bytes_per_layer(s, b, h, a, 2, tp=4) == s * b * h * (10 + 24 / 4) + 5 * a * s * s * b / 4
    # Order of magnitude against what PyTorch eager really saves (an estimate for another implementation).
    x = torch.randn(b, 16, h)
    got = mem.saved_activation_bytes(lambda: layer(x), params=layer.parameters())
    assert 0.5 < got / mem.activation_bytes_per_layer(16, b, h, a, 4) < 2.0


def test_strategies_change_the_right_parts():
    cfg = mem.TrainingSetup(layers=8, hidden=256, heads=8, seq=128, batch=16)
    n = 4
    one = mem.per_device(cfg)
    s = {k: mem.per_device(v) for k, v in mem.strategies(cfg, n).items()}
    states = ("weights", "gradients", "optimizer")
    assert one["weights"] + one["gradients"] + one["optimizer"] == 16 * cfg.params
    assert all(s["DP x4"][k] == one[k] for k in states)            # DP replicates the model states
    assert s["DP x4"]["activations"] == pytest.approx(one["activations"] / n)
    z1, z2, z3 = s["ZeRO-1 x4"], s["ZeRO-2 x4"], s["ZeRO-3/FSDP x4"]
    assert (z1["optimizer"], z1["gradients"], z1["weights"]) == (one["optimizer"] / n, one["gradients"], one["weights"])
    assert (z2["gradients"], z2["weights"]) == (one["gradients"] / n, one["weights"])
    assert all(z3[k] == one[k] / n for k in states)
    for name in ("tensor x4", "pipeline x4"):
        assert all(s[name][k] == one[k] / n for k in states)
    assert s["pipeline x4"]["activations"] == pytest.approx(one["activations"] / n)
    # Tensor parallel keeps the un-split 10 sbh (2-byte) part of every layer on every device.
    assert one["activations"] / n < s["tensor x4"]["activations"] < one["activations"]
    # Shapes that cannot be split are left out, not rounded.
    assert "pipeline x3" not in mem.strategies(cfg, 3) and "DP x3" not in mem.strategies(cfg, 3)


@pytest.mark.parametrize("kw,msg", [
    ({"precision": "fp8"}, "precision must be one of"), ({"optimizer": "lamb"}, "optimizer must be one of"),
    ({"zero": 4}, "ZeRO stage"), ({"tp": 5}, "divisible by tp"), ({"pp": 5}, "divisible by pp"),
    ({"dp": 3}, "divisible by dp"), ({"batch": 0}, "positive integer"), ({"heads": 7}, "divisible by heads"),
])
def test_bad_memory_config_is_a_clear_error(kw, msg):
    with pytest.raises(ValueError, match=msg):
        mem.TrainingSetup(**kw)


# --- the calculator without a display ---------------------------------------------------------

def test_calculator_view_returns_the_formula_numbers_and_a_figure():
    import matplotlib.pyplot as plt

    rows, fig = viz.calculator_view("GPT 1.3B-like (24 x 2048)", batch=16, seq=512, precision="fp32",
                                    optimizer="momentum", n=4)
    cfg = mem.TrainingSetup(layers=24, hidden=2048, heads=16, seq=512, batch=16, precision="fp32", optimizer="momentum")
    expect = {name: mem.per_device(c) for name, c in mem.strategies(cfg, 4).items()}
    assert [r["strategy"] for r in rows] == list(expect)
    for r in rows:
        for k in (*mem.PARTS, "total"):
            assert r[k] == round(expect[r["strategy"]][k] / mem.GIB, 3)  # the rows show GiB to 3 decimals
    ax = fig.axes[0]
    assert len(ax.patches) == len(mem.PARTS) * len(rows)  # one stacked segment per part per strategy
    assert [t.get_text() for t in ax.get_xticklabels()] == list(expect)
    plt.close(fig)
    with pytest.raises(ValueError, match="unknown preset"):
        viz.calculator_view("GPT-5")


def test_calculator_widget_redraws_on_change():
    ui = viz.calculator()
    preset, n_slider = ui.children[0].children
    assert ui.rows == viz.calculator_view(preset.value, n=n_slider.value, batch=32, seq=1024)[0]
    n_slider.value = 16  # the observer redraws: the numbers on screen follow the control
    assert ui.rows == viz.calculator_view(preset.value, n=16, batch=32, seq=1024)[0]
    assert ui.rows[-1]["strategy"] == "pipeline x16"
    import matplotlib.pyplot as plt

    plt.close("all")


# --- the demo program ---------------------------------------------------------------------------

def test_split_range_is_a_balanced_disjoint_cover():
    for n in (1, 4, 7, 32):
        for parts in range(1, n + 1):
            blocks = [par.split_range(n, parts, i) for i in range(parts)]
            assert [i for b in blocks for i in b] == list(range(n))
            assert max(map(len, blocks)) - min(map(len, blocks)) <= 1


def test_bad_split_config_is_a_clear_error():
    with pytest.raises(ValueError, match="mode must be one of"):
        par.SplitConfig(mode="model")
    with pytest.raises(ValueError, match="divide samples"):
        par.SplitConfig(samples=30, micro_batches=4)
    # The checks that need the world size run before any collective (a fake context is enough).
    ctx = types.SimpleNamespace(rank=0, world_size=4)
    with pytest.raises(ValueError, match="DistributedSampler pads"):
        par.data_parallel(par.SplitConfig(samples=30, micro_batches=1), ctx)
    with pytest.raises(ValueError, match="cannot fill 5 stages"):
        par.pipeline_parallel(par.SplitConfig(mode="pipeline"), types.SimpleNamespace(rank=0, world_size=5))
    with pytest.raises(ValueError, match="do not split over 3 ranks"):
        par.tensor_parallel(par.SplitConfig(mode="tensor"), types.SimpleNamespace(rank=0, world_size=3))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_every_mode_splits_what_it_claims_and_matches_one_process(no_leftovers):
    res = disttutor.launch("parallelism", nproc=W, args={"mode": "all"}, stream=False, timeout=150)
    assert res.ok, res.summary()
    R = res.results
    X, Y = regression(n=32, d_in=16, d_out=4, seed=0).tensors

    # data: disjoint cover of the samples; the whole model everywhere; averaged grad == full-batch grad.
    data = [R[r]["data"] for r in range(W)]
    assert sorted(i for d in data for i in d["samples"]) == list(range(32))
    ref = seeded(MLP, 0, 16, [32, 32, 32], 4)
    assert all(d["layers"] == list(range(len(ref))) for d in data)
    nn.functional.mse_loss(ref(X), Y).backward()
    g = torch.cat([p.grad.reshape(-1) for p in ref.parameters()])
    for d in data:  # 4 shard means + all-reduce vs one mean: float32 rounding only
        torch.testing.assert_close(torch.tensor(d["grad"]), g, rtol=1e-5, atol=1e-6)

    # tensor: disjoint cover of the hidden units; every rank's output == the full MLP's.
    ten = [R[r]["tensor"] for r in range(W)]
    assert sorted(i for t in ten for i in t["hidden_units"]) == list(range(32))
    with torch.no_grad():
        want_t = seeded(MLP, 0, 16, [32], 4)(X)
        want = ref(X)
    for t in ten:  # four partial sums added by all-reduce instead of one dot product: rounding only
        torch.testing.assert_close(torch.tensor(t["out"]), want_t, rtol=1e-5, atol=1e-6)

    # layer / pipeline: disjoint cover of the modules, the same split, every stage sees every sample.
    for mode, M in (("layer", 1), ("pipeline", 4)):
        st = [R[r][mode] for r in range(W)]
        assert sorted(i for s in st for i in s["layers"]) == list(range(len(ref)))
        assert all(s["samples"] == list(range(32)) for s in st)
        assert all(s["ticks"] == [r + m for m in range(M)] for r, s in enumerate(st))
        assert all(s["out"] is None for s in st[:-1])
        # Row-wise ops, but kernels may block 8 rows differently from 32: default float32 tolerances.
        torch.testing.assert_close(torch.tensor(st[-1]["out"]), want)
        assert sum(s["params_held"] for s in st) == sum(p.numel() for p in ref.parameters())
    assert [R[r]["layer"]["layers"] for r in range(W)] == [R[r]["pipeline"]["layers"] for r in range(W)]
