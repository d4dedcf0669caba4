"""Chapter 5's Slurm script under a real Slurm: a two-node cluster on this machine.

``disttutor.multinode.slurm_local`` starts munged, slurmctld and two slurmd (n1, n2, both at
127.0.0.1 on their own ports) in a temporary directory. The script that
``disttutor.multinode.cluster.slurm_script`` generates is submitted, unchanged, with
``sbatch``: 1 node x 2, 2 x 1 and 2 x 2 processes of ``whoami``; a ``hello`` whose
rank 1 crashes; and two jobs sharing a head node at the same time. Every job's
ranks report through files (DISTTUTOR_RUN_DIR), and the teardown checks that no
daemon, job process or listening port is left.

Needs root and Debian's slurmctld, slurmd, slurm-client and munge; skips without
them, unless DISTTUTOR_REQUIRE_SLURM=1 (.ci/run installs them and sets it).
"""
from __future__ import annotations

import os
import re
import time

import pytest

from disttutor.multinode import slurm_local
from disttutor.multinode.cluster import ClusterConfig, sbatch_test_only, slurm_script
from disttutor.launcher.collect import read_reports

SHAPES = [(1, 2), (2, 1), (2, 2)]  # (nodes, processes per node)
# The whole file's jobs share one bound: ~40 s on an idle 2-core machine, several times that under load.
JOBS_TIMEOUT_S = 240
# A rank that only ever waits (the crash case) gives up after this long; the crash must end the job sooner.
COLLECTIVE_TIMEOUT_S = 300


def _runtime_s(info: dict) -> int:
    """scontrol's RunTime ``[D-]HH:MM:SS`` in seconds."""
    days, _, hms = info["RunTime"].rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    why = slurm_local.unavailable()
    if why:
        if os.environ.get("DISTTUTOR_REQUIRE_SLURM") == "1":
            pytest.fail(f"DISTTUTOR_REQUIRE_SLURM=1 but no local Slurm: {why}")
        pytest.skip(f"no local Slurm: {why}")
    import psutil

    cluster = slurm_local.LocalSlurm(str(tmp_path_factory.mktemp("slurm")))
    with cluster:
        yield cluster
    # Nothing outlives the cluster: the daemons are gone, nothing was left for the sweep, no port listens.
    assert cluster.swept == [], f"processes left after the daemons stopped (killed): {cluster.swept}"
    for name, p in cluster.procs.items():
        assert p.returncode is not None and not psutil.pid_exists(p.pid), f"{name} (pid {p.pid}) still there"
    listening = [c for c in psutil.net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port in cluster.ports.values()]
    assert listening == [], f"still listening: {listening}"


def _submit(slurm, tmp_path, name: str, cfg: ClusterConfig, **env) -> tuple[str, str]:
    """Submit the generated script from a directory of its own; (job id, that directory)."""
    d = tmp_path / name
    d.mkdir()
    job_env = {"DISTTUTOR_RUN_DIR": str(d), "OMP_NUM_THREADS": "1",
               "DISTTUTOR_COLLECTIVE_TIMEOUT": str(COLLECTIVE_TIMEOUT_S), **env}
    return slurm.sbatch(slurm_script(cfg), cwd=str(d), env=job_env), str(d)


def _output(d: str, job_id: str) -> list[str]:
    (path,) = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(f"-{job_id}.out")]  # --output=%x-%j.out
    return open(path).read().splitlines()


@pytest.fixture(scope="module")
def jobs(slurm, tmp_path_factory):
    """Every job of the file, submitted at once (Slurm queues what does not fit) and waited for."""
    tmp = tmp_path_factory.mktemp("jobs")
    submitted = {}
    # Two jobs first, one CPU per node each: both fit at once, and both have n1 as their head. B runs
    # 4 s longer, so with one fixed rendezvous port it would outlive A's store (and die with it).
    for name, sleep in (("pair-a", "0"), ("pair-b", "4")):
        cfg = ClusterConfig(nnodes=2, nproc_per_node=1, module="disttutor.programs.hello",
                            args=("--sleep", sleep), job_name=name)
        submitted[name] = _submit(slurm, tmp, name, cfg)
    for nodes, procs in SHAPES:
        name = f"whoami-{nodes}x{procs}"
        submitted[name] = _submit(slurm, tmp, name, ClusterConfig(nnodes=nodes, nproc_per_node=procs,
                                                                  job_name=name))
    cfg = ClusterConfig(nnodes=2, nproc_per_node=1, module="disttutor.programs.hello",
                        args=("--crash-rank", "1"), job_name="crash")
    submitted["crash"] = _submit(slurm, tmp, "crash", cfg)
    together = []  # each poll's set of RUNNING jobs
    t0 = time.monotonic()
    infos = slurm.wait([j for j, _ in submitted.values()], timeout=JOBS_TIMEOUT_S,
                       watch=lambda st: together.append({j for j, s in st.items() if s == "RUNNING"}))
    print(f"\nall {len(submitted)} jobs done in {time.monotonic() - t0:.1f} s")
    return {name: {"id": j, "dir": d, "info": infos[j]} for name, (j, d) in submitted.items()}, together


