"""Chapter 12's idealised pictures: a TP / SP block to scale, ring attention's steps, MoE's all-to-alls.

Drawn with the Agg backend from the chapter's run sizes (the program's defaults: s = 16, b = 2, d = 16,
h = 32 on 2 ranks); checks what each picture states against the formulas and the run's recorded
bytes, not pixels. Launches nothing.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from disttutor.viz import moe_dispatch as moe  # noqa: E402
from disttutor.viz import ring_attention_steps as ring  # noqa: E402
from disttutor.viz import tp_split as tp  # noqa: E402

S, B, D, H, T = 16, 2, 16, 32, 2


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_tp_and_sp_send_the_bytes_the_run_recorded():
    # the chapter's run printed 4,096 ring bytes per rank for the TP block (fp32)
    assert tp.block_bytes_sent(S, B, D, T) == 4096
    for sp in (False, True):
        ops = [st for st in tp.stages(S, B, D, H, T, sp) if "op" in st]
        sent = sum(tp.ring_bytes(op, st["rows"] * st["cols"] * 4, T) for st in ops
                   for op in (st["forward"], st["backward"]) if op != "identity")
        assert sent == 4096, "SP swaps each all-reduce for an all-gather and a reduce-scatter: the same bytes"
    assert [(st["forward"], st["backward"]) for st in tp.stages(S, B, D, H, T, False) if "op" in st] == \
        [("identity", "all-reduce"), ("all-reduce", "identity")], "f, then g (Megatron's conjugates)"


def test_the_tp_figure_draws_each_rank_its_share_to_scale():
    fig = tp.tp_block_figure(S, B, D, H, T)
    ax = fig.axes[0]
    boxes = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_facecolor()[:3] != (1.0, 0.9568627450980393,
                                                                                             0.8392156862745098)]
    unit = 1.0 / max(S * B, D, H // T)
    sizes = sorted({(round(p.get_height() / unit), round(p.get_width() / unit)) for p in boxes})
    assert set(sizes) == {(H // T, D), (S * B, H // T), (D, H // T), (S * B, D)}  # weights, GELU, activations
    words = " ".join(t.get_text() for t in ax.texts)
    assert "2,048 B" in words and "rank 1" in words and "all-reduce" in words
    sp = tp.tp_block_figure(S, B, D, H, T, sequence_parallel=True).axes[0]
    assert "all-gather" in " ".join(t.get_text() for t in sp.texts)


def test_ring_attention_computes_each_block_once_and_skips_the_future():
    for n in (2, 4, 8):
        p = ring.plan(n)
        assert len(p) == n * n
        assert sum(b["what"] == "skipped" for b in p) == n * (n - 1) // 2
        for r in range(n):   # each rank holds each key block at exactly one step
            assert sorted(b["step"] for b in p if b["q"] == r) == list(range(n))
        assert all(b["step"] == 0 for b in p if b["what"] == "diagonal"), "its own keys first"
    # the run printed one send of 2,048 bytes per rank on 2 ranks
    assert ring.send_bytes(S, B, D, T) == 2048
    fig = ring.ring_attention_figure(S, B, D, T)
    ax = fig.axes[0]
    assert "2,048 bytes" in ax.get_title() and "token" in ax.get_xlabel()
    assert sum("skipped" in t.get_text() for t in ax.texts) == 1


def test_moe_dispatch_rows_add_up_to_every_tokens_choices():
    tokens_per_expert = [[4, 7, 5, 8], [4, 6, 6, 8]]      # a run's routing: 12 tokens x top-2 per rank
    rows = moe.dispatch_rows(tokens_per_expert)
    assert rows == [[11, 13], [10, 14]]
    assert [sum(r) for r in rows] == [24, 24]
    fig = moe.moe_dispatch_figure(tokens_per_expert, dim=D)
    assert "832 B from rank 0, 640 B from rank 1" in fig._suptitle.get_text()
    combine = fig.axes[1]
    assert any(t.get_text().startswith("13 rows") for t in combine.texts)
