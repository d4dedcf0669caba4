# %% [markdown] id="md-05-01"
# # Chapter 5 — Multi-node training
#
# *Article §5.3 "多机训练扩展" (scaling to several machines).*
#
# Going from one machine to several changes **nothing in the training code**: every process still calls
# `init_process_group`, wraps its model in DDP and all-reduces gradients. What changes is **how the processes
# start and how they find each other**.
#
# Here every "node" is a set of processes on this one machine, talking over loopback (`127.0.0.1`).
# Interfaces, firewalls and InfiniBand cannot be measured here; section 4 gives the checks for a cluster.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(5)

# %% [markdown] id="md-05-02" tags=["opening"]
# **After this chapter you can**
# * start a job on several nodes with torchrun and a c10d rendezvous, and read `RANK`, `LOCAL_RANK` and
#   `GROUP_RANK` on every process;
# * explain what the article's `torch.distributed.launch` + `mp.spawn` launch really does, and replace it;
# * generate a launch for a real cluster (a torchrun command per node, a Slurm script, a Kubernetes
#   `PyTorchJob`) from one config.

# %%
import dataclasses
import difflib
import inspect
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile

import matplotlib.pyplot as plt
import torch
import yaml
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr
from torch.distributed.run import get_args_parser

import disttutor
from disttutor.checks.claims.ch05 import (check_double_spawn, check_fixed_launch, check_group_rank_order,
                                          check_launch_deprecated, check_pytorchjob, check_rank_layout,
                                          check_slurm_job, check_what_launchers_pass)
from disttutor.contract.procs import kill_tree
from disttutor.course.source import deeper, source_lines
from disttutor.launcher.collect import read_reports
from disttutor.launcher.launch import free_port
from disttutor.launcher.results import format_table
from disttutor.multinode import cluster, slurm_local
from disttutor.viz.cluster import draw_layout

print("torch", torch.__version__, "| usable CPU cores:", disttutor.cores(), "| GPUs:", torch.cuda.device_count())

# %% [markdown] id="md-05-03"
# ## 1. Two nodes on one machine
#
# On a cluster you run **one torchrun per machine**. Each torchrun, an *agent*, starts one worker process per
# device and joins a *rendezvous*: the agents meet at an agreed `host:port` and number themselves. Each agent
# then gives its workers their identity in environment variables:
#
# | variable | meaning | here (2 nodes × 2 processes) |
# |---|---|---|
# | `RANK` | global rank, what `init_process_group` uses | 0..3 |
# | `LOCAL_RANK` | index of the process on its node; picks the GPU `cuda:LOCAL_RANK` | 0..1 |
# | `GROUP_RANK` | index of the node (its agent) in the job | 0..1 |
# | `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `GROUP_WORLD_SIZE` | processes in the job, on this node; nodes | 4, 2, 2 |
# | `MASTER_ADDR`, `MASTER_PORT` | the key-value store the workers meet at | one per job |

# %% [markdown] id="md-05-35"
# The cell below starts **two torchrun agents** here with `--nnodes=2 --node-rank=0` (and `1`)
# `--rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:PORT`; on two machines the head's address replaces
# `127.0.0.1`. The program `whoami` reports its variables and all-reduces across the "nodes": ranks per node,
# and the sum of all ranks.

# %%
res = disttutor.launch("whoami", nproc=2, nnodes=2, stream=False, timeout=150)
envs = [r["env"] for r in res.results]
res

# %% tags=["nbval-check-output"]
COLS = ["RANK", "GROUP_RANK", "LOCAL_RANK", "ROLE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE"]
rows = [{**{c: int(e[c]) for c in COLS}, "ranks per node": rep["ranks_per_node"], "sum of ranks": rep["rank_sum"]}
        for e, rep in zip(envs, res.results)]
print(format_table(rows))

# %% [markdown] id="md-05-04"
# Every rank counted 2 ranks per node and a rank sum of 0+1+2+3 = 6: the all-reduces crossed the nodes. With
# the same number of processes on every node, torchrun numbers ranks node by node:
#
# $$\text{RANK} = \text{GROUP\_RANK} \times \text{LOCAL\_WORLD\_SIZE} + \text{LOCAL\_RANK}$$

# %% tags=["proof", "nbval-check-output"]
print(check_rank_layout(envs, res.results, res.world_size))  # and one store for the whole job

# %% [markdown] id="md-05-05"
# ### The picture
# Two nodes (agents), two processes each, and the global rank each process got, drawn from the reports above.

