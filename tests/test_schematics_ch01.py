"""Chapter 1's schematic: ZeRO-1/2/3 partitions and the bytes each strategy sends per step (no launches)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from disttutor.sharding import memory as mem  # noqa: E402
from disttutor.viz import memory as vmem  # noqa: E402
from disttutor.viz.zero_partition_traffic import held_bytes, sent_bytes, traffic_rows, zero_schematic  # noqa: E402

CALC = dict(preset="GPT 7B-like (32 x 4096)", batch=32, seq=1024, precision="mixed", optimizer="adam", n=8)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_the_traffic_is_the_derivations_count():
    cfg = vmem.setup(*[CALC[k] for k in ("preset", "batch", "seq", "precision", "optimizer")])
    n, S = CALC["n"], 2 * cfg.params  # bf16 gradients
    act = cfg.batch * cfg.seq * cfg.hidden * 2  # b s h e, bf16
    sent = {r["strategy"]: r["sent"] * mem.GIB for r in traffic_rows(**CALC)}
    assert list(sent) == list(mem.strategies(cfg, n)), "the calculator's strategies, in its order"
    want = {"1 device": 0, "DP x8": 2 * 7 / 8 * S, "ZeRO-1 x8": 2 * 7 / 8 * S, "ZeRO-2 x8": 2 * 7 / 8 * S,
            "ZeRO-3/FSDP x8": 3 * 7 / 8 * S, "tensor x8": 4 * cfg.layers * 2 * 7 / 8 * act, "pipeline x8": 2 * act}
    for k, v in want.items():
        assert sent[k] == pytest.approx(v, rel=1e-12), k  # the same products in another order
    assert sent["ZeRO-3/FSDP x8"] == pytest.approx(1.5 * sent["DP x8"], rel=1e-12)
    assert sent["pipeline x8"] < sent["DP x8"] / 40  # a stage's activations, not the model
    # a 2-stage pipeline: each stage sends one of the two (activations forward or gradients back)
    assert sent_bytes(mem.TrainingSetup(**{**_base(cfg), "pp": 2})) == act


def _base(cfg):
    return {k: getattr(cfg, k) for k in ("layers", "hidden", "heads", "vocab", "seq", "batch", "precision", "optimizer")}


def test_each_zero_stage_holds_what_the_calculator_says():
    cfg = vmem.setup("GPT 1.3B-like (24 x 2048)", 16, 512, "fp32", "adam")
    bpp = mem.bytes_per_param("fp32", "adam")
    for stage in range(4):
        held = held_bytes(cfg, stage, 4)
        for part, first in (("optimizer", 1), ("gradients", 2), ("weights", 3)):
            assert held[part] == cfg.params * bpp[part] / (4 if stage >= first else 1), (stage, part)


def test_the_schematic_draws_each_ranks_shard_and_the_sent_bars():
    fig = zero_schematic(**CALC)
    n = CALC["n"]
    panels, bars = fig.axes[:4], fig.axes[4]
    cfg = vmem.setup(*[CALC[k] for k in ("preset", "batch", "seq", "precision", "optimizer")])
    full = held_bytes(cfg, 0, n)
    opt = full["optimizer"] / mem.GIB
    base = (full["weights"] + full["gradients"]) / mem.GIB
    # ZeRO-1's filled optimizer slice of rank r sits at slice r of the outline, 1/n high
    filled = [p for p in panels[1].patches if p.get_fill() and abs(p.get_height() - opt / n) < 1e-9]
    assert sorted(round((p.get_y() - base) / (opt / n), 9) for p in filled) == list(range(n))
    assert [t.get_text() for t in bars.get_yticklabels()] == [r["strategy"] for r in traffic_rows(**CALC)][1:]
    widths = [p.get_width() for p in bars.patches]
    assert widths == pytest.approx([r["sent"] for r in traffic_rows(**CALC)][1:])
    assert "GiB" in bars.get_xlabel() and "GiB" in panels[0].get_ylabel()
    for ax, name in zip(panels, ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")):
        assert ax.get_title().startswith(name)
