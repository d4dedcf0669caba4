# %% [markdown] id="md-05-01"
# # Chapter 5 — Multi-node training
#
# *Article §5.3 "多机训练扩展" (scaling to several machines).*
#
# Going from one machine to several changes **nothing in the training code**: every process still calls
# `init_process_group`, wraps its model in DDP and all-reduces gradients. What changes is **how the processes
# start and how they find each other**.
#
# Here every "node" is a set of processes on one machine, talking over loopback (`127.0.0.1`). Section 4
# gives the checks for a real network.

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
import inspect
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

import matplotlib.pyplot as plt
import torch
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

import disttutor
from disttutor.launcher.launch import free_port
from disttutor.launcher.results import format_table
from disttutor.course.problems import problem
from disttutor.course.puzzles import puzzle
from disttutor.multinode import cluster, slurm_local
from disttutor.viz.cluster import draw_layout

WORK = tempfile.mkdtemp(prefix="ch05-")
os.chdir(WORK)  # the files this chapter writes (a script, a batch file) go to a scratch folder
print("torch", torch.__version__, "| usable CPU cores:", disttutor.cores(), "| GPUs:", torch.cuda.device_count())

# %% [markdown] id="md-05-03"
# ## 1. Two nodes on one machine
#
# On a cluster you run **one torchrun per machine**. Each torchrun, an *agent*, joins a *rendezvous* (the agents
# meet at an agreed `host:port` and number themselves), then starts `--nproc-per-node` workers, one per device,
# and gives them their identity in environment variables:
#
# | variable | meaning | here (2 nodes × 2 processes) |
# |---|---|---|
# | `RANK` | global rank, what `init_process_group` uses | 0..3 |
# | `LOCAL_RANK` | index of the process on its node; picks the GPU `cuda:LOCAL_RANK` | 0..1 |
# | `GROUP_RANK` | index of the node (its agent) in the job | 0..1 |
# | `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `GROUP_WORLD_SIZE` | processes in the job, on this node; nodes | 4, 2, 2 |
# | `MASTER_ADDR`, `MASTER_PORT` | the key-value store the workers meet at | one per job |

# %% tags=["schematic"]
from disttutor.viz.launch_topology import draw_launch_topology

NNODES, NPROC = 2, 2  # this section's runs: 2 nodes (torchrun agents) x 2 processes each
draw_launch_topology(NNODES, NPROC)
plt.show()

# %% [markdown] id="md-05-38" tags=["caption"]
# *Figure: the agents meet at the rendezvous, each starts its processes, RANK counts node by node, and the ring's red hops cross between nodes.*

# %% [markdown] id="md-05-39" tags=["derivation"]
# **Derivation.** Node $g$ runs $p$ processes; its process $l$ is `LOCAL_RANK` $l$. A ring all-reduce sums $S$ bytes on each of $n$ ranks:
#
# * Nodes $0, \dots, g-1$ hold $g\,p$ ranks, so $\text{RANK} = g\,p + l$ and $n = \text{WORLD\_SIZE} = \text{nnodes} \cdot p$.
# * In `RANK` order the ring crosses between nodes once per node: the red hops.
# * Each of its $2(n-1)$ steps sends $S/n$ on every hop at once, and ends when its slowest hop ends.
# * So $T \approx 2(n-1)\,\alpha_\text{slowest} + \frac{2(n-1)}{n} \cdot \frac{S}{B_\text{slowest}}$: the link between nodes sets the time.

# %% [markdown] id="md-05-14"
# A script that reads them: each rank joins the job, then all-reduces a one-hot vector of its node, so every
# rank learns how many ranks each node holds. The cell after it runs the script under two torchrun agents
# and prints the line you would type on each machine (with the head's address for `localhost`):

# %%
%%writefile two_nodes.py
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")             # reads RANK, WORLD_SIZE, MASTER_ADDR/PORT set by torchrun
rank = dist.get_rank()
node, nodes = int(os.environ["GROUP_RANK"]), int(os.environ["GROUP_WORLD_SIZE"])
per_node = torch.zeros(nodes)
per_node[node] = 1
dist.all_reduce(per_node)                   # ranks on each node: data that crossed the nodes
print(f"RANK {rank}: GROUP_RANK {node}, LOCAL_RANK {os.environ['LOCAL_RANK']}; "
      f"ranks per node {per_node.int().tolist()}")
