"""Chapter 5: the launch files disttutor.multinode.cluster generates are well-formed and torchrun accepts them.

Each generated torchrun command line is fed to torchrun's *own* argument
parser and config builder (torch.distributed.run), the sbatch script is
syntax-checked by bash and then run with stub `scontrol`/`srun`, and the
PyTorchJob manifest is parsed as YAML and checked against the Training
Operator v1 structure. No test needs a cluster.
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

from disttutor.multinode.cluster import ClusterConfig, pytorchjob_manifest, slurm_script, torchrun_commands

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
    # Run the script for real with stub scontrol/srun: srun prints the command it was given.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # scontrol lists the nodes, then (as a long host list would) keeps writing after the first line:
    # a script that reads only one line (`| head -n 1` under pipefail) dies of SIGPIPE here, every time.
    for name, body in {"scontrol": 'printf "gpu-node-7\\ngpu-node-8\\ngpu-node-9\\n"; sleep 0.2; seq 100000',
                       "srun": 'printf "%s\\n" "$@"'}.items():
        (bindir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bindir / name).chmod(stat.S_IRWXU)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-node-[7-9]",
           "SLURM_JOB_ID": "4242", "SLURM_NNODES": "3"}
    out = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    argv = lines[lines.index("torchrun") + 1:]
    args, config, cmd_args = accept(argv)
    assert config.rdzv_endpoint == "gpu-node-7:29400"  # the first node of the allocation
    assert config.run_id == "4242" and (config.min_nodes, config.nproc_per_node) == (3, 4)
    assert cmd_args[-4:] == ["-m", "disttutor.programs.whoami", "--size", "3"]


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
])
def test_bad_config_gets_a_clear_error(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        ClusterConfig(**kwargs)