@pytest.mark.timeout(JOBS_TIMEOUT_S + 60)
@pytest.mark.parametrize("nodes, procs", SHAPES)
def test_generated_script_runs_every_shape(jobs, nodes, procs):
    job = jobs[0][f"whoami-{nodes}x{procs}"]
    info, world = job["info"], nodes * procs
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), (info, _output(job["dir"], job["id"]))
    reports = read_reports(job["dir"])
    assert sorted(reports) == list(range(world))
    rows = []
    for rank, rep in sorted(reports.items()):
        env, res = rep["results"]["env"], rep["results"]
        g, lr, lws = int(env["GROUP_RANK"]), int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"])
        assert (int(env["WORLD_SIZE"]), int(env["GROUP_WORLD_SIZE"]), lws) == (world, nodes, procs)
        assert int(env["RANK"]) == rank == g * lws + lr  # torchrun numbers ranks node by node
        assert env["TORCHELASTIC_RUN_ID"] == job["id"]  # --rdzv-id=$SLURM_JOB_ID
        assert res["ranks_per_node"] == [float(procs)] * nodes  # the all-reduce crossed the nodes
        assert res["rank_sum"] == world * (world - 1) / 2  # 0+1+..+(W-1): every rank present once
        rows.append((rank, g, lr, res["slurm_node"]))
    assert {g for _, g, _, _ in rows} == set(range(nodes))
    # one GROUP_RANK per Slurm node: each node's agent numbered its own processes
    assert len({(g, n) for _, g, _, n in rows}) == nodes and {n for *_, n in rows} == set(slurm_local.NODES[:nodes])
    out = _output(job["dir"], job["id"])
    # the head's NodeAddr (127.0.0.1 here), not the node name n1, and a port of the job's own
    assert re.search(r"rendezvous at 127\.0\.0\.1:\d+$", out[0]), out[0]
    print(f"\n{nodes}x{procs}: job {job['id']} {info['JobState']} in {_runtime_s(info)} s on {info['NodeList']}; "
          f"(RANK, GROUP_RANK, LOCAL_RANK, node) = {rows}")


@pytest.mark.timeout(JOBS_TIMEOUT_S + 60)
def test_a_crashing_rank_fails_the_job_fast(jobs):
    job = jobs[0]["crash"]
    info, out = job["info"], _output(job["dir"], job["id"])
    assert info["JobState"] == "FAILED", info
    # labelled: srun --label puts the node's task index first, torchrun's prefix the global rank
    # (which node holds rank 1 is the rendezvous' choice: GROUP_RANK need not be the task index)
    assert any(re.fullmatch(r"[01]: \[rank1\]: crashing on purpose \(os\._exit\(3\)\)", ln) for ln in out), out
    # ended by the crash, not by rank 0 giving up: far below the collective timeout it would wait for
    assert _runtime_s(info) < COLLECTIVE_TIMEOUT_S / 2, info["RunTime"]
    print(f"\ncrash: job {job['id']} {info['JobState']} in {_runtime_s(info)} s, ExitCode {info['ExitCode']}")


@pytest.mark.timeout(JOBS_TIMEOUT_S + 60)
def test_two_jobs_sharing_a_head_both_complete(jobs):
    by_name, together = jobs
    a, b = by_name["pair-a"], by_name["pair-b"]
    assert any({a["id"], b["id"]} <= running for running in together), "the two jobs never ran at the same time"
    ports = []
    for job in (a, b):
        assert job["info"]["JobState"] == "COMPLETED", (job["info"], _output(job["dir"], job["id"]))
        assert job["info"]["NodeList"] == "n[1-2]"  # both heads are n1
        reports = read_reports(job["dir"])
        assert sorted(reports) == [0, 1] and all(r["results"]["after"] == [3.0] * 3 for r in reports.values())
        out = _output(job["dir"], job["id"])
        # every rank's line names its node (srun --label: the task index) and its rank (torchrun's prefix)
        labels = [re.match(r"([01]): \[rank([01])\]: after all_reduce: \[3\.0, 3\.0, 3\.0\]$", ln).groups()
                  for ln in out if "after all_reduce" in ln]
        assert len(labels) == 2 and {n for n, _ in labels} == {r for _, r in labels} == {"0", "1"}, out
        ports.append(re.search(r"rendezvous at \S+:(\d+)$", out[0]).group(1))
    assert ports[0] != ports[1]  # each job its own rendezvous port on the shared head
    print(f"\npair: jobs {a['id']} and {b['id']} ran together on n[1-2], both COMPLETED "
          f"({_runtime_s(a['info'])} s, {_runtime_s(b['info'])} s), rendezvous ports {ports}")


@pytest.mark.timeout(120)
def test_sbatch_test_only_refuses_what_the_cluster_cannot_give(slurm):
    ok, said = sbatch_test_only(slurm_script(ClusterConfig()), env=slurm.env)
    assert ok and "to start at" in said, said
    ok, said = sbatch_test_only(slurm_script(ClusterConfig(cpus_per_node=16)), env=slurm.env)
    assert not ok and "Requested node configuration is not available" in said, said
    ok, said = sbatch_test_only(slurm_script(ClusterConfig(nproc_per_node=4, gpus_per_node=4)), env=slurm.env)
    assert not ok and "Invalid generic resource (gres) specification" in said, said