dist.destroy_process_group()

# %% tags=["nbval-check-output"]
plain = disttutor.launch("two_nodes.py", nproc=NPROC, nnodes=NNODES, stream=False, timeout=150)
print(plain.command)
print("\n".join(ln for log in plain.logs for ln in log if ln.startswith("RANK ")))

# %% [markdown] id="md-05-35"
# The course's program `whoami` does the same, also all-reduces the sum of all ranks, and reports torchrun's
# identity variables. One row per rank:

# %%
res = disttutor.launch("whoami", nproc=NPROC, nnodes=NNODES, stream=False, timeout=150)
envs = [r["env"] for r in res.results]

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
from disttutor.checks.claims.ch05 import check_rank_layout

print(check_rank_layout(envs, res.results, res.world_size))  # and one store for the whole job

# %% [markdown] id="md-05-05"
# ### The picture
# Two nodes (agents), two processes each, and the global rank each process got, drawn from the reports above.

# %%
draw_layout(envs)
plt.show()

# %% [markdown] id="md-05-40" tags=["caption"]
# *Figure: the schematic's layout again, now drawn from what each rank reported: its node's GROUP_RANK box, its RANK and LOCAL_RANK.*

# %% [markdown] id="md-05-06"
# ### Who decides which node is node 0?
#
# Both launches also gave the first agent `--node-rank=0` and the second `--node-rank=1`. With the c10d rendezvous
# torchrun ignores it, and says so in its log:

# %% tags=["nbval-check-output"]
warning = next(ln for ln in res.agent_log if "node_rank is only used" in ln)
print(warning[warning.index("node_rank"):])

# %% [markdown] id="md-05-07"
# When the c10d rendezvous completes, it **sorts** the agents by (name, process id) and numbers them in that
# order. The name is the agent's `--local-addr` if given, else `socket.getfqdn()`, compared as a string
# (`node10` before `node2`); on one host the pids decide (folded below). So with c10d every node runs the
# *same* command and reads `GROUP_RANK` from its environment; `--rdzv-backend=static` fixes the order, with
# `--node-rank` as `GROUP_RANK`.

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch05 import check_group_rank_order

assign = re.search(r"\n(\s*# Assign the ranks\.\n.*\n.*\n)", inspect.getsource(dr)).group(1)
agents = {int(r.results["env"]["GROUP_RANK"]): r.results["agent_pid"] for r in res.ranks}
print(check_group_rank_order(assign, [agents[g] for g in sorted(agents)]))  # torch's sort, and this run's pids

# %% [markdown] id="md-05-08"
# One rank's identity variables as torchrun set them (the port and run id change every run):

# %%
for k, v in envs[-1].items():
    print(f"  {k:28s} {v}")

# %% [markdown] id="md-05-09"
# ## 2. One launcher: torchrun
#
# <details><summary><b>The article says</b> run <code>python -m torch.distributed.launch --nproc_per_node=4
# --nnodes=2 --node_rank=0 --master_addr=192.168.1.1 --master_port=12355</code> (<code>--node_rank=1</code> on the
# second machine) on <code>train_script.py</code>, 2 machines with 4 GPUs each</summary>
#
# The article never shows `train_script.py`. Read as its §5.2 script, whose `main()` calls `mp.spawn(train,
# args=(world_size,), nprocs=world_size, join=True)` with `world_size = torch.cuda.device_count()`, each of the
# 4 launched processes per machine spawns 4 more: 32 training processes for 8 GPUs, each taking its spawn index
# (0..3) as its rank in a world of 4. Every rank is claimed 8 times, at one `MASTER_ADDR:MASTER_PORT`.
#
# Today `torch.distributed.launch` is deprecated but still runs. Below: a 2 × 2 copy of the double launch,
# then the fix.
# </details>
#
# First: is `torch.distributed.launch` still there? Its `--help` exit code, and the first line of its warning:

# %%
proc = subprocess.run([sys.executable, "-m", "torch.distributed.launch", "--help"], capture_output=True,
                      text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
warn = proc.stderr[proc.stderr.index("FutureWarning"):].split("\n\n")[0]
print("exit code:", proc.returncode)
print(warn.splitlines()[0])

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch05 import check_launch_deprecated

print(check_launch_deprecated(proc.returncode, warn, proc.stdout))  # --use-env: its only addition to torchrun's parser

# %% [markdown] id="md-05-10"
# What does each launcher hand its script? A three-line script prints its `sys.argv` and `LOCAL_RANK`, started
# on 2 processes three ways:

# %%
%%writefile show_args.py
import json, os, sys
line = json.dumps({"argv": sys.argv[1:], "LOCAL_RANK": os.environ.get("LOCAL_RANK")})
os.write(1, f"ARGS {line}\n".encode())  # one write per line: two processes share the pipe

# %%
def what_it_passes(*launcher):
    # Run the script on 2 processes; each process's argv and LOCAL_RANK, by local rank.
    cmd = [sys.executable, "-m", *launcher, "--nproc-per-node", "2", "--master-port", str(free_port()),
           "show_args.py"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}).stdout
    recs = [json.loads(ln.split("ARGS ", 1)[1]) for ln in out.splitlines() if "ARGS " in ln]
    return sorted(recs, key=lambda r: r["LOCAL_RANK"] or "")


passed = {"torch.distributed.launch": what_it_passes("torch.distributed.launch"),
          "torch.distributed.launch --use-env": what_it_passes("torch.distributed.launch", "--use-env"),
          "torchrun": what_it_passes("torch.distributed.run")}
print(format_table([{"launcher": k, "process": i, "sys.argv[1:]": r["argv"], "LOCAL_RANK in env": r["LOCAL_RANK"]}
                    for k, recs in passed.items() for i, r in enumerate(recs)]))

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch05 import check_what_launchers_pass

print(check_what_launchers_pass(passed))

# %% [markdown] id="md-05-11"
# Plain `torch.distributed.launch` adds `--local-rank=N` to the script's command line (an `argparse` that does
# not expect it exits with an error); with `--use-env`, and with torchrun, the command line is empty: read `LOCAL_RANK` from the
# environment.
#
# Now the double launch, small: torchrun starts **2** processes, and each `mp.spawn`s **2** children with the
# article's rank formula and a 3-second timeout (program `legacy_spawn`). Every spawned child:

# %%
art = disttutor.launch("legacy_spawn", nproc=2, args={"gpus": 2, "timeout": 3}, stream=False, timeout=150)
children = [c for r in art.results for c in r["children"]]
launched_pids = sorted(r["launched_pid"] for r in art.results)
print(format_table([{"launched RANK": c["launched_rank"], "spawn index = rank": c["rank"],
                     "world_size": c["world_size"], "joined": c["ok"], "all-reduce of 1s": c["sum"],
                     # drop gloo's source-file prefix ("[/.../pair.cc:152] ") and keep the words
                     "error": re.sub(r"\[[^\]]*\.(?:cc|h):\d+\]\s*", "", c["error"] or "")[:50]} for c in children]))

# %% [markdown] id="md-05-12"
# Which children pair up is a **race**: duplicate ranks meet at one store, and which one the others reach
# depends on timing. A run can show crossing pairs, connect timeouts, or the worst case: groups of 2 that all
# "succeed", a job split into separate worlds **with no error at all**. This run:

# %%
groups = {tuple(sorted(c["partners"])) for c in children if c["ok"]}
print("groups of 2 that formed:", len(groups), "| children that failed:", sum(not c["ok"] for c in children))

# %% [markdown] id="md-05-13"
# What never changes, whatever the race: 4 processes claim ranks 0, 0, 1, 1 in worlds of 2, and none sees
# all 4. The process tree, from the parent pids each process reported:

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

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch05 import check_double_spawn

print(check_double_spawn(children, launched_pids))

