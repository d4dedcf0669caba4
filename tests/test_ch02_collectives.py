"""Chapter 2: process groups and collectives on real ranks, against single-process references.

Three launches in all: the collectives program (every op, 4 ranks), the
process-group program (4 ranks), and the send/send deadlock demo (2 ranks,
3 s collective timeout). Inputs are small integers in float32, so sums are
exact and every comparison is ``==`` (no tolerance needed).
"""
from __future__ import annotations

import pytest
import torch

import disttutor
from disttutor.programs.collectives import OPS, CollectivesConfig, start
from disttutor.programs.process_groups import GroupsConfig


def test_configs_reject_bad_input_with_clear_messages():
    with pytest.raises(ValueError, match="unknown op"):
        CollectivesConfig(ops=("all_reduce", "allreduce"))
    with pytest.raises(ValueError, match="size must be >= 1"):
        CollectivesConfig(size=0)
    with pytest.raises(ValueError, match="barrier_stagger"):
        CollectivesConfig(barrier_stagger=-1)
    with pytest.raises(ValueError, match="group_size"):
        GroupsConfig(group_size=0)


def test_pictures_trace_chunks_from_single_process_data():
    """The viz's provenance on data computed here in one process (no ranks): copies and sums found."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from disttutor.viz.collectives import collective_figure, provenance
    n = 3
    x = [start(r, 2, "cpu").tolist() for r in range(n)]
    big = [start(r, 2, "cpu", k=n) for r in range(n)]
    gathered = [sum(x, [])] * n
    assert provenance("all_gather", x, gathered)[2] == [("copy", r, j) for r in range(n) for j in range(2)]
    rs = [torch.stack(big).sum(0).tensor_split(n)[r].tolist() for r in range(n)]
    assert provenance("reduce_scatter", [b.tolist() for b in big], rs)[1] == [("sum", 2), ("sum", 3)]
    assert provenance("scatter", [big[0].tolist(), None, None], [[1.0, 2.0], None, None]) == [
        [("copy", 0, 0), ("copy", 0, 1)], None, None]
    assert provenance("broadcast", x, [[99.0, 1.0]] * n)[0] == [None, ("copy", 0, 0)]  # unknown value: None
    fig = collective_figure("all_gather", x, gathered, chunk=2, code="dist.all_gather_single(out, x)")
    assert fig._suptitle.get_text() == "dist.all_gather_single(out, x)"
    plt.close(fig)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_every_collective_matches_single_process_reference(no_leftovers):
    n = 4
    res = disttutor.launch("collectives", n, {"barrier_stagger": 0.1}, timeout=150, collective_timeout=30,
                           stream=False)
    assert res.ok, res.summary()
    x = torch.stack([start(r, 2, "cpu") for r in range(n)])            # each rank's 2-element input
    big = torch.stack([start(r, 2, "cpu", k=n) for r in range(n)])     # each rank's 8-element input
    out = {op: [res.results[r][op]["after"] for r in range(n)] for op in OPS}
    assert [res.results[r]["all_reduce"]["before"] for r in range(n)] == x.tolist()
    assert out["broadcast"] == [x[0].tolist()] * n
    assert out["reduce"][0] == x.sum(0).tolist() and out["reduce"][1:] == [None] * (n - 1)
    assert out["all_reduce"] == [x.sum(0).tolist()] * n
    assert out["all_gather"] == [x.reshape(-1).tolist()] * n
    shards = [s.tolist() for s in big.sum(0).tensor_split(n)]
    assert out["reduce_scatter"] == shards
    assert [res.results[r]["reduce_scatter"]["equivalent"] for r in range(n)] == shards
    assert out["gather"][0] == x.reshape(-1).tolist() and out["gather"][1:] == [None] * (n - 1)
    assert out["scatter"] == [s.tolist() for s in big[0].tensor_split(n)]
    # all-to-all: rank r receives chunk r of every rank, in rank order (a transpose of ranks x chunks)
    assert out["all_to_all"] == [torch.cat([big[j].tensor_split(n)[r] for j in range(n)]).tolist() for r in range(n)]
    # the chapter's pictures are drawn from these reports: they must trace every chunk to its source
    from disttutor.viz.collectives import describe_moves
    reports = {op: ([res.results[r][op]["before"] for r in range(n)], out[op]) for op in OPS}
    assert describe_moves("all_to_all", *reports["all_to_all"], chunk=2)[1] == (
        "rank 1: rank 0's chunk 1, rank 1's chunk 1, rank 2's chunk 1, rank 3's chunk 1")
    assert describe_moves("reduce_scatter", *reports["reduce_scatter"], chunk=2)[2] == "rank 2: sum of chunk 2"
    assert describe_moves("broadcast", *reports["broadcast"], chunk=2)[3] == "rank 3: rank 0's chunk 0"
    assert describe_moves("reduce", *reports["reduce"], chunk=2)[1:] == ["rank 1: -", "rank 2: -", "rank 3: -"]
    # torch 2.13's names: no FutureWarning about a deprecated collective in any rank's output
    assert not any("is deprecated" in line for r in res.ranks for line in r.log), [r.log for r in res.ranks]
    assert out["send_recv"] == [x[r - r % 2].tolist() for r in range(n)]
    assert out["isend_irecv"] == [x[(r - 1) % n].tolist() for r in range(n)]
    waits = [res.results[r]["barrier"]["waited_s"] for r in range(n)]
    # rank 0 arrives 0.3 s before rank 3; 0.1 s of slack absorbs scheduling noise on a busy machine
    assert waits[0] > waits[-1] + 0.1


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_process_groups_and_subgroups(no_leftovers):
    n = 4
    res = disttutor.launch("process_groups", n, timeout=150, collective_timeout=30, stream=False)
    assert res.ok, res.summary()
    for r, rep in enumerate(res.results):
        assert rep["env"]["RANK"] == str(r) and rep["env"]["WORLD_SIZE"] == str(n)
        assert rep["env"]["LOCAL_RANK"] == str(r) and rep["env"]["LOCAL_WORLD_SIZE"] == str(n)
        assert set(rep["varying_env"]) == {"MASTER_PORT", "TORCHELASTIC_RUN_ID"}
        parity = [q for q in range(n) if q % 2 == r % 2]
        block = [q for q in range(n) if q // 2 == r // 2]
        assert rep["parity_group"] == parity and rep["parity_rank"] == parity.index(r)
        assert rep["parity_sum"] == sum(q + 1 for q in parity)
        assert rep["block_group"] == block and rep["block_rank"] == block.index(r)
        assert rep["block_sum"] == sum(q + 1 for q in block)
        assert rep["world_sum"] == n * (n + 1) / 2
        assert rep["backend"] == "gloo" or torch.cuda.device_count() >= n


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_send_send_deadlock_demo_ends_as_a_clear_failure(no_leftovers):
    res = disttutor.launch("collectives", 2, {"deadlock": True, "ops": ["barrier"]}, collective_timeout=3,
                           timeout=90, stream=False, check=False)
    assert res.outcome == "finished" and not res.ok  # ended by the collective timeout, not the wall clock
    assert any("waited more than 3s" in (r.error or "") for r in res.ranks), res.summary()