# %%
draw_layout(envs)
plt.show()

# %% [markdown] id="md-05-06"
# ### Who decides which node is node 0?
#
# We passed `--node-rank=0` to the first agent and `--node-rank=1` to the second. With the c10d rendezvous
# torchrun ignores it, and says so in its log:

# %% tags=["nbval-check-output"]
warning = [ln for ln in res.agent_log if "node_rank is only used" in ln]
assert warning, "torchrun did not warn about --node-rank"
print(warning[0][warning[0].index("node_rank"):])

# %% [markdown] id="md-05-07"
# When the c10d rendezvous completes, it **sorts** the agents by (name, process id) and numbers them in that
# order. The name is the agent's `--local-addr` if given, else `socket.getfqdn()`, compared as a string
# (`node10` before `node2`); on one host the pids decide (folded below). So with c10d every node runs the
# *same* command and reads `GROUP_RANK` from its environment; `--rdzv-backend=static` fixes the order, with
# `--node-rank` as `GROUP_RANK`.

# %% tags=["deeper"]
src = inspect.getsource(dr)
assign = re.search(r"\n(\s*# Assign the ranks\.\n.*\n.*\n)", src).group(1)
agents = {int(r.results["env"]["GROUP_RANK"]): (r.info["agent"], r.results["agent_pid"]) for r in res.ranks}
pids_by_group = [agents[g][1] for g in sorted(agents)]
check_group_rank_order(assign, pids_by_group)  # the sort this paragraph describes, and this run's pids
deeper("dynamic_rendezvous.py sorts _NodeDesc(addr, pid, local_id); this run's agents in GROUP_RANK order",
       inspect.getsource(dr._NodeDesc).split('"""')[0].strip().splitlines(), ["..."], assign.rstrip().splitlines(),
       [""], format_table([{"GROUP_RANK": g, "--node-rank passed": a, "agent pid": pid}
                           for g, (a, pid) in sorted(agents.items())]).splitlines(),
       [f"GROUP_RANK order == agent pid order: {pids_by_group == sorted(pids_by_group)}"])

# %% [markdown] id="md-05-08"
# One rank's full torchrun environment (the port and run id change every run):

# %%
for k, v in envs[-1].items():
    print(f"  {k:28s} {v}")

# %% [markdown] id="md-05-09"
# ## 2. One launcher: torchrun
#
# <details><summary><b>The article says</b> run <code>python -m torch.distributed.launch --nproc_per_node=4
# --nnodes=2 --node_rank=0</code> (<code>1</code> on the second machine) on <code>train_script.py</code>, 2
# machines with 4 GPUs each</summary>
#
# The article never shows `train_script.py`; its §5.2 script's `main()` runs `mp.spawn(train,
# args=(world_size,), nprocs=world_size)` with `world_size = torch.cuda.device_count()`. Run that way, each of
# the 4 launched processes per machine spawns 4 more: 32 training processes for 8 GPUs, each taking its spawn
# index (0..3) as its rank in a world of 4. Every rank is claimed 8 times, at one `MASTER_ADDR:MASTER_PORT`.
#
# Today `torch.distributed.launch` still runs but is deprecated. The cells below run a 2 × 2 copy of the
# double launch, then the fix: torchrun alone starts the processes.
# </details>
#
# First: is `torch.distributed.launch` still there?

# %%
proc = subprocess.run([sys.executable, "-m", "torch.distributed.launch", "--help"], capture_output=True,
                      text=True, timeout=120, cwd=tempfile.gettempdir(), env={**os.environ, "OMP_NUM_THREADS": "1"})
warn = proc.stderr[proc.stderr.index("FutureWarning"):].split("\n\n")[0]
print("exit code:", proc.returncode)
print(warn)
print("...")
print("\n".join(proc.stdout.splitlines()[:3]), "...")

# %% tags=["proof", "nbval-check-output"]
print(check_launch_deprecated(proc.returncode, warn, proc.stdout))  # --use-env: its only addition to torchrun's parser

# %% [markdown] id="md-05-10"
# What does each launcher hand its script? A two-line script prints its `sys.argv` and `LOCAL_RANK`, started
# on 2 processes three ways (killed if it runs past 120 s):

# %%
# Both processes write to one pipe: one os.write of a whole line each (atomic below 4 KiB), because
# print() may write the text and its newline separately and two lines could interleave.
SHOW_ARGS = """import json, os, sys
os.write(1, ("ARGS " + json.dumps({"argv": sys.argv[1:], "LOCAL_RANK": os.environ.get("LOCAL_RANK")}) + "\\n").encode())
"""


