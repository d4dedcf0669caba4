"""Chapter 11's idealised pictures: ZeRO's stages (what each rank stores) and an FSDP unit's life.

Drawn with the Agg backend from the chapter's own sizes (tiny_lm's parameter counts; a 2-rank FSDP2
trace shaped like the fsdp2 program's report); checks what the pictures claim, not their pixels.
Launches nothing.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from disttutor.sharding.model import predicted  # noqa: E402
from disttutor.viz import fsdp_unit_life as life  # noqa: E402
from disttutor.viz import zero_stages as zs  # noqa: E402

N_PARAMS, N_TRAINABLE = 6624, 6368      # tiny_lm: the sharding program's model (one frozen embedding)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("world", [2, 4])
def test_each_stage_stores_what_chapter_1s_calculator_says(world):
    for stage in range(4):
        want = sum(predicted(N_PARAMS, N_TRAINABLE, world, stage).values())
        assert zs.held_total(N_PARAMS, N_TRAINABLE, world, stage) == pytest.approx(want)
        # the ranks' slices of a sharded part tile it exactly, without overlap
        for part, size in zs.part_bytes(N_PARAMS, N_TRAINABLE).items():
            ranges = sorted(zs.held(N_PARAMS, N_TRAINABLE, world, stage, r)[part] for r in range(world))
            if stage >= zs.SHARDED_FROM[part]:
                assert ranges[0][0] == 0 and ranges[-1][1] == size
                assert all(a[1] == pytest.approx(b[0]) for a, b in zip(ranges, ranges[1:]))
            else:
                assert all(r == (0.0, size) for r in ranges)


def test_the_zero_figure_fills_exactly_the_stored_bytes():
    fig = zs.zero_stages_figure(N_PARAMS, N_TRAINABLE, 2)
    ax = fig.axes[0]
    filled = [p for p in ax.patches if p.get_facecolor()[:3] != (1.0, 1.0, 1.0)]
    rows = {}
    for p in filled:
        rows.setdefault(round(p.get_y() + p.get_height() / 2), 0.0)
        rows[round(p.get_y() + p.get_height() / 2)] += p.get_width() * 1024
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[-1] == "DDP, rank 0" and labels[0] == "ZeRO-3 = FSDP, rank 1"
    for y, label in enumerate(labels):
        stage = [name for name, _ in zs.STAGES].index(label.split(",")[0])
        assert rows[y] == pytest.approx(zs.held_total(N_PARAMS, N_TRAINABLE, 2, stage))


def _trace(fwd=0.3, bwd=0.5, ag=0.2, rs=0.25, blocks=4, ranks=2):
    calls = [{"op": "all_gather", "unit": f"blocks.{b}", "moved": 0.0, "ms": ag} for b in range(blocks)] * 2
    calls += [{"op": "reduce_scatter", "unit": f"blocks.{b}", "moved": 0.0, "ms": rs} for b in range(blocks)]
    calls += [{"op": "all_gather", "unit": "root", "moved": 0.0, "ms": 9.0}]   # the root is not a block
    compute = [{"unit": f"blocks.{b}", "phase": p, "start": 0.0, "ms": fwd if p == "forward" else bwd}
               for p in ("forward", "backward") for b in range(blocks)]
    return [{"comm": {"prefetch off": {"calls": calls, "compute": compute}}} for _ in range(ranks)]


def test_without_prefetching_every_collective_and_compute_is_paid_in_turn():
    t = life.median_times(_trace())
    assert t == {"all_gather": 0.2, "reduce_scatter": 0.25, "forward": 0.3, "backward": 0.5}
    spans = life.schedule(4, t, prefetch=False)
    assert life.step_ms(spans) == pytest.approx(4 * (0.2 + 0.3) + 4 * (0.2 + 0.5 + 0.25))


def test_with_prefetching_the_all_gathers_hide_where_the_derivation_says():
    t = {"all_gather": 0.2, "reduce_scatter": 0.25, "forward": 0.3, "backward": 0.5}
    # hidden: t_AG <= t_fwd, and t_AG + t_RS <= t_bwd -> the step is the compute plus the first
    # all-gather (forward's, and backward's first one after forward) and the last reduce-scatter
    spans = life.schedule(4, t, prefetch=True)
    assert life.step_ms(spans) == pytest.approx(0.2 + 4 * 0.3 + 0.2 + 4 * 0.5 + 0.25)
    links = [s for s in spans if s["lane"] == "link"]
    assert all(a["start"] + a["ms"] <= b["start"] + 1e-12 for a, b in zip(links, links[1:])), "one at a time"
    held = life.held_intervals(spans, 4)
    at = lambda x: sum(a <= x < z for iv in held.values() for a, z in iv)  # noqa: E731
    assert max(at(s["start"]) for s in spans) == 2, "prefetching holds at most two blocks' full weights"
    # a link slower than compute: prefetching still helps, the link sets the pace
    slow = {**t, "all_gather": 1.0}
    assert life.step_ms(life.schedule(4, slow, True)) < life.step_ms(life.schedule(4, slow, False))


def test_the_unit_life_figure_draws_both_settings_with_readable_labels():
    fig = life.unit_life_figure(_trace())
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert titles[0].startswith("without prefetching") and titles[1].startswith("with prefetching")
    words = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "AG 0" in words and "fwd 3" in words and "bwd 0" in words and "RS 3" in words
    assert all(len(w) > 1 for w in words)
    assert "ms" in fig.axes[-1].get_xlabel()