# %% [markdown] id="md-05-15"
# ### The fix: one process per device, started by torchrun
#
# Delete the `mp.spawn` and the hand-made rank: torchrun already set `RANK`, `WORLD_SIZE` and `LOCAL_RANK`,
# and `init_process_group()` reads the first two (and `MASTER_ADDR`/`PORT`) from the environment (`env://`,
# the default). On GPUs, call `torch.cuda.set_device(local_rank)` **before** `init_process_group`: then
# `.cuda()` without an index means this process's GPU, not GPU 0, and NCCL uses that GPU too. The corrected
# `train_script.py` on 2 processes (unchanged on GPUs):

# %%
%%writefile train_script.py
import os

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
    grad = model.module.weight.grad[0, 0].item()
    print(f"rank {dist.get_rank()}/{dist.get_world_size()} on {device}: grad[0,0] = {grad:.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

# %% [markdown] id="md-05-36"
# Rank r's data is all r + 1, so its own gradient is 8 (r + 1): 8 on rank 0, 16 on rank 1. After DDP's
# average both ranks should print 12.0:

# %%
fixed_script = disttutor.launch("train_script.py", nproc=2, stream=False, timeout=150)
lines = [ln for log in fixed_script.logs for ln in log if ln.startswith("rank ")]
print(fixed_script.command)
print("\n".join(lines))

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch05 import check_train_script

print(check_train_script(fixed_script.ok, lines, world=2))

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

# %%
cfg = cluster.ClusterConfig(nnodes=2, nproc_per_node=4, gpus_per_node=4, module="disttutor.programs.whoami",
                            job_name="whoami-2x4", head="node0.cluster.local", port=29500, partition="gpu",
                            time_limit="00:10:00", image="pytorch/pytorch:latest", env={"NCCL_DEBUG": "WARN"},
                            activate="source ~/venvs/ddp/bin/activate")

# %% [markdown] id="md-05-19"
# ### A plain torchrun command per node
# Run each on its machine, the head's first: it hosts the rendezvous store, and an agent that cannot reach it
# gives up (`read_timeout`, 60 s per try). Then the c10d rendezvous waits for all nodes up to its `join_timeout`
# (default below; `--rdzv-conf join_timeout=SECONDS`).

# %% tags=["nbval-check-output"]
cmds = cluster.torchrun_commands(cfg)
print("\n".join(cmds))
join = dr.RendezvousTimeout().join  # the default torchrun's c10d rendezvous uses
print(f"default join timeout: {join.total_seconds():.0f} s")

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch05 import check_torchrun_parses

print(check_torchrun_parses(cmds, cfg.nnodes, cfg.nproc_per_node))

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
    """Exercise 5.1: torchrun's arguments for one node."""
    raise NotImplementedError("Exercise 5.1: return torchrun's arguments")


# %%
hint("5.1")


# %%
from disttutor.checks.cluster import check_node_command

print(check_node_command(node_command))

# %% [markdown] id="md-05-16"
# ### Exercise 5.2 — a set-up that works on every node
#
# Write what each process of a multi-node job runs first: `join_job(gpus_per_node)` joins the process group
# from torchrun's environment, naming no address, leaves it joined for the training that follows, and returns
# a dict of ints: `rank`, `local_rank`, `world_size`, `node` (this node's number in the job) and `gpu` (this
# process's GPU on its node; these nodes have none, so set the device only where it exists). The checker runs
# it as 2 nodes × 2 processes and compares each dict with what torchrun told each process.

# %%
card("5.2")

# %%
def join_job(gpus_per_node):
    """Exercise 5.2: join the job from torchrun's environment; return who this process is."""
    raise NotImplementedError("Exercise 5.2: join from the environment and return rank, local_rank, ...")


# %%
hint("5.2")

# %%
from disttutor.checks.joining import check_multinode

print(check_multinode(join_job))

# %% [markdown] id="md-05-22"
# ### Slurm
# One `srun` task per node; each task is a torchrun agent. The first node of the allocation, where the batch
# script runs, hosts the rendezvous; `$SLURM_JOB_ID` names it. Check with `sbatch --test-only job.sbatch`,
# then run `sbatch job.sbatch`. The script, its comment lines left out:

# %% tags=["nbval-check-output"]
sbatch = cluster.slurm_script(cfg)
with open("job.sbatch", "w") as f:
    f.write(sbatch)
print("\n".join(ln for ln in sbatch.splitlines() if not re.match(r"#(?!SBATCH|!)|\s+#", ln)))

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch05 import check_bash_syntax

check = subprocess.run(["bash", "-n", "job.sbatch"], capture_output=True, text=True)
print(check_bash_syntax(check.returncode, check.stderr))

# %% [markdown] id="md-05-23"
# **Why the guards are there.** Each one stops a failure a simpler script can meet under Slurm: `torchrun` not
# found on the nodes, a node name that does not resolve, two jobs on one head meeting at one fixed port,
# `head -n 1`'s SIGPIPE under `pipefail`. Without `activate=`, the script activates the environment of the
# Python that wrote it, right when the nodes share this machine's files. Here:

# %%
print(cluster.this_environment().replace(sys.prefix, "<this kernel's environment>"))

# %% [markdown] id="md-05-24"
# ### The script under a real Slurm
# Where Slurm's Debian packages are installed and the kernel runs as root, `slurm_local.LocalSlurm` starts a
# **two-node cluster on this machine** (`munged`, `slurmctld`, two `slurmd` at `127.0.0.1`). The
# generated script is submitted unchanged.

# %%
from disttutor.launcher.collect import read_reports

why_not = slurm_local.unavailable()
run_cfg = cluster.ClusterConfig(nnodes=2, nproc_per_node=2, job_name="whoami-2x2", time_limit="00:05:00")
slurm_run = None
if why_not:
    print("no local Slurm:", why_not)
else:
    work = tempfile.mkdtemp(prefix="disttutor-slurm-")
    try:
        with slurm_local.LocalSlurm(os.path.join(work, "cluster")) as slurm:
            print(slurm.run("sinfo", "-N", "-o", "%N %o %T %c").stdout)  # names, addresses, states, CPUs
            # Before queueing: could Slurm ever run it? (--test-only queues nothing)
            for label, c in [("as configured", run_cfg),
                             ("cpus_per_node=16", dataclasses.replace(run_cfg, cpus_per_node=16))]:
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
    print(f"job {job_id}: {info['JobState']} (exit code {info['ExitCode']}) on {info['NodeList']}")

# %% [markdown] id="md-05-25"
# From the job's output file (`%x-%j.out`): the script's own line, then each rank's line, starting with the
# node's task index (`srun --label`) and the rank (torchrun's prefix).

# %%
if slurm_run:
    labelled = [ln for ln in slurm_run["output"] if re.match(r"\d+: \[rank\d+\]: RANK ", ln)]
    print(slurm_run["output"][0])
    print("\n".join(sorted(labelled, key=lambda ln: int(re.search(r"\[rank(\d+)\]", ln).group(1)))))

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

# %% tags=["proof"]
from disttutor.checks.claims.ch05 import check_slurm_job

print(check_slurm_job(slurm_run, run_cfg.world_size) if slurm_run else f"no local Slurm: {why_not}")

# %% [markdown] id="md-05-27"
# ### Kubernetes: a Kubeflow `PyTorchJob`
# For the **Kubeflow Training Operator v1** (`kubeflow.org/v1`): one `Master` and `nnodes-1` `Worker` pods, in
# a container that must be called `pytorch`. The operator sets `MASTER_ADDR`, `MASTER_PORT` and `PET_NNODES` /
# `PET_NPROC_PER_NODE` / `PET_NODE_RANK` in every pod; the manifest passes them to torchrun with Kubernetes'
# `$(VAR)` expansion (static rendezvous: the pod index is the node rank).
#
# **No Kubernetes runs here.** Checked instead (folded below): the manifest's structure, and torchrun's parser
# on a pod's arguments. The `Worker` block repeats the `Master` block; the manifest up to it:

# %% tags=["nbval-check-output"]
manifest = cluster.pytorchjob_manifest(cfg)
lines = manifest.splitlines()
print("\n".join(lines[1:next(i for i, ln in enumerate(lines) if ln.strip() == "Worker:")]))

# %% tags=["proof", "nbval-check-output"]
import yaml
from torch.distributed.run import get_args_parser

from disttutor.checks.claims.ch05 import check_pytorchjob

job = yaml.safe_load(manifest)
specs = job["spec"]["pytorchReplicaSpecs"]
# torchrun accepts the container's arguments once the operator's variables are filled in (pod 1 here).
pod_env = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "4", "PET_NODE_RANK": "1",
           "MASTER_ADDR": "whoami-2x4-master-0", "MASTER_PORT": "29500"}
