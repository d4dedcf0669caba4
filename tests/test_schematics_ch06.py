"""Chapter 6's schematic: naive model parallelism against micro-batches, drawn from a run's numbers.

Checks what the figure says against the derivation (busy share 1/p and m/(m+p-1), the step's length,
the boundary bytes) on the chapter's own configuration. Launches nothing.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from disttutor.programs.model_parallel import MPConfig  # noqa: E402
from disttutor.viz import microbatch_schematic as mb  # noqa: E402

CFG = MPConfig(steps=5, warmup=1, batch=256, width=256, layers_per_stage=4, lr=0.05)  # the chapter's run
FWD, BWD = 1.1e-3, 2.3e-3  # seconds: the order of the run's mean stage times on 2 CPU cores


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _busy(spans) -> float:
    return sum(e - s for _, _, s, e in spans)


@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (4, 12), (3, 2)])
def test_each_stage_is_busy_the_derived_share_and_stages_never_run_two_pieces_at_once(p, m):
    sched = mb.schedule(p, m, FWD, BWD)
    step = mb.step_s(p, m, FWD, BWD)
    assert step == pytest.approx((m + p - 1) * (FWD + BWD) / m)
    for i, spans in enumerate(sched):
        assert _busy(spans) / step == pytest.approx(m / (m + p - 1)) == pytest.approx(mb.utilisation(p, m))
        ordered = sorted((s, e) for _, _, s, e in spans)
        assert all(a[1] <= b[0] + 1e-15 for a, b in zip(ordered, ordered[1:])), f"stage {i} overlaps itself"
        assert max(e for _, _, _, e in spans) <= step + 1e-15
    # a piece leaves stage i before stage i+1 starts it (forward) and the reverse for backward
    for i in range(p - 1):
        for j in range(m):
            f_here = next(e for k, jj, s, e in sched[i] if k == "fwd" and jj == j)
            f_next = next(s for k, jj, s, e in sched[i + 1] if k == "fwd" and jj == j)
            b_next = next(e for k, jj, s, e in sched[i + 1] if k == "bwd" and jj == j)
            b_here = next(s for k, jj, s, e in sched[i] if k == "bwd" and jj == j)
            assert f_here <= f_next + 1e-15 and b_next <= b_here + 1e-15
    if m == 1:
        assert mb.utilisation(p, m) == pytest.approx(1 / p)


def test_the_boundary_bytes_are_activation_and_gradient_at_each_boundary():
    assert mb.boundary_bytes(2, CFG.batch, CFG.width) == 2 * CFG.batch * CFG.width * 4 == 524_288
    assert mb.boundary_bytes(4, CFG.batch, CFG.width) == 3 * mb.boundary_bytes(2, CFG.batch, CFG.width)
    assert mb.boundary_bytes(1, CFG.batch, CFG.width) == 0


def test_stage_times_are_the_runs_mean_forward_and_backward_per_step():
    results = [{"timed_steps": 2, "timeline": [["fwd", 0.0, 1.0], ["recv", 1.0, 3.0], ["bwd", 3.0, 5.0],
                                               ["fwd", 5.0, 6.0], ["bwd", 8.0, 10.0]]},
               {"timed_steps": 2, "timeline": [["fwd", 1.0, 4.0], ["bwd", 4.0, 5.0], ["fwd", 6.0, 9.0],
                                               ["bwd", 9.0, 10.0], ["opt", 10.0, 11.0]]}]
    assert mb.stage_times(results) == pytest.approx(((1 + 3) / 2, (2 + 1) / 2))


def test_the_figure_draws_both_timelines_from_the_runs_parameters():
    fig = mb.plot_microbatch_schematic(stages=2, micro_batches=4, batch=CFG.batch, width=CFG.width,
                                       fwd_s=FWD, bwd_s=BWD)
    top, bottom = fig.axes
    assert "1/p = 1/2 = 50%" in top.get_title() and "4/5 = 80%" in bottom.get_title()
    assert f"{mb.boundary_bytes(2, CFG.batch, CFG.width):,} bytes" in fig._suptitle.get_text()
    assert "(ms)" in bottom.get_xlabel()
    for ax, m in ((top, 1), (bottom, 4)):
        bars = [c for c in ax.collections if isinstance(c, PolyCollection)]
        # per stage: one idle background + 2m compute blocks
        assert len(bars) == 2 * (1 + 2 * m)
        widths = {round(float(np.ptp(p.vertices[:, 0])), 9) for c in bars for p in c.get_paths()}
        step_ms = 1e3 * mb.step_s(2, m, FWD, BWD)
        # the blocks are t_f/m and t_b/m long (ms); the background is the whole step
        assert widths == {round(1e3 * FWD / m, 9), round(1e3 * BWD / m, 9), round(step_ms, 9)}
    # the plain step is p (t_f + t_b) long: the top's background bar ends there (in ms)
    ends = [p.vertices[:, 0].max() for c in top.collections for p in c.get_paths()]
    assert max(ends) == pytest.approx(1e3 * 2 * (FWD + BWD))
    labels = [t.get_text() for t in bottom.texts]
    assert "fwd 1" in labels and "bwd 4" in labels and all(len(t) > 1 for t in labels)
    with pytest.raises(ValueError, match="micro_batches"):
        mb.plot_microbatch_schematic(2, 1, CFG.batch, CFG.width, FWD, BWD)