def what_it_passes(launcher: list[str]) -> list[dict]:
    """Run ``launcher`` on SHOW_ARGS with 2 processes; each process's argv and LOCAL_RANK, by local rank."""
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "show_args.py")
        with open(script, "w") as f:
            f.write(SHOW_ARGS)
        cmd = [sys.executable, "-m", *launcher, "--nproc-per-node", "2", "--master-port", str(free_port()),
               "show_args.py"]
        p = subprocess.Popen(cmd, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            kill_tree([p.pid])  # the agent and its workers: nothing outlives the cell
            raise RuntimeError(f"{' '.join(launcher)} did not finish in 120 s (killed)")
    recs = [json.loads(line.split("ARGS ", 1)[1]) for line in out.splitlines() if "ARGS " in line]
    assert len(recs) == 2, f"{' '.join(launcher)}: expected 2 processes to report, got {len(recs)}"
    return sorted(recs, key=lambda r: r["LOCAL_RANK"] or "")


passed = {"torch.distributed.launch": what_it_passes(["torch.distributed.launch"]),
          "torch.distributed.launch --use-env": what_it_passes(["torch.distributed.launch", "--use-env"]),
          "torchrun": what_it_passes(["torch.distributed.run"])}
print(format_table([{"launcher": k, "process": i, "sys.argv[1:]": r["argv"], "LOCAL_RANK in env": r["LOCAL_RANK"]}
                    for k, recs in passed.items() for i, r in enumerate(recs)]))

# %% tags=["nbval-check-output"]
check_what_launchers_pass(passed)
plain = passed["torch.distributed.launch"]
print(f"torch.distributed.launch passes {plain[0]['argv'][0]!r} (a dash, not --local_rank) on the command "
      "line, and sets LOCAL_RANK too;")
print("with --use-env, and with torchrun, the command line is empty: read LOCAL_RANK from the environment.")

# %% [markdown] id="md-05-11"
# It still exists, a thin wrapper around torchrun's `run()`. Now the double launch at this
# machine's size: torchrun starts **2** processes, and each `mp.spawn`s **2** children with the article's rank
# formula and a 3-second timeout (program `disttutor/programs/legacy_spawn.py`). Every spawned child, folded:

# %% tags=["deeper"]
art = disttutor.launch("legacy_spawn", nproc=2, args={"gpus": 2, "timeout": 3}, stream=False, timeout=150)
children = [c for r in art.results for c in r["children"]]
launched_pids = sorted(r["launched_pid"] for r in art.results)
deeper("every spawned child: its rank, its partners, its error (this run)", format_table([{"launched by torchrun as RANK": c["launched_rank"], "spawn index = rank": c["rank"],
                     "world_size": c["world_size"], "joined": c["ok"],
                     "all-reduce of 1s": c["sum"],
                     "partners (launched RANK of each)": None if not c["partners"] else
                         [next(x["launched_rank"] for x in children if x["pid"] == p) for p in c["partners"]],
                     # drop gloo's source-file prefix ("[/.../pair.cc:152] ") and keep the words
                     "error": re.sub(r"\[[^\]]*\.(?:cc|h):\d+\]\s*", "", c["error"] or "")[:70]}
                    for c in children]).splitlines())

# %% [markdown] id="md-05-12"
# Which children pair up is a **race**: duplicate ranks meet at one store, and which one the others reach
# depends on timing. A run can show crossing pairs, connect timeouts, or the worst case:
# groups of 2 that all "succeed", a job split into separate worlds **with no error at all**. This run:

# %%
groups = {tuple(sorted(c["partners"])) for c in children if c["ok"]}
failed = [c for c in children if not c["ok"]]
crossing = [g for g in groups if len({x["launched_rank"] for x in children if x["pid"] in g}) > 1]
print(f"groups that formed: {len(groups)} (of 2 members each), crossing launched processes: {len(crossing)}, "
      f"children that failed: {len(failed)}")
if not failed:
    print("verdict: SILENT SPLIT -- no error anywhere, yet no group holds all the processes")
elif groups:
    print("verdict: some children failed to connect; the others went on in a group of 2")
else:
    print("verdict: no group formed at all; every child timed out")

# %% [markdown] id="md-05-13"
# What never changes, whatever the race:

# %% tags=["nbval-check-output"]
print(f"processes torchrun started         : {len(launched_pids)}")
print(f"processes that called init_process_group: {len(children)}  (each launched process spawned "
      f"{len(children) // len(launched_pids)})")
print(f"ranks they claimed                 : {sorted(c['rank'] for c in children)}")
print(f"world size they claimed            : {sorted({c['world_size'] for c in children})}")
print(f"did any child see all {len(children)} processes? : {any(c['sum'] == len(children) for c in children)}")
print(check_double_spawn(children, launched_pids))

# %% [markdown] id="md-05-14"
# The process tree, from the parent pids each process reported:

# %% tags=["nbval-check-output"]
tree = ["torchrun agent"]
for i, lp in enumerate(launched_pids):
    rep = next(r for r in art.results if r["launched_pid"] == lp)
    last = i == len(launched_pids) - 1
    tree.append(("└── " if last else "├── ") + f"launched process (torchrun RANK {rep['children'][0]['launched_rank']})")
    kids = sorted((c for c in children if c["parent_pid"] == lp), key=lambda c: c["rank"])
    for j, c in enumerate(kids):
        tree.append(("    " if last else "│   ") + ("└── " if j == len(kids) - 1 else "├── ")
                    + f"mp.spawn child: init_process_group(rank={c['rank']}, world_size={c['world_size']})")
print("\n".join(tree))

# %% [markdown] id="md-05-15"
# ### The fix: one process per device, started by torchrun
#
# Delete the `mp.spawn` and the hand-made rank: torchrun already set `RANK`, `WORLD_SIZE` and `LOCAL_RANK`,
# and `init_process_group()` reads the first two (and `MASTER_ADDR`/`PORT`) from the environment (`env://`,
# the default). On GPUs, call `torch.cuda.set_device(local_rank)` **before** `init_process_group`: then
# `.cuda()` without an index means this process's GPU, not GPU 0, and NCCL uses that GPU too. The corrected
# `train_script.py` on 2 processes (unchanged on GPUs):

# %%
TRAIN_SCRIPT = """import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    local_rank = int(os.environ["LOCAL_RANK"])       # set by torchrun for each process it starts
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)            # before NCCL init: this process owns GPU local_rank
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")  # RANK, WORLD_SIZE, MASTER_*
    torch.manual_seed(0)                             # same initial weights everywhere
    model = DDP(torch.nn.Linear(4, 1).to(device), device_ids=[local_rank] if device.type == "cuda" else None)
    x = torch.full((8, 4), float(dist.get_rank() + 1), device=device)   # each rank its own data
    model(x).sum().backward()                        # DDP all-reduces (averages) the gradients
    print(f"rank {dist.get_rank()}/{dist.get_world_size()} on {device}: grad[0,0] = "
          f"{model.module.weight.grad[0, 0].item():.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""
with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "train_script.py"), "w") as f:
        f.write(TRAIN_SCRIPT)
    fixed_script = disttutor.launch(os.path.join(d, "train_script.py"), nproc=2, stream=False, timeout=150)
lines = [ln for log in fixed_script.logs for ln in log if ln.startswith("rank ")]
print("\n".join(lines))

# %% tags=["nbval-check-output"]
# rank r's data is all (r + 1): d(sum of 8 outputs)/dw = 8 (r + 1); DDP's average over 2 ranks = 8 * 1.5 = 12
assert fixed_script.ok and len(lines) == 2 and all(ln.endswith("grad[0,0] = 12.0") for ln in lines)
print("the corrected script runs on", "GPUs (NCCL)" if torch.cuda.is_available() else "the CPU (gloo)",
      "and DDP averaged the gradient over both ranks: 12.0 on each")

# %% [markdown] id="md-05-16"
# `legacy_spawn`'s `--fixed` mode: one process per rank, no spawn:

# %%
fixed = disttutor.launch("legacy_spawn", nproc=2, args={"fixed": True}, stream=False, timeout=150)
recs = [c for r in fixed.results for c in r["children"]]

# %% tags=["nbval-check-output"]
print(format_table([{"RANK": c["rank"], "world_size": c["world_size"], "joined": c["ok"],
                     "all-reduce of 1s": c["sum"]} for c in recs]))
print(check_fixed_launch(recs, fixed.results))  # and no spawned children

# %% [markdown] id="md-05-17"
# The article's two commands in torchrun form. With the **static** rendezvous (node 0 is the one you name, as
# in the article) they differ only in `--node-rank`; with **c10d** they are the same:

# %% tags=["nbval-check-output"]
article = dict(nnodes=2, nproc_per_node=4, gpus_per_node=4, module=None, script="train_script.py",
               head="192.168.1.1", port=12355, job_name="article-ddp")
for mode in ("static", "c10d"):
    print(f"# {mode} rendezvous")
    for node, cmd in enumerate(cluster.torchrun_commands(cluster.ClusterConfig(**article, rendezvous=mode))):
        print(f"# node {node}:\n{cmd}")

# %% [markdown] id="md-05-18"
# ## 3. Launch files for real clusters
#
# `disttutor.multinode.cluster` turns one validated `ClusterConfig` into three launch files: a torchrun
# command per node, a Slurm script and a Kubernetes manifest. The rule for all three: **one torchrun per node,
# one process per GPU, nothing spawns anything else.**

# %% tags=["nbval-check-output"]
cfg = cluster.ClusterConfig(nnodes=2, nproc_per_node=4, gpus_per_node=4, module="disttutor.programs.whoami",
                            job_name="whoami-2x4", head="node0.cluster.local", port=29500, partition="gpu",
                            time_limit="00:10:00", image="pytorch/pytorch:latest", env={"NCCL_DEBUG": "WARN"},
                            activate="source ~/venvs/ddp/bin/activate")
print(cfg)

# %% [markdown] id="md-05-19"
# ### A plain torchrun command per node
# Run each on its machine, in any order: the c10d rendezvous waits for all of them up to its `join_timeout`
# (default below; `--rdzv-conf join_timeout=SECONDS`).

# %% tags=["nbval-check-output"]
cmds = cluster.torchrun_commands(cfg)
print("\n".join(cmds))
join = dr.RendezvousTimeout().join  # the default torchrun's c10d rendezvous uses
print(f"default join timeout: {join.total_seconds():.0f} s = {join.total_seconds() / 60:g} minutes")

# %% [markdown] id="md-05-20"
# torchrun's own argument parser (`torch.distributed.run.get_args_parser`, the one the `torchrun` command
# uses) accepts every command:

# %% tags=["nbval-check-output"]
for cmd in cmds:
    words = shlex.split(cmd)
    a = get_args_parser().parse_args(words[words.index("torchrun") + 1:])
    assert (a.nnodes, a.nproc_per_node, a.rdzv_backend, a.module) == ("2", "4", "c10d", True)
    print(f"torchrun accepts it: nnodes={a.nnodes} x nproc-per-node={a.nproc_per_node}, rdzv {a.rdzv_backend} "
          f"at {a.rdzv_endpoint}, runs -m {a.training_script}")

# %% [markdown] id="md-05-21"
# ### Exercise 5.1 — the command for each node
#
# Write `node_command(node_rank, nnodes, nproc_per_node, head, port, job_id)`: torchrun's arguments (a list of
# strings, without `torchrun`) for node `node_rank` of a c10d job at `head:port` that runs `-m
# disttutor.programs.whoami`. The checker parses your commands with torchrun's parser, then **runs** a 2-node
# job with them here (one process per node): the two agents must form one 2-rank job.

# %%
card("5.1")

# %%
def node_command(node_rank, nnodes, nproc_per_node, head, port, job_id):
    """Exercise 5.1: torchrun's arguments for one node (a list of strings)."""
    raise NotImplementedError("Exercise 5.1: return torchrun's arguments for this node")


# %%
hint("5.1")


# %%
from disttutor.checks.cluster import check_node_command

print(check_node_command(node_command))

# %% [markdown] id="md-05-22"
# ### Slurm
# One `srun` task per node; each task is a torchrun agent. The first node of the allocation, where the batch
# script runs, hosts the rendezvous; `$SLURM_JOB_ID` names it. Check with `sbatch --test-only job.sbatch`,
# then run `sbatch job.sbatch`.

# %% tags=["nbval-check-output"]
sbatch = cluster.slurm_script(cfg)
print(sbatch)

# %% tags=["nbval-check-output"]
with tempfile.NamedTemporaryFile("w", suffix=".sbatch", delete=False) as f:
    f.write(sbatch)
check = subprocess.run(["bash", "-n", f.name], capture_output=True, text=True)
os.unlink(f.name)
assert check.returncode == 0, check.stderr
print("bash -n: syntax OK")

# %% [markdown] id="md-05-23"
# **Why the guards are there.** The script's comments name what each one prevents, failures met under a real
# Slurm with an earlier version (*reported*): `torchrun` not found, a node name that did not resolve, two jobs
# meeting at one fixed port, `head -n 1`'s SIGPIPE under `pipefail`. Without `activate=`, the script activates
# the environment of the Python that wrote it, right when the nodes share this machine's files. Here:

# %%
print(cluster.this_environment().replace(sys.prefix, "<this kernel's environment>"))

# %% [markdown] id="md-05-24"
# ### The script under a real Slurm
# Where Slurm's Debian packages are installed and the kernel runs as root, `slurm_local.LocalSlurm` starts a
# **two-node cluster on this machine** (`munged`, `slurmctld`, two `slurmd` at `127.0.0.1`). The
# generated script is submitted unchanged.

# %%
why_not = slurm_local.unavailable()
run_cfg = cluster.ClusterConfig(nnodes=2, nproc_per_node=2, job_name="whoami-2x2", time_limit="00:05:00")
slurm_run = None
if why_not:
    print(f"Not run here: no local Slurm ({why_not}); the Slurm cells below print nothing.")
else:
    work = tempfile.mkdtemp(prefix="disttutor-slurm-")
    try:
        with slurm_local.LocalSlurm(os.path.join(work, "cluster")) as slurm:
            print(slurm.run("sinfo", "-N", "-o", "%N %o %T %c").stdout)  # names, addresses, states, CPUs
            # Before queueing: could Slurm ever run it? (--test-only queues nothing)
            for label, c in [("as configured", run_cfg),
                             ("cpus_per_node=16", dataclasses.replace(run_cfg, cpus_per_node=16)),
                             ("gpus_per_node=2", dataclasses.replace(run_cfg, gpus_per_node=2))]:
                ok, said = cluster.sbatch_test_only(cluster.slurm_script(c), env=slurm.env)
                print(f"sbatch --test-only, {label:17s}: {'OK ' if ok else 'NO '} {said}")
            job_dir = os.path.join(work, "job")
            os.mkdir(job_dir)
            job_id = slurm.sbatch(cluster.slurm_script(run_cfg), cwd=job_dir,
                                  env={"DISTTUTOR_RUN_DIR": job_dir, "OMP_NUM_THREADS": "1"})
            info = slurm.wait([job_id], timeout=240)[job_id]
            (out_file,) = [f for f in os.listdir(job_dir) if f.endswith(f"-{job_id}.out")]
            with open(os.path.join(job_dir, out_file)) as f:
                slurm_run = {"id": job_id, "info": info, "output": f.read().splitlines(),
                             "reports": read_reports(job_dir)}
        assert slurm.swept == [], slurm.swept  # nothing was left for the sweep after the daemons stopped
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\njob {job_id}: {info['JobState']} (exit code {info['ExitCode']}) in {info['RunTime']} on "
          f"{info['NodeList']}")

