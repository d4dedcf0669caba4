"""Launch files for real clusters, generated from one typed config (chapter 5, multi-node).

One :class:`ClusterConfig` describes the job; three functions turn it into
ready-to-edit text:

* :func:`torchrun_commands` -- one plain ``torchrun`` command per node;
* :func:`slurm_script` -- an ``sbatch`` script: one ``srun`` task per node, each
  a torchrun agent that starts one process per device, meeting at the first
  node of the allocation through c10d rendezvous (its NodeAddr, a port of the
  job's own), every output line labelled with its node and rank;
* :func:`pytorchjob_manifest` -- a Kubernetes ``PyTorchJob`` for the Kubeflow
  Training Operator v1 API (``apiVersion: kubeflow.org/v1``, ``Master`` +
  ``Worker`` replica specs, ``spec.nprocPerNode`` as in operator releases
  1.7+). The operator injects ``MASTER_ADDR``/``MASTER_PORT`` and
  ``PET_NODE_RANK``/``PET_NNODES``/``PET_NPROC_PER_NODE`` into each pod, and
  the manifest passes them to torchrun explicitly. (Kubeflow Trainer v2's
  ``TrainJob`` is the successor API; not generated here.)

Every launcher starts **one process per device** with torchrun; nothing in
the training script calls ``mp.spawn`` (chapter 5 shows what goes wrong then).
The Slurm script was run under a real Slurm (``tests/test_slurm.py``, a
two-node cluster on one machine); each of its fixes is for a failure seen there.
This module does not import torch.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field

import yaml

__all__ = ["ClusterConfig", "torchrun_commands", "torchrun_args", "slurm_script", "sbatch_test_only",
           "this_environment", "pytorchjob_manifest"]

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")       # a Kubernetes object name (RFC 1123 label)
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_TIME = re.compile(r"^(\d+-)?\d{1,2}:\d{2}:\d{2}$")           # Slurm [D-]HH:MM:SS


@dataclass(frozen=True)
class ClusterConfig:
    """A multi-node job, described once for every launcher.

    nnodes, nproc_per_node: machines, and processes (= devices) per machine.
    module or script: what each process runs (``python -m module`` or a path), exactly one.
    args: the program's own arguments.
    head: the rendezvous host (first node) for plain torchrun commands; Slurm
        and Kubernetes find it themselves.
    port: the rendezvous / master TCP port on the head node (plain commands and
        Kubernetes, where each pod has an address of its own). The Slurm script
        takes a free port on the head per job instead: two jobs may share a head.
    rendezvous: ``"c10d"`` (any node may become GROUP_RANK 0; the same command
        on every node) or ``"static"`` (``--node-rank`` decides GROUP_RANK).
    gpus_per_node: GPUs to request per node. Default 0: a CPU job (gloo), as in
        this course; a request for GPUs on a cluster without them is refused.
    cpus_per_node: CPUs to request per node; default ``nproc_per_node`` (one per
        process, the least that runs). A request larger than the nodes have is
        never scheduled: check with :func:`sbatch_test_only` first.
    activate: the shell line that puts torch, torchrun and your code on the
        PATH on every node of a Slurm job (``source ~/venvs/ddp/bin/activate``,
        ``conda activate ddp``, ``module load pytorch``). Default: the
        environment of the Python generating the script (:func:`this_environment`),
        right where the nodes share this file system.
    """

    nnodes: int = 2
    nproc_per_node: int = 2
    module: str | None = "disttutor.programs.whoami"
    script: str | None = None
    args: tuple[str, ...] = ()
    job_name: str = "disttutor-job"
    head: str = "node0.example.com"
    port: int = 29500
    rendezvous: str = "c10d"
    gpus_per_node: int = 0
    cpus_per_node: int | None = None
    partition: str | None = None
    time_limit: str = "01:00:00"
    image: str = "pytorch/pytorch:latest"
    namespace: str = "default"
    max_restarts: int = 0
    env: dict[str, str] = field(default_factory=dict)
    activate: str | None = None

    def __post_init__(self):
        if self.cpus_per_node is None:
            object.__setattr__(self, "cpus_per_node", self.nproc_per_node)
        for name in ("nnodes", "nproc_per_node", "gpus_per_node", "cpus_per_node", "port", "max_restarts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an integer, got {v!r}")
        if self.nnodes < 1:
            raise ValueError(f"nnodes must be >= 1, got {self.nnodes}")
        if self.nproc_per_node < 1:
            raise ValueError(f"nproc_per_node must be >= 1, got {self.nproc_per_node}")
        if self.gpus_per_node < 0 or self.cpus_per_node < 1 or self.max_restarts < 0:
            raise ValueError("gpus_per_node and max_restarts must be >= 0, cpus_per_node >= 1")
        if self.cpus_per_node < self.nproc_per_node:
            raise ValueError(f"cpus_per_node={self.cpus_per_node} < nproc_per_node={self.nproc_per_node}: every "
                             "process needs at least one CPU")
        if self.gpus_per_node and self.nproc_per_node != self.gpus_per_node:
            raise ValueError(
                f"nproc_per_node={self.nproc_per_node} but gpus_per_node={self.gpus_per_node}: start exactly one "
                "process per GPU (torchrun does it; never mp.spawn more inside the script)")
        if (self.module is None) == (self.script is None):
            raise ValueError("give exactly one of module= (python -m ...) or script= (a .py path)")
        if self.module is not None and not _MODULE.match(self.module):
            raise ValueError(f"module must be a dotted Python module name, got {self.module!r}")
        if self.script is not None and not self.script.endswith(".py"):
            raise ValueError(f"script must be a .py path, got {self.script!r}")
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise TypeError("args must be a tuple of strings, e.g. ('--steps', '10')")
        object.__setattr__(self, "args", tuple(self.args))
        if not _NAME.match(self.job_name) or len(self.job_name) > 50:
            raise ValueError(f"job_name must be lowercase letters, digits and '-' (a Kubernetes name, <= 50 "
                             f"chars), got {self.job_name!r}")
        if not 1024 <= self.port <= 65535:
            raise ValueError(f"port must be 1024..65535 (unprivileged), got {self.port}")
        if self.rendezvous not in ("c10d", "static"):
            raise ValueError(f"rendezvous must be 'c10d' or 'static', got {self.rendezvous!r}")
        if not self.head or any(c.isspace() for c in self.head) or ":" in self.head:
            raise ValueError(f"head must be a host name or IPv4 address without port, got {self.head!r}")
        if not _TIME.match(self.time_limit):
            raise ValueError(f"time_limit must be Slurm's [D-]HH:MM:SS, got {self.time_limit!r}")
        if not self.image or any(c.isspace() for c in self.image):
            raise ValueError(f"image must be a container image reference, got {self.image!r}")
        if not all(re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k) and isinstance(v, str) for k, v in self.env.items()):
            raise ValueError("env must map variable names to strings")
        if self.activate is not None and (not self.activate.strip() or "\n" in self.activate):
            raise ValueError(f"activate must be one shell line (e.g. 'source ~/venv/bin/activate'), "
                             f"got {self.activate!r}")

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def target(self) -> list[str]:
        """What torchrun runs: ``-m module args`` or ``script args``."""
        return (["-m", self.module] if self.module else [self.script]) + list(self.args)


def torchrun_args(cfg: ClusterConfig, node_rank: int | None = None, *, endpoint: str | None = None,
                  rdzv_id: str | None = None, nnodes: str | None = None) -> list[str]:
    """torchrun's arguments (without the ``torchrun`` word) for one node.

    ``endpoint``/``rdzv_id``/``nnodes`` may be shell expressions (Slurm uses
    ``$head_node:PORT`` and ``$SLURM_JOB_ID``).
    """
    argv = [f"--nnodes={nnodes or cfg.nnodes}", f"--nproc-per-node={cfg.nproc_per_node}"]
    if cfg.rendezvous == "c10d":
        # c10d rendezvous: GROUP_RANK is assigned when the agents meet (sorted by
        # host and agent pid), so no --node-rank: torchrun would ignore it anyway.
        argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint or f'{cfg.head}:{cfg.port}'}",
                 f"--rdzv-id={rdzv_id or cfg.job_name}"]
    else:
        # static rendezvous: the article's model -- each node is told its rank.
        if node_rank is None:
            raise ValueError("static rendezvous needs a node_rank for each node")
        host, _, port = (endpoint or f"{cfg.head}:{cfg.port}").rpartition(":")
        argv += [f"--node-rank={node_rank}", f"--master-addr={host}", f"--master-port={port}"]
    argv.append(f"--max-restarts={cfg.max_restarts}")
    return argv + cfg.target()


def _env_prefix(cfg: ClusterConfig) -> str:
    return "".join(f"{k}={shlex.quote(v)} " for k, v in sorted(cfg.env.items()))


def torchrun_commands(cfg: ClusterConfig) -> list[str]:
    """One shell command per node, to run on that node (node 0 first: it hosts the rendezvous).

    With c10d every node runs the *same* command; with static rendezvous they
    differ only in ``--node-rank``.
    """
    return [_env_prefix(cfg) + shlex.join(["torchrun", *torchrun_args(cfg, node)]) for node in range(cfg.nnodes)]


def this_environment() -> str:
    """The shell line that activates the environment of the running Python.

    A venv: ``source <venv>/bin/activate``; a conda environment: conda's hook
    and ``conda activate <prefix>``; otherwise the interpreter's directory
    first on PATH. Right for a cluster whose nodes see this file system.
    """
    activate = os.path.join(sys.prefix, "bin", "activate")
    if sys.prefix != sys.base_prefix and os.path.exists(activate):
        return "source " + shlex.quote(activate)
    if os.environ.get("CONDA_PREFIX") == sys.prefix:
        return f'eval "$(conda shell.bash hook)" && conda activate {shlex.quote(sys.prefix)}'
    return f'export PATH={shlex.quote(os.path.dirname(sys.executable))}:"$PATH"'


# A free TCP port on this host, from the OS (the batch script runs on the head node).
_FREE_PORT = "python3 -c 'import socket; s = socket.socket(); s.bind((\"\", 0)); print(s.getsockname()[1])'"


def slurm_script(cfg: ClusterConfig) -> str:
    """An ``sbatch`` script: one task (a torchrun agent) per node, c10d rendezvous on the first node.

    Each line is there for a failure seen under a real Slurm (``tests/test_slurm.py``):
    the environment is activated (else ``execve(): torchrun: No such file``); the
    head is reached at its NodeAddr (a node name need not resolve); the port is
    the job's own (two jobs with one head joined one rendezvous on a fixed port);
    ``--label`` and torchrun's prefix name the node and rank of every line;
    ``--kill-on-bad-exit`` ends every node's agent when one fails.
    """
    sb = [f"--job-name={cfg.job_name}", f"--nodes={cfg.nnodes}",
          "--ntasks-per-node=1",  # one torchrun agent per node; *it* starts the per-device processes
          f"--cpus-per-task={cfg.cpus_per_node}", f"--time={cfg.time_limit}", "--output=%x-%j.out"]
    if cfg.gpus_per_node:
        sb.append(f"--gpus-per-node={cfg.gpus_per_node}")
    if cfg.partition:
        sb.append(f"--partition={cfg.partition}")
    # c10d regardless of cfg.rendezvous: srun gives every node the same command line.
    c10d = ClusterConfig(**{**cfg.__dict__, "rendezvous": "c10d"})
    targs = torchrun_args(c10d, endpoint="$head_addr:$rdzv_port", rdzv_id="$SLURM_JOB_ID", nnodes="$SLURM_NNODES")
    options, target = targs[:-len(c10d.target())], c10d.target()
    options.append("--tee=3")  # workers' stdout+stderr to the console, each line prefixed (template below)
    # One option per line (easy to edit), the program and its arguments on the last.
    body = " \\\n    ".join(["srun --label --kill-on-bad-exit=1 torchrun"] + [_shell_word(a) for a in options]
                             + [shlex.join(target)])
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(cfg.env.items()))
    threads = max(1, cfg.cpus_per_node // cfg.nproc_per_node)
    return (
        "#!/bin/bash\n"
        f"# Generated by disttutor.multinode.cluster.slurm_script for {cfg.nnodes} node(s) x {cfg.nproc_per_node} "
        "process(es): edit partition, time and the activation line for your site.\n"
        "# Check the request before queueing: sbatch --test-only THIS_FILE (queues nothing).\n"
        + "".join(f"#SBATCH {s}\n" for s in sb)
        + "\nset -eo pipefail\n"
        "# torch, torchrun and the program on every node: the job's steps inherit this environment.\n"
        + (cfg.activate or this_environment()) + "\n"
        "set -u  # after the activation: activation scripts may read unset variables\n"
        "command -v torchrun >/dev/null || { echo \"torchrun not found: fix the activation line\" >&2; exit 2; }\n"
        "# The head is the first node of the allocation; this script runs on it. Reach it at its NodeAddr: a\n"
        "# node *name* need not resolve. (sed reads all of scontrol's output: under pipefail, `head -n 1`\n"
        "# would end the job with scontrol's SIGPIPE.)\n"
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)\n'
        'head_addr=$(scontrol show node "$head_node" | sed -n \'s/.*NodeAddr=\\([^ ]*\\).*/\\1/p\')\n'
        ': "${head_addr:?no NodeAddr for $head_node in scontrol show node}"\n'
        "# A rendezvous port of this job's own, free on the head now: two jobs sharing a head must not\n"
        "# meet at one fixed port (the second would join the first job's rendezvous).\n"
        f"rdzv_port=$({_FREE_PORT})\n"
        f"export OMP_NUM_THREADS=${{OMP_NUM_THREADS:-{threads}}}\n"
        "# Every line names its rank (torchrun's prefix); srun --label adds the node (task) index in front.\n"
        "export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]: '\n"
        + exports
        + 'echo "job $SLURM_JOB_ID: $SLURM_NNODES nodes ($SLURM_JOB_NODELIST), rendezvous at $head_addr:$rdzv_port"\n\n'
        + body + "\n"
    )


def sbatch_test_only(script: str, env: dict[str, str] | None = None, timeout: float = 30) -> tuple[bool, str]:
    """Ask Slurm whether it could run ``script`` (``sbatch --test-only``): (ok, what it said).

    Nothing is queued. Run it where ``sbatch`` works (a login node); a request no
    node can satisfy (too many CPUs, GPUs on a cluster without them) is refused here
    instead of pending for ever.
    """
    try:
        p = subprocess.run(["sbatch", "--test-only"], input=script, capture_output=True, text=True,
                           timeout=timeout, env=env)
    except FileNotFoundError:
        return False, "sbatch not found: run this where Slurm's commands are (a login node)"
    except subprocess.TimeoutExpired:
        return False, f"sbatch --test-only did not answer in {timeout:g} s (is slurmctld up?)"
    said = (p.stderr + p.stdout).strip().splitlines()
    return p.returncode == 0, (said[-1] if said else f"exit code {p.returncode}")


def _shell_word(arg: str) -> str:
    """Quote an argument but let ``$VAR`` expand (double quotes, not single)."""
    if "$" in arg:
        return '"' + arg.replace('"', '\\"') + '"'
    return shlex.quote(arg)


def pytorchjob_manifest(cfg: ClusterConfig) -> str:
    """A Kubeflow ``PyTorchJob`` (``kubeflow.org/v1``): 1 Master + (nnodes-1) Workers, one pod per node.

    torchrun in each pod gets its node rank and the master's address from the
    variables the Training Operator injects (``$(VAR)`` is Kubernetes' own
    expansion in ``args``). Static rendezvous: the operator numbers the pods.
    """
    targs = ["--nnodes=$(PET_NNODES)", "--nproc-per-node=$(PET_NPROC_PER_NODE)", "--node-rank=$(PET_NODE_RANK)",
             "--master-addr=$(MASTER_ADDR)", "--master-port=$(MASTER_PORT)",
             f"--max-restarts={cfg.max_restarts}", *cfg.target()]

    def replica(n: int) -> dict:
        container = {
            "name": "pytorch",  # the operator looks for a container with exactly this name
            "image": cfg.image,
            "command": ["torchrun"],
            "args": list(targs),  # a copy per replica: YAML would otherwise print an &anchor/*alias
            "ports": [{"name": "pytorchjob-port", "containerPort": cfg.port}],
            "env": [{"name": k, "value": v} for k, v in sorted(cfg.env.items())]
                   + [{"name": "OMP_NUM_THREADS", "value": str(max(1, cfg.cpus_per_node // cfg.nproc_per_node))}],
            "resources": {"limits": {"cpu": str(cfg.cpus_per_node),
                                     **({"nvidia.com/gpu": cfg.gpus_per_node} if cfg.gpus_per_node else {})}},
        }
        return {"replicas": n, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    specs = {"Master": replica(1)}
    if cfg.nnodes > 1:
        specs["Worker"] = replica(cfg.nnodes - 1)
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": cfg.job_name, "namespace": cfg.namespace},
        "spec": {"nprocPerNode": str(cfg.nproc_per_node),  # a string in the v1 API ("auto" is allowed too)
                 "runPolicy": {"cleanPodPolicy": "None"},
                 "pytorchReplicaSpecs": specs},
    }
    head = (f"# Generated by disttutor.multinode.cluster.pytorchjob_manifest: Kubeflow Training Operator v1 "
            f"(kubeflow.org/v1), {cfg.nnodes} pod(s) x {cfg.nproc_per_node} process(es).\n")
    return head + yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False)
