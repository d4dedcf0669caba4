"""Every chapter figure moved out of the notebooks, built from small hand-made data (no launches).

Chapters 1, 4, 5 and 6 draw with ``disttutor/viz/{parallelism,ddp,cluster,model_parallel}.py``;
these tests check what each figure shows (bars, lines, boxes, labels), not its pixels.
"""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from disttutor.viz.cluster import draw_layout  # noqa: E402
from disttutor.viz.ddp import plot_step_times, plot_trace  # noqa: E402
from disttutor.viz.model_parallel import COLORS, plot_timeline  # noqa: E402
from disttutor.viz.parallelism import ownership_grid, ownership_picture  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def labels(ticks) -> list[str]:
    return [t.get_text() for t in ticks]


# --- chapter 1: who holds what -------------------------------------------------------------

def test_ownership_grid_marks_each_rank_on_its_items():
    held = [[0, 2], [1, 3], []]  # rank 2 holds nothing
    grid = ownership_grid(held, 5)
    assert grid.shape == (3, 5)
    assert grid[0, 0] == 0 and grid[0, 2] == 0 and grid[1, 1] == 1 and grid[1, 3] == 1
    assert np.isnan(grid[2]).all() and np.isnan(grid[:, 4]).all()  # nobody holds item 4
    assert np.count_nonzero(~np.isnan(grid)) == 4


def test_ownership_picture_draws_ranks_by_items():
    held = [[r, r + 4] for r in range(4)]  # data parallel: rank r takes samples r, r+4
    fig = ownership_picture("data parallel", held, 8, "sample index", "1/N of the samples")
    ax, = fig.axes
    img, = ax.get_images()
    np.testing.assert_array_equal(np.asarray(img.get_array().filled(np.nan)), ownership_grid(held, 8))
    assert labels(ax.get_yticklabels()) == [f"rank {r}" for r in range(4)]
    assert ax.get_xlabel() == "sample index"
    assert ax.get_title() == "data parallel: 1/N of the samples"


def test_ownership_picture_draws_on_a_given_axes():
    fig, (a, b) = plt.subplots(1, 2)
    assert ownership_picture("layer", [[0, 1], [2]], 3, "module", "whole layers", ax=b) is fig
    assert not a.get_images() and len(b.get_images()) == 1
    assert labels(b.get_yticklabels()) == ["rank 0", "rank 1"]


# --- chapter 4: DDP event order and step times -----------------------------------------------

TRACE = [("grad", "2.bias"), ("grad", "2.weight"), ("launch", 0), ("grad", "0.bias"), ("grad", "0.weight"),
         ("launch", 1)]


def test_plot_trace_one_row_per_wrapper_dots_for_grads_bars_for_launches():
    traces = {"torch DDP": TRACE, "from scratch": TRACE[:3]}
    fig = plot_trace(traces)
    ax, = fig.axes
    assert labels(ax.get_yticklabels()) == ["torch DDP", "from scratch"]
    dots = [(ln.get_xdata()[0], ln.get_ydata()[0]) for ln in ax.get_lines()]
    assert dots == [(0, 0), (1, 0), (3, 0), (4, 0), (0, 1), (1, 1)]  # (event index, row) of each gradient
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert [(p.get_x() + 0.4, p.get_y() + 0.25) for p in bars] == [(2, 0), (5, 0), (2, 1)]  # bucket launches
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("b0") == 2 and texts.count("b1") == 1 and "0.weight" in texts
    assert "gradient ready" in ax.get_xlabel()


def test_plot_trace_draws_on_a_given_axes():
    fig, ax = plt.subplots()
    assert plot_trace({"torch DDP": TRACE}, ax=ax) is fig
    assert len(ax.get_lines()) == 4


def test_plot_step_times_bars_per_wrapper_and_ideal_line():
    timings = {1: {"torch": 10.0, "bucketed": 12.0, "naive": 20.0},
               2: {"torch": 12.0, "bucketed": 14.0, "naive": 30.0},
               4: {"torch": 16.0, "bucketed": 18.0, "naive": 50.0}}
    fig = plot_step_times(timings, per_rank=32)
    a1, a2 = fig.axes
    assert len(a1.patches) == 3 * 3  # one bar per (wrapper, world size)
    assert sorted(p.get_height() for p in a1.patches) == sorted(v for t in timings.values() for v in t.values())
    assert labels(a1.get_xticklabels()) == ["1 rank(s)", "2 rank(s)", "4 rank(s)"]
    assert a1.get_ylabel() == "ms per step" and a2.get_ylabel() == "samples / s"
    lines = {ln.get_label(): ln for ln in a2.get_lines()}
    assert list(lines) == ["torch", "bucketed", "naive", "ideal (linear)"]
    # samples/s = per-rank batch * ranks / step time; the ideal scales torch's 1-rank throughput
    np.testing.assert_allclose(lines["torch"].get_ydata(), [32 * n / timings[n]["torch"] * 1e3 for n in (1, 2, 4)])
    np.testing.assert_allclose(lines["ideal (linear)"].get_ydata(), [3200.0 * n for n in (1, 2, 4)])