# %% [markdown] id="md-05-25"
# The job's output file (`%x-%j.out`): the script's own line, then one line per rank, starting with the node's
# task index (`srun --label`) and the rank (torchrun's prefix). The agents' own log lines are counted, not
# shown.

# %%
if slurm_run:
    labelled = [ln for ln in slurm_run["output"] if re.match(r"\d+: \[rank\d+\]: RANK ", ln)]
    print(slurm_run["output"][0])
    print("\n".join(sorted(labelled, key=lambda ln: int(re.search(r"\[rank(\d+)\]", ln).group(1)))))
    print(f"(+ {len(slurm_run['output']) - 1 - len(labelled)} lines of the torchrun agents' own log)")

# %% [markdown] id="md-05-26"
# The same identity and all-reduces as in section 1, from a Slurm job. Which Slurm node became
# `GROUP_RANK` 0 is the rendezvous' choice (section 1's sort; both nodes here are one host), so the `Slurm
# node` column may read either way.

# %%
if slurm_run:
    reps = slurm_run["reports"]
    print(format_table([{"RANK": r, "GROUP_RANK": int(rep["results"]["env"]["GROUP_RANK"]),
                         "LOCAL_RANK": int(rep["results"]["env"]["LOCAL_RANK"]), "Slurm node": rep["results"]["slurm_node"],
                         "ranks per node": rep["results"]["ranks_per_node"], "sum of ranks": rep["results"]["rank_sum"]}
                        for r, rep in sorted(reps.items())]))
    print(check_slurm_job(slurm_run, run_cfg.world_size))

