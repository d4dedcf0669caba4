"""Chapter 5's schematic: the launch topology drawn from (nnodes, nproc_per_node). Launches nothing."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from disttutor.viz.launch_topology import draw_launch_topology, process_layout, ring_hops  # noqa: E402


@pytest.mark.parametrize("nnodes,nproc", [(2, 2), (4, 8), (1, 4)])
def test_every_process_box_carries_torchruns_numbering(nnodes, nproc):
    fig = draw_launch_topology(nnodes, nproc)
    try:
        boxes = {t.get_gid(): t.get_text() for t in fig.axes[0].texts if (t.get_gid() or "").startswith("rank-")}
        assert len(boxes) == nnodes * nproc
        for g in range(nnodes):
            for lr in range(nproc):
                r = g * nproc + lr  # what torchrun sets: nodes in order, LOCAL_RANK inside
                assert boxes[f"rank-{r}"].split("\n") == [f"RANK {r}", f"LOCAL_RANK {lr}", f"GROUP_RANK {g}",
                                                         f"WORLD_SIZE {nnodes * nproc}"]
        hops = [p.get_gid() for p in fig.axes[0].patches if (p.get_gid() or "").startswith("hop-")]
        # one hop per rank; on several nodes exactly one per node crosses the network
        assert len(hops) == (nnodes * nproc if nnodes * nproc > 1 else 0)
        assert hops.count("hop-cross") == (nnodes if nnodes > 1 else 0)
        assert f"{nnodes} nodes × {nproc} processes" in fig.axes[0].get_title()
    finally:
        plt.close(fig)


def test_the_ring_visits_every_rank_once_and_crosses_where_the_node_changes():
    rows = process_layout(3, 4)
    node = {r["RANK"]: r["GROUP_RANK"] for r in rows}
    hops = ring_hops(3, 4)
    assert [a for a, _, _ in hops] == list(range(12)) and sorted(b for _, b, _ in hops) == list(range(12))
    assert [(a, b) for a, b, cross in hops if cross] == [(3, 4), (7, 8), (11, 0)]
    assert all(cross == (node[a] != node[b]) for a, b, cross in hops)
    with pytest.raises(ValueError, match="nproc_per_node"):
        process_layout(2, 0)