argv = [re.sub(r"\$\((\w+)\)", lambda m: pod_env[m.group(1)], a)
        for a in specs["Worker"]["template"]["spec"]["containers"][0]["args"]]
print(check_pytorchjob(job, cfg.nnodes, get_args_parser().parse_args(argv), pod_env))

# %% [markdown] id="md-05-28"
# ### Bad configs fail early, in words
# The config is checked when it is made, not when the GPUs are allocated. What only the cluster knows (its
# nodes' CPUs and GPUs) is for `sbatch --test-only`, above.

# %% tags=["nbval-check-output"]
for bad in (dict(nproc_per_node=8, gpus_per_node=4), dict(nproc_per_node=4, cpus_per_node=2),
            dict(job_name="My_Job"), dict(time_limit="2h")):
    try:
        cluster.ClusterConfig(**bad)
    except (ValueError, TypeError) as exc:
        print(f"{bad}: {exc}")
    else:
        raise AssertionError(f"accepted: {bad}")

# %% [markdown] id="md-05-29"
# ## 4. "My rendezvous never forms": a checklist
#
# Either the agents never meet (torchrun raises `RendezvousConnectionError` when the head's store stays
# unreachable, `RendezvousTimeoutError` after the join timeout), or they meet and the first collective hangs or
# fails to connect. Run each check on every node:
#
# 1. **The head is unreachable on its port.** `nc -zv HEAD PORT`: *refused*, nothing listens yet; *a timeout*,
#    a firewall drops the packets. Open the rendezvous port **and** the ports gloo and NCCL use between nodes.
# 2. **The wrong network interface** (docker0, a VPN, several NICs). List them with `ip -br addr`; pin one
#    with `GLOO_SOCKET_IFNAME=eth0` and `NCCL_SOCKET_IFNAME=eth0` (`NCCL_DEBUG=INFO` prints NCCL's choice).
# 3. **The hostname resolves to loopback.** `getent hosts $(hostname)`: Debian's and Ubuntu's `/etc/hosts` map
#    it to `127.0.1.1`, which sends the other nodes to *themselves*. Pass IPs (`--rdzv-endpoint IP:PORT`,
#    `--local-addr IP`).
# 4. **The clocks disagree.** `timedatectl`: a c10d heartbeat carries the writer's clock and is compared with
#    the reader's, so a node whose clock lags past the keep-alive window is dropped. Run NTP or chrony.
#
# Also: one `--rdzv-id` and one torch version on all nodes. The first three checks, from Python, on this
# machine: its interfaces, a port nothing listens on, and what its hostname resolves to.