# %% [markdown] id="md-05-27"
# ### Kubernetes: a Kubeflow `PyTorchJob`
# For the **Kubeflow Training Operator v1** (`kubeflow.org/v1`): one `Master` and `nnodes-1` `Worker` pods, in
# a container that must be called `pytorch`. The operator sets `MASTER_ADDR`, `MASTER_PORT` and `PET_NNODES` /
# `PET_NPROC_PER_NODE` / `PET_NODE_RANK` in every pod; the manifest passes them to torchrun with Kubernetes'
# `$(VAR)` expansion (static rendezvous: the pod index is the node rank).
#
# **No Kubernetes runs here.** Checked instead: the manifest's structure, and torchrun's parser on a pod's
# arguments.

# %% tags=["nbval-check-output"]
manifest = cluster.pytorchjob_manifest(cfg)
lines = manifest.splitlines()
master = next(i for i, ln in enumerate(lines) if ln.strip() == "Master:")
worker = next(i for i, ln in enumerate(lines) if ln.strip() == "Worker:")
print("\n".join(lines[:worker]))  # the Worker block repeats the Master block: shown as a diff
diff = [d for d in difflib.unified_diff(lines[master:worker], lines[worker:], lineterm="", n=0)
        if d[:1] in "+-" and not d.startswith(("---", "+++"))]
