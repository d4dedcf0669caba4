"""Chapter 9: every failure mode's reproduction really shows the symptom its index entry promises,
and the diagnosis names where each rank of a hung job is (tests compare real output with the table)."""
from __future__ import annotations

import re
import tempfile

import pytest

from disttutor.troubleshoot import diagnose
from disttutor.troubleshoot import modes as troubleshoot
from disttutor.troubleshoot.repro_group import MODES as GROUP_MODES
from disttutor.troubleshoot.repro_local import MODES as LOCAL_MODES


def test_table_is_consistent_with_the_reproductions():
    keys = [m.key for m in troubleshoot.MODES]
    assert len(keys) == len(set(keys)) and len(keys) >= 15
    assert {m.key for m in troubleshoot.MODES if m.where == "group"} == set(GROUP_MODES)
    assert {m.key for m in troubleshoot.MODES if m.where == "local"} == set(LOCAL_MODES)
    index = troubleshoot.index_markdown()
    assert all(f"(#{k})" in index for k in keys)
    with pytest.raises(ValueError, match="where must be"):
        troubleshoot.FailureMode("x", "x", "cluster", "x", "", "", "")
    # the chapter's table: one row a mode, what it printed cut to its first words
    seen = {"port_in_use": troubleshoot.Repro("port_in_use", "a b c d e f g h i j", "", None, 0)}
    table = troubleshoot.table_markdown(seen)
    assert len(table.splitlines()) == 2 + len(keys) and "`a b c d e f g h …`" in table


GLOO = "RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms"
DETAIL = ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
          "CollectiveFingerPrint(SequenceNumber=0, OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float, "
          "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu)), but Rank 1 is running collective: "
          "CollectiveFingerPrint(SequenceNumber=0, OpType=BROADCAST, TensorShape=[4], TensorDtypes=Float, "
          "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu)).Collectives differ in the following "
          "aspects: \t Op type: ALLREDUCEvs BROADCAST")


def test_abridge_and_first_error_keep_what_differs_between_ranks():
    from types import SimpleNamespace as NS

    from disttutor.checks.claims import ch09

    assert troubleshoot.abridge(GLOO) == "RuntimeError: Timed out waiting 3000ms"
    lines = troubleshoot.abridge(DETAIL).splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["RuntimeError", "Rank 0 is running collective",
                                                  "but Rank 1 is running collective",
                                                  "Collectives differ in the following aspects"]
    assert "TensorOptions" not in "".join(lines) and lines[1].endswith("TensorDtypes=Float),"), lines
    # the rank whose peer died speaks second: the first rank that raised its own error is shown
    peer = NS(rank=0, status="error", blame="peer", raw_error="RuntimeError: Connection closed by peer", error=None)
    own = NS(rank=1, status="error", blame="wait", raw_error=GLOO, error=None)
    assert troubleshoot.first_error(NS(ranks=[peer, own])) == "RuntimeError: Timed out waiting 3000ms"
    # the same race inside the reproduction job: the rank whose own wait expired is the one reported
    closed = {"symptom": "RuntimeError: Connection closed by peer [127.0.0.1]:49364."}
    waited = {"symptom": "RuntimeError: Timed out waiting 3000ms"}
    assert troubleshoot._pick([closed, waited]) is waited and troubleshoot._pick([closed, {"symptom": "x"}]) is closed
    plain, detail = NS(ranks=[peer, own]), NS(ranks=[NS(status="error", raw_error=DETAIL, error=None)])
    assert "ALLREDUCE on one rank and BROADCAST" in ch09.check_detail_script(detail)
    with pytest.raises(AssertionError, match="name ALLREDUCE and BROADCAST"):
        ch09.check_detail_script(plain)
    stacks = "rank 0: waiting in all_reduce() x\nrank 1: in no collective"
    assert "rank 1's in no collective" in ch09.check_stacks(stacks, waiting=0, elsewhere=1)
    with pytest.raises(AssertionError, match="rank 1 should be in no collective"):
        ch09.check_stacks("rank 0: waiting in all_reduce() x\nrank 1: waiting in all_reduce()", waiting=0, elsewhere=1)


def test_lookup_finds_the_entry_from_a_pasted_error():
    pasted = ("[rank0]: RuntimeError: Expected to have finished reduction in the prior iteration before "
              "starting a new one. This error indicates that your module has parameters")
    assert [m.key for m in troubleshoot.lookup(pasted)] == ["unused_parameters"]
    assert troubleshoot.lookup("something else entirely") == []


@pytest.fixture(scope="module")
def repros():
    # One subprocess and one launch for every mode (the same calls the notebook makes).
    out, wall = troubleshoot.reproduce_all()
    return out


@pytest.mark.timeout(600)  # ~60 s idle; the 3 s group timeouts and spawned children stretch on a loaded box
def test_every_reproduction_matches_its_symptom(repros, no_leftovers):
    assert troubleshoot.mismatches(repros) == []
    # and each fixed run really ran (no error text in it)
    for k, r in repros.items():
        assert r.fixed and not re.match(r"^\w+(Error|Exception)", r.fixed), (k, r.fixed)


def test_detail_debug_names_the_mismatch(repros):
    from disttutor.checks.claims import ch09

    assert "only times out" in ch09.check_mismatch_plain_and_detail(repros)
    assert "OpType=BROADCAST" in repros["mismatched_collective"].detail
    assert "Tensor shapes" in repros["rank_dependent_shape"].detail
    assert "1 gradient all-reduce(s) per step" in repros["accumulation_without_no_sync"].fixed


@pytest.mark.timeout(240)
def test_diagnose_finds_the_rank_that_skipped_the_collective(no_leftovers):
    from disttutor import launch
    from disttutor.programs.hello import HelloConfig

    run_dir = tempfile.mkdtemp(prefix="disttutor-run-")
    w = diagnose.watch(run_dir, world=2, after_s=2)
    res = launch("hello", 2, HelloConfig(skip_rank=1), run_dir=run_dir, check=False, stream=False,
                 timeout=120, collective_timeout=15)
    lines = w.report().splitlines()
    assert not res.ok
    assert lines[0].startswith("rank 0: waiting in all_reduce()"), lines
    assert lines[1].startswith("rank 1: in no collective -- at run (hello.py:"), lines
