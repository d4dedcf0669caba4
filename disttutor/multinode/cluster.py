"""Launch files for real clusters, generated from one typed config (chapter 5, multi-node).

One :class:`ClusterConfig` describes the job; three functions turn it into
ready-to-edit text:

* :func:`torchrun_commands` -- one plain ``torchrun`` command per node;
* :func:`slurm_script` -- an ``sbatch`` script: one ``srun`` task per node, each
  a torchrun agent that starts one process per GPU, meeting at the first
  node of the allocation through c10d rendezvous;
* :func:`pytorchjob_manifest` -- a Kubernetes ``PyTorchJob`` for the Kubeflow
  Training Operator v1 API (``apiVersion: kubeflow.org/v1``, ``Master`` +
  ``Worker`` replica specs, ``spec.nprocPerNode`` as in operator releases
  1.7+). The operator injects ``MASTER_ADDR``/``MASTER_PORT`` and
  ``PET_NODE_RANK``/``PET_NNODES``/``PET_NPROC_PER_NODE`` into each pod, and
  the manifest passes them to torchrun explicitly. (Kubeflow Trainer v2's
  ``TrainJob`` is the successor API; not generated here.)

Every launcher starts **one process per device** with torchrun; nothing in
the training script calls ``mp.spawn`` (chapter 5 shows what goes wrong then).
This module does not import torch.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

import yaml

__all__ = ["ClusterConfig", "torchrun_commands", "torchrun_args", "slurm_script", "pytorchjob_manifest"]

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
    port: the rendezvous / master TCP port on the head node.
    rendezvous: ``"c10d"`` (any node may become GROUP_RANK 0; the same command
        on every node) or ``"static"`` (``--node-rank`` decides GROUP_RANK).
    gpus_per_node: GPUs to request per node (0: a CPU job, gloo).
    """

    nnodes: int = 2
    nproc_per_node: int = 4
    module: str | None = "disttutor.programs.whoami"
    script: str | None = None
    args: tuple[str, ...] = ()
    job_name: str = "disttutor-job"
    head: str = "node0.example.com"
    port: int = 29500
    rendezvous: str = "c10d"
    gpus_per_node: int = 4
    cpus_per_node: int = 16
    partition: str | None = None
    time_limit: str = "01:00:00"
    image: str = "pytorch/pytorch:latest"
    namespace: str = "default"
    max_restarts: int = 0
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
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


def slurm_script(cfg: ClusterConfig) -> str:
    """An ``sbatch`` script: one task (a torchrun agent) per node, c10d rendezvous on the first node."""
    sb = [f"--job-name={cfg.job_name}", f"--nodes={cfg.nnodes}",
          "--ntasks-per-node=1",  # one torchrun agent per node; *it* starts the per-GPU processes
          f"--cpus-per-task={cfg.cpus_per_node}", f"--time={cfg.time_limit}", "--output=%x-%j.out"]
    if cfg.gpus_per_node:
        sb.append(f"--gpus-per-node={cfg.gpus_per_node}")
    if cfg.partition:
        sb.append(f"--partition={cfg.partition}")
    # c10d regardless of cfg.rendezvous: srun gives every node the same command line.
    c10d = ClusterConfig(**{**cfg.__dict__, "rendezvous": "c10d"})
    targs = torchrun_args(c10d, endpoint=f"$head_node:{cfg.port}", rdzv_id="$SLURM_JOB_ID",
                          nnodes="$SLURM_NNODES")
    options, target = targs[:-len(c10d.target())], c10d.target()
    # One option per line (easy to edit), the program and its arguments on the last.
    body = " \\\n    ".join(["srun torchrun"] + [_shell_word(a) for a in options] + [shlex.join(target)])
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(cfg.env.items()))
    return (
        "#!/bin/bash\n"
        f"# Generated by disttutor.multinode.cluster.slurm_script for {cfg.nnodes} node(s) x {cfg.nproc_per_node} "
        f"process(es): edit partition, time and image/environment for your site.\n"
        + "".join(f"#SBATCH {s}\n" for s in sb)
        + "\nset -euo pipefail\n"
        "# The first node of the allocation hosts the c10d rendezvous store. (sed, not `head -n 1`: head\n"
        "# exits after one line, and under pipefail scontrol's SIGPIPE would end the job.)\n"
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)\n'
        f"export OMP_NUM_THREADS=${{OMP_NUM_THREADS:-{max(1, cfg.cpus_per_node // cfg.nproc_per_node)}}}\n"
        + exports
        + f'echo "job $SLURM_JOB_ID: $SLURM_NNODES nodes, rendezvous at $head_node:{cfg.port}"\n\n'
        + body + "\n"
    )


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