print(f"    # Worker: {len(lines) - worker} more lines, the Master block with only these changes:")
print("\n".join(f"    #   {d.strip()}" for d in diff))

# %% tags=["nbval-check-output"]
job = yaml.safe_load(manifest)
specs = job["spec"]["pytorchReplicaSpecs"]
# torchrun accepts the container's arguments once the operator's variables are filled in (pod 1 here).
pod_env = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "4", "PET_NODE_RANK": "1",
           "MASTER_ADDR": "whoami-2x4-master-0", "MASTER_PORT": "29500"}
argv = [re.sub(r"\$\((\w+)\)", lambda m: pod_env[m.group(1)], a)
        for a in specs["Worker"]["template"]["spec"]["containers"][0]["args"]]
args = get_args_parser().parse_args(argv)
print(check_pytorchjob(job, cfg.nnodes, args, pod_env))

# %% [markdown] id="md-05-28"
# ### Bad configs fail early, in words
# The config is checked when it is made, not when 16 GPUs are allocated. What only the cluster knows (its
# nodes' CPUs and GPUs) is for `sbatch --test-only`, above.

# %% tags=["nbval-check-output"]
for bad in (dict(nproc_per_node=8, gpus_per_node=4), dict(nproc_per_node=4, cpus_per_node=2),
            dict(job_name="My_Job"), dict(time_limit="2h")):
    try:
        cluster.ClusterConfig(**bad)
    except (ValueError, TypeError) as exc:
        print(f"{bad}: {exc}")
    else:
        raise AssertionError(f"{bad} was accepted")

