"""Chapter 5: the launch files disttutor.multinode.cluster generates are well-formed and torchrun accepts them.

Each generated torchrun command line is fed to torchrun's *own* argument
parser and config builder (torch.distributed.run), the sbatch script is
syntax-checked by bash and then run with stub `scontrol`/`srun`, and the
PyTorchJob manifest is parsed as YAML and checked against the Training
Operator v1 structure. No test here needs a cluster; tests/test_slurm.py
runs the Slurm script under a real one.
"""
from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import tempfile

import pytest
import yaml

from disttutor.multinode.cluster import ClusterConfig, pytorchjob_manifest, slurm_script, this_environment, torchrun_commands

torch_run = pytest.importorskip("torch.distributed.run")


def accept(argv: list[str]):
    """What torchrun itself makes of ``argv`` (raises SystemExit on a bad argument)."""
    args = torch_run.get_args_parser().parse_args(argv)
    config, cmd, cmd_args = torch_run.config_from_args(args)
    return args, config, cmd_args


@pytest.fixture(autouse=True)
def _quiet_tmp(tmp_path, monkeypatch):
    # config_from_args makes a log directory under the temp dir: keep it in pytest's.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


CFG = ClusterConfig(nnodes=3, nproc_per_node=4, gpus_per_node=4, module="disttutor.programs.whoami",
                    args=("--size", "3"), job_name="demo-job", head="10.0.0.1", port=29400,
                    partition="gpu", env={"NCCL_DEBUG": "WARN"})


def test_torchrun_commands_c10d_are_accepted_by_torchrun():
    cmds = torchrun_commands(CFG)
    assert len(cmds) == CFG.nnodes
    assert len(set(cmds)) == 1  # c10d: the same command on every node
    words = shlex.split(cmds[0])
    assert words[0] == "NCCL_DEBUG=WARN" and words[1] == "torchrun"
    args, config, cmd_args = accept(words[2:])
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (3, 3, 4)
    assert config.rdzv_backend == "c10d" and config.rdzv_endpoint == "10.0.0.1:29400"
    assert config.run_id == "demo-job" and config.max_restarts == 0
    assert cmd_args[-4:] == ["-m", "disttutor.programs.whoami", "--size", "3"]


def test_torchrun_commands_static_differ_only_in_node_rank():
    cfg = ClusterConfig(nnodes=2, nproc_per_node=2, gpus_per_node=0, rendezvous="static",
                        module=None, script="train.py", args=("--epochs", "2"), head="node-a", port=29500)
    for node, cmd in enumerate(torchrun_commands(cfg)):
        words = shlex.split(cmd)
        args, config, cmd_args = accept(words[1:])
        assert args.node_rank == node and config.rdzv_backend == "static"
        assert config.rdzv_endpoint == "node-a:29500"
        assert cmd_args[-3:] == ["train.py", "--epochs", "2"]


def test_slurm_script_is_valid_bash_and_runs_torchrun_once_per_node(tmp_path):
    text = slurm_script(CFG)
    path = tmp_path / "job.sbatch"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True)
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)$", text, re.M))
    assert directives["nodes"] == "3" and directives["ntasks-per-node"] == "1"
    assert directives["gpus-per-node"] == "4" and directives["partition"] == "gpu"
    assert directives["job-name"] == "demo-job" and directives["time"] == "01:00:00"
    # Run the script with stub scontrol/srun (tests/test_slurm.py runs it under a real Slurm): srun
    # prints the command it was given.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # scontrol lists the nodes, then (as a long host list would) keeps writing after the first line:
    # a script that reads only one line (`| head -n 1` under pipefail) dies of SIGPIPE here, every time.
    # `show node` answers as Slurm does: the node's address (NodeAddr) differs from its name.
    scontrol = """if [ "$2" = hostnames ]; then printf "gpu-node-7\\ngpu-node-8\\ngpu-node-9\\n"; sleep 0.2; seq 100000
else printf "NodeName=$3 Arch=x86_64 CoresPerSocket=8\\n   NodeAddr=10.0.0.7 NodeHostName=$3 Version=22.05.8\\n"; fi"""
    for name, body in {"scontrol": scontrol, "srun": 'printf "%s\\n" "$@"'}.items():
        (bindir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bindir / name).chmod(stat.S_IRWXU)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-node-[7-9]",
           "SLURM_JOB_ID": "4242", "SLURM_NNODES": "3"}
    out = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0].startswith("job 4242: 3 nodes (gpu-node-[7-9]), rendezvous at 10.0.0.7:")
    srun = lines[1:lines.index("torchrun")]
    assert srun == ["--label", "--kill-on-bad-exit=1"]  # every line labelled; one failed node ends them all
    argv = lines[lines.index("torchrun") + 1:]
    args, config, cmd_args = accept(argv)
    host, port = config.rdzv_endpoint.split(":")
    assert host == "10.0.0.7" and 1024 <= int(port) <= 65535  # the head's NodeAddr; a port from the OS
    assert config.run_id == "4242" and (config.min_nodes, config.nproc_per_node) == (3, 4)
    assert args.tee == "3"  # workers' lines reach the job's output, prefixed with their rank
    assert cmd_args[-4:] == ["-m", "disttutor.programs.whoami", "--size", "3"]


