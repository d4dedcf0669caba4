"""Chapter 3's schematic: one data-parallel step drawn from the dp_traffic run's configuration (no launches)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from disttutor.data_parallel.dataparallel import expected_bytes, textbook_ring_bytes  # noqa: E402
from disttutor.programs.dp_traffic import TrafficConfig  # noqa: E402
from disttutor.viz.dp_step_schematic import dp_step_schematic, step_numbers  # noqa: E402
from disttutor.workloads.models import MLP  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_the_numbers_are_the_runs():
    cfg = TrafficConfig(steps=3, sizes=(2, 3, 4))
    for n in cfg.sizes:
        k = step_numbers(cfg, n)
        assert k["params"] == sum(p.numel() for p in MLP(cfg.d_in, [cfg.hidden], cfg.classes).parameters())
        assert k["S"] == 4 * k["params"]
        assert k["ring_sent"] == textbook_ring_bytes(k["params"], n)
        # the exact ring sends the textbook volume within one element per step (uneven chunks)
        exact = expected_bytes("ddp-ring", n, 0, k["params"], cfg.batch, cfg.d_in, cfg.classes)["sent"]
        assert abs(exact - k["ring_sent"]) <= 4 * 2 * (n - 1)
        assert [hi - lo + 1 for lo, hi in k["shards"]] == [cfg.batch // n] * n  # equal shards cover the batch
        assert k["shards"][0][0] == 0 and k["shards"][-1][1] == cfg.batch - 1
    with pytest.raises(ValueError, match="equal shards"):
        step_numbers(TrafficConfig(batch=10), 4)


def test_the_schematic_shows_a_row_per_rank_and_the_ring_bytes():
    cfg = TrafficConfig(steps=3, sizes=(2, 3, 4))
    fig = dp_step_schematic(cfg, 4)
    ax, = fig.axes
    texts = [t.get_text() for t in ax.texts]
    assert [t for t in texts if t.startswith("rank ")] == [f"rank {r}: samples\n{24 * r}–{24 * r + 23}" for r in range(4)]
    assert sum("gradient: 8,440 bytes" in t for t in texts) == 4
    # ≈: 2,110 floats do not split evenly into 4 chunks, so the ranks send 12,656 to 12,664 bytes
    assert any("≈ 12,660 bytes" in t for t in texts)
    assert "96 samples" in ax.get_title() and "2,110 parameters" in ax.get_title()