# %% [markdown] id="md-05-29"
# ## 4. "My rendezvous never forms": a checklist
#
# Either the agents never meet (torchrun raises `RendezvousTimeoutError` after its join timeout), or they meet
# and the first collective hangs or fails to connect. Four causes are the usual ones; run each check on every
# node (the cells below run them here):
#
# 1. **The head is unreachable on its port.** `nc -zv HEAD PORT`: *refused*, nothing listens yet; *a timeout*,
#    a firewall drops the packets. Open the rendezvous port **and** the ephemeral ports gloo and NCCL use,
#    between all nodes.
# 2. **The wrong network interface** (docker0, a VPN, several NICs). List them with `ip -br addr`; pin one
#    with `GLOO_SOCKET_IFNAME=eth0` and `NCCL_SOCKET_IFNAME=eth0` (`NCCL_DEBUG=INFO` prints NCCL's choice).
# 3. **The hostname resolves to loopback.** `getent hosts $(hostname)`: Debian's and Ubuntu's `/etc/hosts` map
#    it to `127.0.1.1`, which sends the other nodes to *themselves*. Pass IPs (`--rdzv-endpoint IP:PORT`,
#    `--local-addr IP`).
# 4. **The clocks disagree.** `timedatectl`: a c10d heartbeat carries the writer's clock and is compared with
#    the reader's, so a node whose clock lags past the keep-alive window is dropped (source below). Run NTP or
#    chrony.
#
# Also: one `--rdzv-id` and one torch version on all nodes.

# %%
interfaces = [name for _, name in socket.if_nameindex()]
print("1-2. this machine's interfaces (socket.if_nameindex, what `ip -br addr` lists):", ", ".join(interfaces))
probe = socket.socket()
probe.settimeout(5)
port = free_port()  # a port nothing listens on: what "head not started" looks like
try:
    probe.connect(("127.0.0.1", port))
    print(f"   127.0.0.1:{port}: open")