def test_slurm_script_activates_the_configured_environment_first(tmp_path):
    text = slurm_script(ClusterConfig(activate="source ~/venvs/ddp/bin/activate"))
    body = text.splitlines()
    assert body.index("source ~/venvs/ddp/bin/activate") < body.index("set -u  # after the activation: "
                                                                      "activation scripts may read unset variables")
    # without activate=: this Python's environment (the nodes share this file system)
    assert this_environment() in slurm_script(ClusterConfig()).splitlines()
    # an environment without torchrun: a clear one-line error, exit code 2, before anything is queued
    path = tmp_path / "job.sbatch"
    path.write_text(slurm_script(ClusterConfig(activate="export PATH=/nonexistent")))
    p = subprocess.run(["/bin/bash", str(path)], env={"PATH": "/nonexistent"}, capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.strip() == "torchrun not found: fix the activation line"


def _operator_env(pod_index: int) -> dict[str, str]:
    """What the Training Operator v1 injects into pod `pod_index` (Master is 0) for CFG."""
    return {"PET_NNODES": "3", "PET_NPROC_PER_NODE": "4", "PET_NODE_RANK": str(pod_index),
            "MASTER_ADDR": "demo-job-master-0", "MASTER_PORT": "29400"}


def test_pytorchjob_manifest_structure_and_torchrun_args():
    text = pytorchjob_manifest(CFG)
    assert "&id" not in text  # no YAML anchors: plain, editable text
    job = yaml.safe_load(text)
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PyTorchJob"
    assert job["metadata"] == {"name": "demo-job", "namespace": "default"}
    assert job["spec"]["nprocPerNode"] == "4"  # a string in the v1 API
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert set(specs) == {"Master", "Worker"}
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 2
    for kind, spec in specs.items():
        (c,) = spec["template"]["spec"]["containers"]
        assert c["name"] == "pytorch" and c["command"] == ["torchrun"]
        assert c["ports"] == [{"name": "pytorchjob-port", "containerPort": 29400}]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 4
        assert {"name": "NCCL_DEBUG", "value": "WARN"} in c["env"]
        for pod in ([0] if kind == "Master" else [1, 2]):
            env = _operator_env(pod)
            argv = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in c["args"]]  # k8s $(VAR)
            args, config, cmd_args = accept(argv)
            assert args.node_rank == pod and config.rdzv_endpoint == "demo-job-master-0:29400"
            assert (config.min_nodes, config.nproc_per_node) == (3, 4)
            assert cmd_args[-4:] == ["-m", "disttutor.programs.whoami", "--size", "3"]


def test_single_node_manifest_has_no_workers_and_cpu_job_requests_no_gpu():
    cfg = ClusterConfig(nnodes=1, nproc_per_node=2, gpus_per_node=0)
    job = yaml.safe_load(pytorchjob_manifest(cfg))
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Master"}
    (c,) = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    assert "--gpus-per-node" not in slurm_script(cfg)


def test_generators_are_deterministic():
    assert (torchrun_commands(CFG), slurm_script(CFG), pytorchjob_manifest(CFG)) == \
        (torchrun_commands(CFG), slurm_script(CFG), pytorchjob_manifest(CFG))