# %%
print("interfaces:", ", ".join(name for _, name in socket.if_nameindex()))
port = free_port()  # a port nothing listens on: what "head not started" looks like
try:
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    print(f"127.0.0.1:{port}: open")
except ConnectionRefusedError:
    print(f"127.0.0.1:{port}: connection refused")
host = socket.gethostname()
print(f"{host} resolves to", socket.gethostbyname(host))

# %% [markdown] id="md-05-30"
# An interface name that does not exist on a node (a typo, or `eth0` on a machine whose NIC is `ens5`) fails
# at once on every rank, naming the interface (a real 2-rank run; gloo's message, its source location cut):

# %%
bad_if = disttutor.launch("hello", 2, env={"GLOO_SOCKET_IFNAME": "nosuch0"}, stream=False, check=False,
                          timeout=60, collective_timeout=10)
print("exit code:", bad_if.returncode)
print(re.sub(r"\[[^\]]*\]\s*", "", bad_if.ranks[0].error or ""))

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch05 import check_bad_interface

print(check_bad_interface(bad_if.ok, [r.error for r in bad_if.ranks], "nosuch0"))

# %% [markdown] id="md-05-37"
# The heartbeat window of check 4 is `keep_alive_interval × keep_alive_max_attempt`, and torch drops a node
# whose last heartbeat is older than now minus that window:

