"""A real two-node Slurm cluster on this one machine (chapter 5; ``tests/test_slurm.py``).

Debian's ``slurmctld``, ``slurmd`` and ``munge`` (Slurm 22.05) are enough: one
``munged`` with its own key, one ``slurmctld`` and **two** ``slurmd`` (nodes
``n1`` and ``n2``, both ``NodeAddr=127.0.0.1`` on distinct ports). Everything
lives in one directory: config, key, state, spool, logs; every command gets
``SLURM_CONF``. No cgroups (``proctrack/linuxproc``, ``task/none``) and no
accounting, so it runs in a container. Needs root (slurmd starts the jobs' steps).

    with LocalSlurm(workdir) as slurm:
        job = slurm.sbatch(script_text, cwd=job_dir)
        info = slurm.wait(job, timeout=60)          # scontrol's fields: JobState, RunTime, ...

Every wait is bounded. :meth:`LocalSlurm.stop` cancels what is still queued,
stops each daemon by its PID and then ends any process that carries this
cluster's marker in its environment (slurmstepd and the jobs' processes
inherit it), so nothing outlives the cluster.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo", "scancel")
MARKER = "DISTTUTOR_SLURM_DIR"  # in the environment of every daemon and job of one LocalSlurm
NODES = ("n1", "n2")
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
        "PREEMPTED"}

_CONF = """\
ClusterName=disttutor
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge}/munge.sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
# no cgroups in a container: track processes by parent pid, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# CPUs are the resource: several jobs may share a node, as on a real cluster
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
# the nodes declare the CPUs written here, whatever this host has (both share its cores anyway)
SlurmdParameters=config_overrides
KillWait=2
MinJobAge=600
{nodes}
PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP
"""


def unavailable() -> str | None:
    """Why a local Slurm cannot run here (None: it can)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (slurmd starts the jobs' processes)"
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return (f"{', '.join(missing)} not installed (Debian/Ubuntu: apt-get install slurmctld slurmd "
                "slurm-client munge)")
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalSlurm:
    """munged + slurmctld + two slurmd under ``workdir``; a context manager."""

    def __init__(self, workdir: str, cpus_per_node: int = 2, timeout: float = 30.0):
        why = unavailable()
        if why:
            raise RuntimeError(f"no local Slurm: {why}")
        self.dir = os.path.abspath(workdir)
        self.cpus = cpus_per_node
        self.timeout = timeout
        self.procs: dict[str, subprocess.Popen] = {}
        self.munge_dir: str | None = None
        self.swept: list[int] = []  # PIDs the stop's sweep had to kill (normally none)
        self.ports: dict[str, int] = {}
        self.env = {**os.environ, "SLURM_CONF": os.path.join(self.dir, "slurm.conf"), MARKER: self.dir}

    # -- start / stop ------------------------------------------------------
    def __enter__(self) -> LocalSlurm:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        d = self.dir
        for sub in ("state", "log", *(f"spool/{n}" for n in NODES)):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        # munged wants every directory above its socket searchable by all (a test's tmp dir is not):
        # its files go to a directory of their own in the system's temp dir, removed by stop().
        self.munge_dir = m = tempfile.mkdtemp(prefix="disttutor-munge-")
        os.chmod(m, 0o755)
        key = os.path.join(m, "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o400), "wb") as f:
            f.write(os.urandom(1024))  # this cluster's own key: no daemon of another cluster can talk to it
        self._spawn("munged", ["munged", "-F", f"--key-file={key}", f"--socket={m}/munge.sock",
                               f"--pid-file={m}/munged.pid", f"--seed-file={m}/munged.seed",
                               f"--log-file={m}/munged.log"])
        self._until(lambda: os.path.exists(f"{m}/munge.sock"), "munged's socket")
        self.ports = {"slurmctld": _free_port(), **{n: _free_port() for n in NODES}}
        nodes = "\n".join(f"NodeName={n} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} "
                          f"Port={self.ports[n]} CPUs={self.cpus} State=UNKNOWN" for n in NODES)
        with open(self.env["SLURM_CONF"], "w") as f:
            f.write(_CONF.format(host=socket.gethostname(), ctld_port=self.ports["slurmctld"], d=d, munge=m,
                                 nodes=nodes, names=",".join(NODES)))
        self._spawn("slurmctld", ["slurmctld", "-D"])
        for n in NODES:
            self._spawn(n, ["slurmd", "-D", "-N", n])
        self._until(lambda: self.node_states() == {n: "idle" for n in NODES}, "both nodes idle in sinfo")

    def _spawn(self, name: str, argv: list[str]) -> None:
        from disttutor.contract.procs import PRCTL, tie_to_parent

        log = open(os.path.join(self.dir, "log", f"{name}.out"), "w")
        # tied to this process: if the kernel or pytest dies, the daemons get SIGTERM
        self.procs[name] = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            preexec_fn=(lambda: tie_to_parent(signal.SIGTERM)) if PRCTL else None)
        log.close()

    def _until(self, ready, what: str, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead[0]} exited ({self.procs[dead[0]].returncode}) while waiting for "
                                   f"{what}: {self.log_tail(dead[0])}")
            if ready():
                return
            time.sleep(0.1)
        raise TimeoutError(f"no {what} after {timeout or self.timeout:g} s: {self.log_tail('slurmctld')}")

    def log_tail(self, name: str, lines: int = 3) -> str:
        path = os.path.join(self.dir, "log", f"{name}.out")
        text = open(path, errors="replace").read() if os.path.exists(path) else ""
        return " | ".join(text.strip().splitlines()[-lines:]) or "(no output)"

    def stop(self) -> list[int]:
        """Cancel every job, stop the daemons by PID, end any process left with the marker.

        Returns the PIDs that had to be killed in the sweep (normally none; kept in ``swept``).
        """
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            queued = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
            if queued:
                self.run("scancel", *queued, check=False)
                try:
                    self._until(lambda: not self.run("squeue", "-h", "-o", "%i", check=False).stdout.split(),
                                "empty queue", timeout=15)
                except (TimeoutError, RuntimeError):
                    pass  # the sweep below ends whatever is left
        for name in [*NODES, "slurmctld", "munged"]:  # the reverse of the start order
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        swept = self._sweep()
        self.swept += swept
        if self.munge_dir:
            shutil.rmtree(self.munge_dir, ignore_errors=True)
        return swept

    def _sweep(self) -> list[int]:
        import psutil

        left = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if proc.pid != os.getpid() and proc.environ().get(MARKER) == self.dir:
                    left.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        for proc in left:
            proc.kill()
        psutil.wait_procs(left, timeout=5)
        return [p.pid for p in left]

    # -- using it ----------------------------------------------------------
    def run(self, *argv: str, check: bool = True, timeout: float = 30, **kw) -> subprocess.CompletedProcess:
        """A Slurm command against this cluster (SLURM_CONF set), bounded by ``timeout``."""
        p = subprocess.run(argv, env={**self.env, **kw.pop("env", {})}, capture_output=True, text=True,
                           timeout=timeout, **kw)
        if check and p.returncode:
            raise RuntimeError(f"{' '.join(argv[:2])} failed ({p.returncode}): {(p.stderr or p.stdout).strip()}")
        return p

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False, timeout=10).stdout
        return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)

    def sbatch(self, script: str, cwd: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> str:
        """Submit ``script`` (text) from ``cwd``; the job id."""
        return self.run("sbatch", "--parsable", *args, input=script, cwd=cwd, env=env or {}).stdout.strip()

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (JobState, RunTime, NodeList, ExitCode, ...)."""
        out = self.run("scontrol", "-o", "show", "job", job_id, timeout=10).stdout
        return dict(re.findall(r"(\S+?)=(\S*)", out))

    def states(self) -> dict[str, str]:
        """Every job the controller still knows (finished ones too): id -> state."""
        out = self.run("squeue", "-h", "-t", "all", "-o", "%i %T", timeout=10).stdout
        return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)

    def wait(self, job_ids: list[str], timeout: float = 60, watch=None) -> dict[str, dict[str, str]]:
        """Wait (bounded) until every job has ended; each one's fields.

        ``watch(states)`` sees each poll's states (e.g. to record which jobs ran at
        the same time). Jobs not done at the deadline are cancelled, then TimeoutError.
        """
        deadline = time.monotonic() + timeout
        while True:
            states = self.states()
            if watch:
                watch(states)
            if all(states.get(j) in DONE for j in job_ids):
                return {j: self.job(j) for j in job_ids}
            if time.monotonic() > deadline:
                left = {j: states.get(j) for j in job_ids if states.get(j) not in DONE}
                self.run("scancel", *left, check=False)
                raise TimeoutError(f"jobs not done after {timeout:g} s (cancelled): {left}")
            time.sleep(0.2)
