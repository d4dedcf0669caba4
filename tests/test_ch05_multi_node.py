"""Chapter 5 (multi-node): two torchrun agents as two "nodes", and the article's
torch.distributed.launch + mp.spawn combination reproduced safely.

Each launch is a real torchrun job on loopback; one launch backs several asserts.
"""
from __future__ import annotations

import psutil
import pytest

import disttutor
from disttutor.programs.legacy_spawn import LegacyConfig
from disttutor.programs.legacy_spawn import main as legacy_main
from disttutor.programs.whoami import WhoamiConfig, read_identity

# Wall limit for one launch: generous because the 2-core test machine is shared;
# a healthy run takes ~10-25 s.
LAUNCH_TIMEOUT = 150


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT + 60)
def test_two_agents_make_one_world(no_leftovers):
    nproc, nnodes = 2, 2
    res = disttutor.launch("whoami", nproc=nproc, nnodes=nnodes, stream=False, timeout=LAUNCH_TIMEOUT)
    world = nproc * nnodes
    envs = [r["env"] for r in res.results]
    # Every rank knows its place, and the ranks agree with torchrun's formula.
    for r, e in enumerate(envs):
        assert int(e["RANK"]) == r == int(e["ROLE_RANK"])
        assert int(e["WORLD_SIZE"]) == world and int(e["LOCAL_WORLD_SIZE"]) == nproc
        assert int(e["GROUP_WORLD_SIZE"]) == nnodes
        assert r == int(e["GROUP_RANK"]) * nproc + int(e["LOCAL_RANK"])
    assert sorted((int(e["GROUP_RANK"]), int(e["LOCAL_RANK"])) for e in envs) == \
        [(g, l) for g in range(nnodes) for l in range(nproc)]
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs}) == 1  # one store for the whole job
    # Reference computed here, single-process: what the cross-node all-reduces must give.
    for rep in res.results:
        assert rep["ranks_per_node"] == [float(nproc)] * nnodes  # exact: small integers in float32
        assert rep["rank_sum"] == float(sum(range(world)))
        assert rep["layout"] == [[int(e["GROUP_RANK"]), int(e["LOCAL_RANK"])] for e in envs]
    # Which agent became GROUP_RANK 0 is decided by the c10d rendezvous: it sorts the
    # agents by (address, pid) -- same address here, so by agent pid -- not by --node-rank.
    agent_pid = {int(e["GROUP_RANK"]): rep["agent_pid"] for e, rep in zip(envs, res.results)}
    assert [agent_pid[g] for g in range(nnodes)] == sorted(agent_pid.values())
    assert any("node_rank is only used for static rdzv_backend" in ln for ln in res.agent_log)


@pytest.mark.slow
@pytest.mark.timeout(2 * LAUNCH_TIMEOUT + 60)
def test_article_double_spawn_clashes_and_torchrun_form_does_not(no_leftovers):
    nproc, gpus = 2, 2
    res = disttutor.launch("legacy_spawn", nproc=nproc, args={"gpus": gpus, "timeout": 3},
                           stream=False, timeout=LAUNCH_TIMEOUT)
    launched = {r["launched_pid"] for r in res.results}
    children = [c for r in res.results for c in r["children"]]
    # Double spawning: nproc x gpus processes tried to join, not nproc.
    assert len(children) == nproc * gpus == len({c["pid"] for c in children})
    assert {c["parent_pid"] for c in children} == launched and len(launched) == nproc
    # Clashing ranks: every launched process handed out ranks 0..gpus-1 of a world of gpus.
    assert sorted(c["rank"] for c in children) == sorted(list(range(gpus)) * nproc)
    assert {c["world_size"] for c in children} == {gpus}
    # Whatever pairing the race produced, no child ever saw all its siblings: a group
    # that formed has gpus members (sum == gpus, not nproc*gpus); the rest failed.
    for c in children:
        assert (c["ok"] and c["sum"] == gpus and len(c["partners"]) == gpus) or (not c["ok"] and c["error"])
    # Nothing left behind: every spawned child is gone (no_leftovers checks the tree too).
    for c in children:
        assert not psutil.pid_exists(c["pid"]) or "legacy_spawn" not in " ".join(psutil.Process(c["pid"]).cmdline())

    fixed = disttutor.launch("legacy_spawn", nproc=nproc, args={"fixed": True}, stream=False,
                             timeout=LAUNCH_TIMEOUT)
    recs = [c for r in fixed.results for c in r["children"]]
    assert [c["rank"] for c in recs] == list(range(nproc))  # one process per device, unique ranks
    assert all(c["ok"] and c["sum"] == nproc and c["world_size"] == nproc for c in recs)
    assert all(sorted(c["partners"]) == sorted(x["pid"] for x in recs) for c in recs)


def test_configs_reject_bad_input(capsys):
    with pytest.raises(ValueError, match="gpus must be 1..4"):
        LegacyConfig(gpus=0)
    with pytest.raises(ValueError, match="timeout must be"):
        LegacyConfig(timeout=0)
    with pytest.raises(ValueError, match="size must be >= 1"):
        WhoamiConfig(size=0)
    with pytest.raises(SystemExit):  # command line -> config: validated before anything starts
        legacy_main(["--gpus", "9"])
    assert "gpus must be 1..4" in capsys.readouterr().err  # one usage line, not a traceback


def test_read_identity_reads_only_torchrun_variables():
    ident = read_identity({"RANK": "3", "GROUP_RANK": "1", "HOME": "/x"})
    assert ident["RANK"] == "3" and ident["GROUP_RANK"] == "1" and ident["LOCAL_RANK"] is None
    assert "HOME" not in ident


def test_chapter_claims_name_what_failed():
    """The chapter's proof cells: each claim passes on a right run and names what failed on a wrong one."""
    from disttutor.checks.claims import ch05

    good = ["rank 0/2 on cpu: grad[0,0] = 12.0", "rank 1/2 on cpu: grad[0,0] = 12.0"]
    assert "12.0" in ch05.check_train_script(True, good, world=2)
    with pytest.raises(AssertionError, match="averaged gradient 12.0"):  # rank 1 kept its own gradient (no DDP)
        ch05.check_train_script(True, [good[0], "rank 1/2 on cpu: grad[0,0] = 16.0"], world=2)
    with pytest.raises(AssertionError, match="one line per rank"):
        ch05.check_train_script(False, good[:1], world=2)

    cmd = "torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint=h:29500 --rdzv-id=j -m m"
    assert "all 2 commands" in ch05.check_torchrun_parses([cmd, "X=1 " + cmd], 2, 4)
    with pytest.raises(AssertionError, match="one endpoint"):
        ch05.check_torchrun_parses([cmd, cmd.replace("h:29500", "h2:29500")], 2, 4)
    with pytest.raises(AssertionError, match="nnodes"):
        ch05.check_torchrun_parses([cmd.replace("--nnodes=2", "--nnodes=3")], 2, 4)

    assert "parses" in ch05.check_bash_syntax(0, "")
    with pytest.raises(AssertionError, match="unexpected EOF"):
        ch05.check_bash_syntax(2, "job.sbatch: line 3: syntax error: unexpected EOF\n")

    assert "all 2 ranks" in ch05.check_bad_interface(False, ["... find address for: nosuch0"] * 2, "nosuch0")
    with pytest.raises(AssertionError, match="should fail"):
        ch05.check_bad_interface(True, [None, None], "nosuch0")
    with pytest.raises(AssertionError, match="naming|name nosuch0"):
        ch05.check_bad_interface(False, ["timeout", "find address for: nosuch0"], "nosuch0")