except ConnectionRefusedError:
    print(f"   127.0.0.1:{port}: connection refused -- nothing listens (a firewall that drops would time out instead)")
finally:
    probe.close()
host = socket.gethostname()
addr = socket.gethostbyname(host)
print(f"3. `{host}` resolves to {addr}: " + ("LOOPBACK -- other nodes could not reach an agent that advertises it"
                                           if addr.startswith("127.") else "not loopback: other nodes can use it"))

# %% [markdown] id="md-05-30"
# An interface name that does not exist on a node (a typo, or `eth0` on a machine whose NIC is `ens5`) fails
# at once on every rank, naming the interface (a real 2-rank run):

# %%
bad_if = disttutor.launch("hello", 2, env={"GLOO_SOCKET_IFNAME": "nosuch0"}, stream=False, check=False,
                          timeout=60, collective_timeout=10)
print(bad_if.summary(lines=1))

# %% tags=["nbval-check-output"]
assert not bad_if.ok and all("nosuch0" in (r.error or "") for r in bad_if.ranks), bad_if.summary()
keep = inspect.signature(dr.DynamicRendezvousHandler.from_backend).parameters
window = keep["keep_alive_interval"].default * keep["keep_alive_max_attempt"].default
print("GLOO_SOCKET_IFNAME=nosuch0: every rank failed, naming the interface")
print(f"4. a node whose heartbeats look older than {window} s (keep_alive_interval x keep_alive_max_attempt) is dropped:")
print(*source_lines(dr._BackendRendezvousStateHolder._sanitize, "expire_time = datetime.now",
                    "if last_heartbeat < expire_time"), sep="\n")

# %% [markdown] id="md-05-31" tags=["takeaways"]
# ## Key takeaways
#
# * Going multi-node changes how processes start and meet, not the training code.
# * Every node runs the same torchrun command; with c10d, `--node-rank` is ignored and the agents are numbered
#   when they meet.
# * RANK = GROUP_RANK × processes per node + LOCAL_RANK; `LOCAL_RANK` picks the GPU.
# * One launcher only: a script under torchrun that also calls `mp.spawn` multiplies the processes (`nprocs`
#   each).
# * A rendezvous that never forms is usually the network (port, interface, a hostname on loopback) or the
#   clocks.

# %% [markdown] id="md-05-32" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 5.1 (predict, then run).** Two nodes of 2 processes each, joined by a c10d rendezvous. What is
# the global `RANK` of the process with `GROUP_RANK` 1 and `LOCAL_RANK` 1? Write a number into
# `my_prediction`, then run the next cell.

# %% tags=["predict"]
my_prediction = None  # a number: RANK of GROUP_RANK 1, LOCAL_RANK 1 (2 nodes x 2 processes)

# %%
import disttutor

q1 = disttutor.launch("whoami", nproc=2, nnodes=2, stream=False, timeout=150)
layout = [tuple(x) for x in q1.results[0]["layout"]]  # (GROUP_RANK, LOCAL_RANK) of every rank, all-gathered
measured = layout.index((1, 1))
assert sorted(layout) == [(g, l) for g in (0, 1) for l in (0, 1)]  # every (node, local rank) exactly once
reveal("5.q1", my_prediction, measured, rel_tol=0,  # a rank: exact
       explain=f"The ranks' (GROUP_RANK, LOCAL_RANK) were {layout}: RANK = GROUP_RANK x 2 + LOCAL_RANK = 1 x 2 + 1 = "
       f"{measured}. Which machine becomes GROUP_RANK 1 is the rendezvous' choice; the arithmetic after it is fixed.")

# %% [markdown] id="md-05-33" tags=["question"]
# **Question 5.2.** Two nodes run the same torchrun command with `--rdzv-backend=c10d
# --rdzv-endpoint=head:29500`, and one of them never joins. What does the other one see, and what do you check
# first?

# %%
answer("5.q2")

# %% [markdown] id="md-05-34" tags=["question"]
# **Question 5.3.** On each of 2 machines with 4 GPUs, the article runs `python -m torch.distributed.launch
# --nproc_per_node=4 --nnodes=2 --node_rank=…` on `train_script.py`. Read that script as its §5.2 one, whose
# `main()` calls `mp.spawn(train, args=(world_size,), nprocs=world_size, join=True)` with `world_size =
# torch.cuda.device_count()`. How many training processes run on each machine, and why do their ranks clash?

# %%
answer("5.q3")

# %%
disttutor.course.chapters.glossary(5)