@pytest.mark.parametrize("kwargs, message", [
    ({"nnodes": 0}, "nnodes must be >= 1"),
    ({"nnodes": "2"}, "nnodes must be an integer"),
    ({"nproc_per_node": 8, "gpus_per_node": 4}, "one process per GPU"),
    ({"module": None, "script": None}, "exactly one of module="),
    ({"script": "train.py"}, "exactly one of module="),
    ({"module": "not a module"}, "dotted Python module"),
    ({"module": None, "script": "train.sh"}, ".py path"),
    ({"args": "--steps 3"}, "tuple of strings"),
    ({"job_name": "My_Job"}, "Kubernetes name"),
    ({"port": 80}, "unprivileged"),
    ({"rendezvous": "etcd"}, "'c10d' or 'static'"),
    ({"head": "node0:29500"}, "without port"),
    ({"time_limit": "1 hour"}, "HH:MM:SS"),
    ({"image": ""}, "container image"),
    ({"nproc_per_node": 4, "cpus_per_node": 2}, "every process needs at least one CPU"),
    ({"activate": "source a\nsource b"}, "one shell line"),
])
def test_bad_config_gets_a_clear_error(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        ClusterConfig(**kwargs)


def test_defaults_fit_a_cpu_course():
    cfg = ClusterConfig()
    # a CPU job (gloo) as in this course: no GPU request, which a GPU-less cluster refuses at submit
    assert cfg.gpus_per_node == 0 and "--gpus-per-node" not in slurm_script(cfg)
    # one CPU per process by default, the least that runs (a request above the nodes' CPUs never starts)
    assert cfg.cpus_per_node == cfg.nproc_per_node and ClusterConfig(nproc_per_node=3).cpus_per_node == 3
    assert "#SBATCH --cpus-per-task=3" in slurm_script(ClusterConfig(nproc_per_node=3))


@pytest.mark.timeout(180)
def test_pytorchjob_pods_commands_run_for_real_on_loopback(tmp_path):
    """No container runtime or API server here (docker has no daemon, kubectl no cluster), so the
    operator and the pods cannot run; what each pod would run can: the container's command and args,
    with the variables the operator injects, as two processes on loopback (Master pod, Worker pod)."""
    import json
    import sys
    import time

    from disttutor.launcher.launch import free_port
    from disttutor.contract.procs import kill_tree

    cfg = ClusterConfig(nnodes=2, nproc_per_node=1, module="disttutor.programs.whoami", job_name="pods")
    specs = yaml.safe_load(pytorchjob_manifest(cfg))["spec"]["pytorchReplicaSpecs"]
    port, procs = free_port(), []
    try:
        for pod, kind in enumerate(["Master", "Worker"]):
            (c,) = specs[kind]["template"]["spec"]["containers"]
            op = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": str(pod),
                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
            argv = [re.sub(r"\$\((\w+)\)", lambda m: op[m.group(1)], a) for a in c["args"]]
            assert c["command"] == ["torchrun"]  # run as the same program, from this interpreter
            env = {**os.environ, **{e["name"]: e["value"] for e in c["env"]}, **op,
                   "DISTTUTOR_RUN_DIR": str(tmp_path), "DISTTUTOR_COLLECTIVE_TIMEOUT": "60"}
            procs.append(subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *argv], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        deadline = time.monotonic() + 150  # ~5 s idle; generous for a loaded 2-core machine
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [p.poll() for p in procs] == [0, 0], "the pods' torchrun commands did not both succeed"
    finally:
        kill_tree([p.pid for p in procs if p.poll() is None])
    reports = [json.load(open(tmp_path / f"rank{r}.json"))["results"] for r in range(2)]
    for pod, rep in enumerate(reports):
        # static rendezvous: the operator's pod index (PET_NODE_RANK) *is* GROUP_RANK
        assert rep["env"]["GROUP_RANK"] == str(pod) and rep["env"]["WORLD_SIZE"] == "2"
        assert rep["ranks_per_node"] == [1.0, 1.0] and rep["rank_sum"] == 1.0