# %%
from disttutor.course.source import source_lines

keep = inspect.signature(dr.DynamicRendezvousHandler.from_backend).parameters
print("window:", keep["keep_alive_interval"].default * keep["keep_alive_max_attempt"].default, "s")
print(*source_lines(dr._BackendRendezvousStateHolder._sanitize, "expire_time = datetime.now",
                    "if last_heartbeat < expire_time"), sep="\n")

# %% [markdown] id="md-05-42"
# ## Puzzles
#
# One exact answer each: write yours into `mine`, then run the cell.

# %% tags=["puzzle"]
puzzle("5.z1", mine=None)

# %% tags=["puzzle"]
puzzle("5.z2", mine=None)

# %% tags=["puzzle"]
puzzle("5.z3", mine=None)

# %% [markdown] id="md-05-41"
# ## Problems
#
# Each uses the derivation of section 1: write your number into `mine`, then run the cell. Problem 5.p5
# starts from your run's layout.

# %% tags=["problem"]
problem("5.p1", mine=None)

# %% tags=["problem"]
problem("5.p2", mine=None)

# %% tags=["problem"]
problem("5.p3", mine=None)

# %% tags=["problem"]
problem("5.p4", mine=None)

# %% tags=["problem"]
problem("5.p5", mine=None, nnodes=int(envs[0]["GROUP_WORLD_SIZE"]), nproc_per_node=int(envs[0]["LOCAL_WORLD_SIZE"]))

# %% [markdown] id="md-05-31" tags=["takeaways"]
# ## Key takeaways
#
# * Going multi-node changes how processes start and meet, not the training code.
# * With c10d every node runs the same torchrun command: `--node-rank` is ignored and the agents are numbered
#   when they meet.
# * RANK = GROUP_RANK × processes per node + LOCAL_RANK; `LOCAL_RANK` picks the GPU.
# * One launcher only: a script under torchrun that also calls `mp.spawn` multiplies the processes.
# * A rendezvous that never forms is usually the network (port, interface, a hostname on loopback) or the
#   clocks.

# %% [markdown] id="md-05-32" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it.
#
# **Question 5.1 (predict, then run).** **Three** nodes of 2 processes each, joined by a c10d rendezvous. What
# is the global `RANK` of the process with `GROUP_RANK` 2 and `LOCAL_RANK` 1? Write a number into
# `my_prediction`, then run the next cell: it starts that job on this machine.

# %% tags=["predict"]
my_prediction = None  # a number: RANK of GROUP_RANK 2, LOCAL_RANK 1 (3 nodes x 2 processes)

# %%
q1 = disttutor.launch("whoami", nproc=2, nnodes=3, stream=False, timeout=150)
print(q1.command)
layout = [tuple(x) for x in q1.results[0]["layout"]]  # every rank's (GROUP_RANK, LOCAL_RANK), in RANK order
reveal("5.q1", my_prediction, layout.index((2, 1)), rel_tol=0,  # a rank: exact
       explain=f"RANK = GROUP_RANK x 2 + LOCAL_RANK; in RANK order the (GROUP_RANK, LOCAL_RANK) pairs are {layout}.")

# %% [markdown] id="md-05-33" tags=["question"]
# **Question 5.2.** Two nodes run the same torchrun command with `--rdzv-backend=c10d
# --rdzv-endpoint=head:29500`, and one of them never joins. What does the other one see, and what do you check
# first?

# %%
answer("5.q2")

# %% [markdown] id="md-05-34" tags=["question"]
# **Question 5.3.** The article's launch, on **3 machines with 2 GPUs** each: `python -m torch.distributed.launch
# --nproc_per_node=2 --nnodes=3 --node_rank=…` on `train_script.py`. Read that script as its §5.2 one, whose
# `main()` calls `mp.spawn(train, args=(world_size,), nprocs=world_size, join=True)` with `world_size =
# torch.cuda.device_count()`. How many training processes run on each machine, and why do their ranks clash?

# %%
answer("5.q3")

# %%
disttutor.course.chapters.glossary(5)