# --- chapter 5: nodes and ranks --------------------------------------------------------------

def envs_for(nodes: int, per_node: int) -> list[dict[str, str]]:
    """What torchrun sets for a homogeneous job, as strings like the real environment."""
    return [{"RANK": str(g * per_node + lr), "LOCAL_RANK": str(lr), "GROUP_RANK": str(g),
             "LOCAL_WORLD_SIZE": str(per_node)} for g in range(nodes) for lr in range(per_node)]


@pytest.mark.parametrize("nodes,per_node", [(2, 2), (2, 3)])
def test_draw_layout_a_box_per_node_and_per_process(nodes, per_node):
    fig = draw_layout(envs_for(nodes, per_node))
    ax, = fig.axes
    boxes = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(boxes) == nodes + nodes * per_node
    texts = [t.get_text() for t in ax.texts]
    assert sum(t.startswith("node GROUP_RANK=") for t in texts) == nodes
    assert sorted(int(t.split("\n")[0].split()[1]) for t in texts if t.startswith("RANK ")) == \
        list(range(nodes * per_node))
    assert ax.get_title() == f"WORLD_SIZE={nodes * per_node}: {nodes} nodes x LOCAL_WORLD_SIZE={per_node}"


def test_draw_layout_places_processes_inside_their_node():
    fig = draw_layout(envs_for(2, 2))
    boxes = [p for p in fig.axes[0].patches if isinstance(p, Rectangle)]
    node_boxes = [b for b in boxes if b.get_height() == 2.2]
    proc_boxes = [b for b in boxes if b.get_height() == 1.2]
    assert len(node_boxes) == 2 and len(proc_boxes) == 4
    for p in proc_boxes:
        assert sum(n.get_x() <= p.get_x() and p.get_x() + p.get_width() <= n.get_x() + n.get_width()
                   for n in node_boxes) == 1


# --- chapter 6: model-parallel timeline -----------------------------------------------------------

def test_plot_timeline_one_bar_per_span_on_a_shared_axis():
    # two ranks; rank 1 started 2 ms after rank 0 on the shared clock
    results = [{"t0": 100.000, "timeline": [("fwd", 0.000, 0.001), ("send", 0.001, 0.0012),
                                             ("recv", 0.0012, 0.004), ("bwd", 0.004, 0.005), ("opt", 0.005, 0.0055)]},
               {"t0": 100.002, "timeline": [("recv", 0.0, 0.0001), ("fwd", 0.0001, 0.0005), ("bwd", 0.0005, 0.001)]}]
    fig = plot_timeline(results, title="test")
    ax, = fig.axes
    bars = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bars) == 5 + 3
    # rank 1's forward: 2 ms + 0.1 ms after the start, 0.4 ms long, drawn in the forward colour on row 1
    fwd1 = bars[5 + 1]
    (x0, y0), (x1, y1) = fwd1.get_paths()[0].get_extents().get_points()
    assert math.isclose(x0, 2.1, abs_tol=1e-9) and math.isclose(x1, 2.5, abs_tol=1e-9)
    assert math.isclose(y0, 0.6) and math.isclose(y1, 1.4)
    np.testing.assert_allclose(fwd1.get_facecolor()[0], matplotlib.colors.to_rgba(COLORS["fwd"]))
    assert labels(ax.get_yticklabels()) == ["rank 0", "rank 1"]
    assert ax.yaxis_inverted() and ax.get_title() == "test"
    assert ax.get_xlabel() == "time since the first rank started (ms)"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(COLORS)


def test_profile_timeline_draws_every_kind_of_region_chapter_10_included():
    from disttutor.viz.profiling import COLORS, plot_timeline
    from disttutor.troubleshoot.traces import REGIONS

    # One complete event per region (chapter 9's three, chapter 10's "data") and a gloo all-reduce.
    events = [{"name": r, "cat": "user_annotation", "ph": "X", "ts": 10.0 * i, "dur": 5.0}
              for i, r in enumerate(REGIONS)]
    events.append({"name": "gloo:all_reduce", "cat": "cpu_op", "ph": "X", "ts": 12.0, "dur": 20.0})
    fig = plot_timeline({0: events, 1: events})
    assert set(REGIONS) <= set(COLORS)
    drawn = {c.get_label() for c in fig.axes[0].collections}
    assert set(REGIONS) | {"comm"} <= drawn, drawn
