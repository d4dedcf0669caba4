# %% [markdown] id="md-05-01"
# # Chapter 5 — Multi-node training
#
# *Article §5.3 "多机训练扩展" (scaling to several machines).*
#
# Going from one machine to several changes **nothing in the training code** — every process
# still calls `init_process_group`, wraps its model in DDP and all-reduces gradients. What changes
# is **how the processes are started and how they find each other**. This chapter covers:
#
# 1. **Two "nodes" on one machine**: two torchrun *agents* joined by a c10d rendezvous on
#    loopback, exactly as two real machines would be. We read `RANK`, `LOCAL_RANK` and `GROUP_RANK`
#    on every process, and find out what really decides which node is node 0.
# 2. **The article's launch** (`python -m torch.distributed.launch` around a script that itself calls
#    `mp.spawn`): what it actually does on current PyTorch — `nprocs` times as many processes, clashing ranks —
#    reproduced safely, and the torchrun form that replaces it.
# 3. **Launch files for real clusters**, generated from one typed config: a plain torchrun command per
#    node (read by torchrun's own parser), a Slurm `sbatch` script (run under a real Slurm started
#    on this machine, where Slurm is installed) and a Kubernetes `PyTorchJob` (its structure and
#    torchrun arguments checked; no Kubernetes runs here).
#
# **What one machine cannot show.** All "nodes" here are processes on this one machine talking over
# loopback (`127.0.0.1`), with the backend `launch()` picks (gloo without GPUs). Real multi-node runs add things we cannot measure
# here: network interfaces (`GLOO_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME`), firewalls between nodes,
# InfiniBand/RDMA for NCCL. The launch code is the real one: on GPU machines `runtime.setup()`
# picks NCCL and `cuda:LOCAL_RANK` by itself.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(5)

# %% [markdown] id="md-05-02" tags=["opening"]
# **After this chapter you can**
# * start a job on several nodes with torchrun and a c10d rendezvous, and read `RANK`, `LOCAL_RANK` and `GROUP_RANK` on every process;
# * explain what the article's `torch.distributed.launch` + `mp.spawn` launch really does, and replace it;
# * generate a launch for a real cluster — a torchrun command per node, a Slurm script, a Kubernetes `PyTorchJob` — from one config.

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
# On a real cluster you run **one torchrun per machine**. Each torchrun (an *agent*) starts one worker
# process per device and joins a **rendezvous**: the agents meet at an agreed host:port, agree on
# who is in the job, number themselves, and each one hands its workers their identity in environment
# variables:
#
# | variable | meaning | here (2 nodes x 2 processes) |
# |---|---|---|
# | `RANK` | global rank, `0 .. WORLD_SIZE-1` — what `init_process_group` uses | 0..3 |
# | `LOCAL_RANK` | index of the process **on its node** — picks the GPU `cuda:LOCAL_RANK` | 0..1 |
# | `GROUP_RANK` | index of the **node** (the agent) in the job | 0..1 |
# | `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `GROUP_WORLD_SIZE` | processes in the job / on this node / number of nodes | 4, 2, 2 |
# | `ROLE_RANK`, `ROLE_WORLD_SIZE` | the same per *role* (one role, `default`, unless you define more) | = RANK |
# | `MASTER_ADDR`, `MASTER_PORT` | the key-value store the workers meet at (hosted by an agent) | one per job |
# | `TORCHELASTIC_*` | run id, restart count, ... (bookkeeping for elastic restarts) | |
#
# `disttutor.launch(..., nnodes=2)` starts **two torchrun agents** on this machine with
# `--nnodes=2 --node-rank=0/1 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:<free port>` — the same
# arguments you would give on two machines, with the head node's address instead of `127.0.0.1`.
# The program `whoami` reports its variables and runs two tiny all-reduces that must cross the
# "node" boundary: a one-hot "which node am I on" vector (→ ranks per node) and the sum of all ranks.

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
# Every rank agrees on the layout, and the all-reduces crossed the nodes: each rank counted 2 ranks on
# each node and a rank sum of 0+1+2+3 = 6, and the `RANK` column holds each of 0 to 3 exactly once (the
# check asserts both: a sum alone would not catch two ranks claiming one number, as 0+0+3+3 = 6). For a **homogeneous** job (the same number of processes on every node) torchrun
# numbers ranks node by node:
#
# $$\text{RANK} = \text{GROUP\_RANK} \times \text{LOCAL\_WORLD\_SIZE} + \text{LOCAL\_RANK}$$

# %% tags=["proof", "nbval-check-output"]
print(check_rank_layout(envs, res.results, res.world_size))  # and one store for the whole job

# %% [markdown] id="md-05-05"
# ### What the picture looks like
# Drawn from the reports above: two nodes (agents), two processes each, and the global rank each
# process got. (The drawing code is `draw_layout` in `disttutor/viz/cluster.py`.)

# %%
draw_layout(envs)
plt.show()

# %% [markdown] id="md-05-06"
# ### Who decides which node is node 0?
#
# We passed `--node-rank=0` to the first agent and `--node-rank=1` to the second. With the **c10d**
# rendezvous, torchrun ignores it — and says so in its log:

# %% tags=["nbval-check-output"]
warning = [ln for ln in res.agent_log if "node_rank is only used" in ln]
assert warning, "torchrun did not warn about --node-rank"
print(warning[0][warning[0].index("node_rank"):])

# %% [markdown] id="md-05-07"
# So what does assign `GROUP_RANK`? When the c10d rendezvous completes, the agents are **sorted** by
# (node name, agent process id) and numbered in that order. The name is the agent's `--local-addr`
# if you pass one, else `socket.getfqdn()`, and it is sorted as a string (`node10` before `node2`);
# on one host the names are equal and the agents' pids decide. **Consequences:** with c10d, every node runs the
# *same* command; don't derive anything from `--node-rank`; read `GROUP_RANK`/`RANK` from the
# environment. If you need a fixed node order, use `--rdzv-backend=static` (then `--node-rank` *is*
# `GROUP_RANK`, and the job cannot survive losing a node). The source and this run's pids, folded:

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
# One rank's complete torchrun environment (the port and run id change from run to run):

# %%
for k, v in envs[-1].items():
    print(f"  {k:28s} {v}")

# %% [markdown] id="md-05-09"
# ## 2. The article's launch: `torch.distributed.launch` + `mp.spawn`
#
# The article's §5.3 starts, on each of 2 machines with 4 GPUs:
#
# ```bash
# MASTER_ADDR=192.168.1.1 MASTER_PORT=12355 python -m torch.distributed.launch \
#     --nproc_per_node=4 --nnodes=2 --node_rank=0 \
#     --master_addr=192.168.1.1 --master_port=12355 train_script.py
# ```
#
# The article never shows `train_script.py`; read with §5.3's new `setup()`, it is the §5.2 DDP script,
# whose `main()` does
#
# ```python
# world_size = torch.cuda.device_count()                        # 4: GPUs on *this* machine
# mp.spawn(train, args=(world_size,), nprocs=world_size, join=True)
# # ... and each child: dist.init_process_group('nccl', rank=rank, world_size=world_size)
# ```
#
# Two problems. First, is `torch.distributed.launch` even still there?

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
# What does it hand the script it starts? Rather than quote its help text, run it: a five-line script
# prints its own `sys.argv` and `LOCAL_RANK`, started on 2 processes by `torch.distributed.launch`,
# once plain and once with `--use-env`, and then by `torchrun` (a 120-second bound; the process tree
# is killed if anything hangs).

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
# It still exists (a thin wrapper around torchrun's own `run()`), and warns. The second problem is
# worse: **both layers start one process per GPU.** The launcher starts `nproc_per_node=4` copies of
# the script per machine, and each copy `mp.spawn`s 4 more: 2 x 4 x 4 = 32 processes competing for
# 8 GPUs, each calling `init_process_group(rank=0..3, world_size=4)`. Ranks 0..3 exist 8 times over,
# and all of them meet at the same `MASTER_ADDR:MASTER_PORT` store.
#
# We reproduce it at a size this machine can take: torchrun starts **2** processes (our "launch"),
# each `mp.spawn`s **2** children (our "GPUs") with the article's rank formula — spawn index as rank,
# "GPUs on this node" as world size — and a 3-second timeout so a clash cannot stall the cell. The
# program is `disttutor/programs/legacy_spawn.py`; the children are module-level functions of that
# program (spawn start method), and the launcher kills the whole tree if anything hangs.

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
# Which children pair up, and whether any fail, is a **race**: duplicate ranks write their address
# under the same store key, and whoever writes last is the one the others connect to. So the (folded)
# table above can differ from run to run — crossing pairs, connect timeouts (the `error` column), or the
# worst case: every child "succeeds" in a group of 2, and the job splits into separate worlds that
# each average gradients over half the processes, **with no error at all**. This run's verdict:

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
# The process tree, rebuilt from the parent pids the processes reported:

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
# Delete the `mp.spawn` and the hand-made rank: torchrun already started one process per device and
# told each its `RANK`, `LOCAL_RANK` and `WORLD_SIZE`. `init_process_group()` reads them from the
# environment (`env://`, the default) — which is all `runtime.setup()` does. On GPUs one more line
# matters: `torch.cuda.set_device(local_rank)` **before** `init_process_group`, so that NCCL (and
# every `.cuda()` without an index) uses this process's own GPU instead of piling all the ranks of
# a node onto GPU 0. The corrected `train_script.py`, run right here on 2 processes (on a CPU-only
# machine it takes the gloo branch; the same file runs unchanged on GPUs):

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
# In `legacy_spawn.py` this is the `--fixed` mode: the same record, made by the launched process
# itself.

# %%
fixed = disttutor.launch("legacy_spawn", nproc=2, args={"fixed": True}, stream=False, timeout=150)
recs = [c for r in fixed.results for c in r["children"]]

# %% tags=["nbval-check-output"]
print(format_table([{"RANK": c["rank"], "world_size": c["world_size"], "joined": c["ok"],
                     "all-reduce of 1s": c["sum"]} for c in recs]))
print(check_fixed_launch(recs, fixed.results))  # and no spawned children

# %% [markdown] id="md-05-17"
# And the article's two commands, in torchrun form for its 2 machines x 4 GPUs — generated
# (section 3 explains the generator). With the **static** rendezvous (closest to the article: node 0
# is the one you say) the commands differ only in `--node-rank`; with **c10d** every node runs the
# same command:

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
# `disttutor.multinode.cluster` turns one typed, validated `ClusterConfig` into three ready-to-edit launch files.
# All three follow the rule of this chapter: **one torchrun per node, one process per GPU, nothing
# spawns anything else.**

# %% tags=["nbval-check-output"]
cfg = cluster.ClusterConfig(nnodes=2, nproc_per_node=4, gpus_per_node=4, module="disttutor.programs.whoami",
                            job_name="whoami-2x4", head="node0.cluster.local", port=29500, partition="gpu",
                            time_limit="00:10:00", image="pytorch/pytorch:latest", env={"NCCL_DEBUG": "WARN"},
                            activate="source ~/venvs/ddp/bin/activate")
print(cfg)

# %% [markdown] id="md-05-19"
# ### A plain torchrun command per node
# Run each on its machine (in any order; the c10d rendezvous waits for all of them for its
# `join_timeout`, whose default this torch states below; `--rdzv-conf join_timeout=SECONDS` changes it).

# %% tags=["nbval-check-output"]
cmds = cluster.torchrun_commands(cfg)
print("\n".join(cmds))
join = dr.RendezvousTimeout().join  # the default torchrun's c10d rendezvous uses
print(f"default join timeout: {join.total_seconds():.0f} s = {join.total_seconds() / 60:g} minutes")

# %% [markdown] id="md-05-20"
# Checked by torchrun itself: its own argument parser (`torch.distributed.run.get_args_parser`, the
# one the `torchrun` command uses) accepts every command.

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
# Write `node_command(node_rank, nnodes, nproc_per_node, head, port, job_id)`: torchrun's arguments
# (a list of strings, without the word `torchrun`) for node `node_rank` of a job with c10d rendezvous
# at `head:port` that runs `-m disttutor.programs.whoami`. The checker parses your commands for a
# 2-node x 4-process job with torchrun's own parser, then **runs** them: two torchrun agents on this
# machine (`head="127.0.0.1"`, a free port, one process each) must meet and form one 2-rank job.

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
# One `srun` task per node; each task is a torchrun agent. The first node of the allocation hosts the
# c10d rendezvous (the batch script itself runs there); `$SLURM_JOB_ID` makes the rendezvous id unique
# per job. Submit with `sbatch job.sbatch`, after `sbatch --test-only job.sbatch` (below).

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
# **Why each line is there.** This script has been run under a real Slurm (22.05: `munged`, `slurmctld`
# and two `slurmd` on one machine, below), and each of these lines fixes what went wrong there
# without it (*reported*: the first real run of an earlier version of this script):
#
# | line | without it |
# |---|---|
# | the activation line (`activate=`; default: the environment that generated the script) | `slurmstepd: error: execve(): torchrun: No such file or directory`, job FAILED |
# | `head_addr` = the head's `NodeAddr` from `scontrol show node` | the node *name* (`n1`) did not resolve (`Name or service not known`): rendezvous timeout, FAILED after minutes |
# | `rdzv_port`: a port free on the head, per job | two jobs with one head met at the fixed port 29500: the second joined the first one's store and died when it ended |
# | `srun --label`, torchrun's `--tee=3` and its line prefix | the ranks' lines interleaved, with no node or rank |
# | `--kill-on-bad-exit=1` | each agent must notice a failed node by itself (with a crashing rank they did, in seconds); with it, one failed node ends the step on every node at once: a safeguard |
# | `--cpus-per-task`: one CPU per process by default; no GPU request by default | 16 CPUs on 2-CPU nodes: PENDING for ever; GPUs on a cluster without them: refused |
# | `sed -n 1p`, not `head -n 1` | `head` exits after one line: under `pipefail`, scontrol's SIGPIPE ended the job |
#
# Without `activate=`, the line activates the environment of the Python that writes the script, which
# is right when the cluster's nodes see this machine's file system (a shared home or project
# directory). Here it would be:

# %%
print(cluster.this_environment().replace(sys.prefix, "<this kernel's environment>"))

# %% [markdown] id="md-05-24"
# ### The script under a real Slurm
# Where Slurm's Debian packages are installed and the kernel runs as root,
# `disttutor.multinode.slurm_local.LocalSlurm` starts a **two-node cluster on this machine**: one `munged` with a
# key of its own, one `slurmctld` and two `slurmd` (nodes `n1` and `n2`, both at `127.0.0.1`, each on
# its own port), all in a temporary directory and stopped by PID at the end. The generated script is
# submitted unchanged (only `activate=` left at its default: this kernel's environment).

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
# The job's output file (`%x-%j.out`): the script's own line, then one line per rank, each starting
# with the **node's task index** (`srun --label`) and the **rank** (torchrun's prefix). The agents'
# own log lines (torchrun's warnings at shutdown, with this machine's file paths) are counted, not shown.

# %%
if slurm_run:
    labelled = [ln for ln in slurm_run["output"] if re.match(r"\d+: \[rank\d+\]: RANK ", ln)]
    print(slurm_run["output"][0])
    print("\n".join(sorted(labelled, key=lambda ln: int(re.search(r"\[rank(\d+)\]", ln).group(1)))))
    print(f"(+ {len(slurm_run['output']) - 1 - len(labelled)} lines of the torchrun agents' own log)")

# %% [markdown] id="md-05-26"
# The ranks' reports: the same identity and all-reduces as in section 1, now from a Slurm job. Which
# Slurm node became `GROUP_RANK` 0 is the rendezvous' choice (sorted by node name, then agent pid:
# section 1; both nodes here are one host), not Slurm's node order, so the `Slurm node` column may read either way.

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
# For the **Kubeflow Training Operator v1** API (`apiVersion: kubeflow.org/v1`, kind `PyTorchJob`): one
# `Master` pod and `nnodes-1` `Worker` pods, one per node. The operator injects `MASTER_ADDR`,
# `MASTER_PORT` and `PET_NNODES` / `PET_NPROC_PER_NODE` / `PET_NODE_RANK` into every pod (from
# `spec.nprocPerNode`, present in operator releases 1.7+); the manifest hands them to torchrun
# explicitly with Kubernetes' `$(VAR)` expansion, so the pod numbering is the node rank (static
# rendezvous). The container must be called `pytorch`. Kubeflow Trainer v2 (`TrainJob`) is the
# successor API; this manifest targets the v1 operator. Apply with `kubectl apply -f job.yaml`.
#
# **What of it runs here: not Kubernetes.** Running the manifest needs a Kubernetes cluster with the
# Training Operator (a container runtime, an API server for `kubectl`); the course assumes none, so
# neither the operator nor a pod starts here. Checked instead: the manifest's v1 structure and
# torchrun's parser on each pod's arguments (below).

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
# The config is validated when it is made, not when 16 GPUs are already allocated. What only the
# cluster knows (how many CPUs or GPUs its nodes have) is `sbatch --test-only`'s to answer, above.

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
# On a real cluster the agents either never meet (torchrun waits its join timeout, then raises
# `RendezvousTimeoutError`) or they meet and the first collective hangs or fails to connect. The
# causes are almost always these four; each comes with the command that diagnoses it, run on every
# node. The cells below run each check on this machine.
#
# 1. **The head is not reachable on its port.** `nc -zv HEAD PORT` (or
#    `python -c "import socket; socket.create_connection(('HEAD', PORT), 5)"`). *Connection refused*:
#    nothing listens there yet (the head's agent is not started, or another port). *A timeout*: a
#    firewall drops the packets — check `sudo iptables -S` / `sudo ufw status` / the cloud's security
#    group, and open the rendezvous port **and** the ports gloo/NCCL pick between all nodes (they
#    listen on ephemeral ports: allow all TCP inside the cluster's subnet).
# 2. **The wrong network interface.** Gloo and NCCL each choose an interface per node; with docker0,
#    a VPN or several NICs they can choose one the other nodes cannot reach. List them with
#    `ip -br addr`; pin the right one with `GLOO_SOCKET_IFNAME=eth0` and `NCCL_SOCKET_IFNAME=eth0`
#    (NCCL also takes a prefix or an exclusion, `NCCL_SOCKET_IFNAME=^docker,lo`). `NCCL_DEBUG=INFO`
#    prints the interface NCCL chose.
# 3. **The hostname resolves to loopback.** `getent hosts $(hostname)` on each node. Debian and
#    Ubuntu's `/etc/hosts` map the machine's own name to `127.0.1.1`; a node that advertises that
#    address sends the others to *themselves*. Pass addresses as IPs (`--rdzv-endpoint IP:PORT`,
#    `--local-addr IP`) or fix `/etc/hosts`.
# 4. **The clocks disagree.** `timedatectl` (or `chronyc tracking`) on each node. The c10d rendezvous
#    keeps a node alive by its heartbeats, stamped with *the writer's* wall clock and compared with
#    *the reader's*: a node whose clock lags by more than the keep-alive window is dropped as dead
#    (source below). Run NTP/chrony everywhere.
#
# And the same `--rdzv-id` (Slurm: `$SLURM_JOB_ID`) and the same torch version
# (`python -c "import torch; print(torch.__version__)"`) on every node.

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
# An interface name that does not exist on a node — a typo, or `eth0` on a machine whose NIC is
# `ens5` — fails at once, on every rank, naming the interface (a real 2-rank run):

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
# * Every node runs the same torchrun command; with the c10d rendezvous `--node-rank` is ignored and the agents are numbered when they meet (`--rdzv-backend=static` fixes the order).
# * RANK = GROUP_RANK × processes per node + LOCAL_RANK; `LOCAL_RANK` picks the GPU.
# * One launcher only: torchrun starts the processes; a script that also calls `mp.spawn` multiplies them (`nprocs` each).
# * What one machine cannot show — network interfaces, firewalls — is what a rendezvous that never forms comes down to (InfiniBand matters after it, for NCCL's data path).

# %% [markdown] id="md-05-32" tags=["question"]
# ## Check your understanding
#
# Three questions: write your answer before you open the one under it. In the first, the run decides.
#
# **Question 5.1 (predict, then run).** Two nodes of 2 processes each, joined by a c10d rendezvous. What is the global `RANK` of the process with `GROUP_RANK` 1 and `LOCAL_RANK` 1? Write a number into `my_prediction`, then run the next cell.

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
# **Question 5.2.** Two nodes run the same torchrun command with `--rdzv-backend=c10d --rdzv-endpoint=head:29500`, and one of them never joins. What does the other one see, and what do you check first?

# %%
answer("5.q2")

# %% [markdown] id="md-05-34" tags=["question"]
# **Question 5.3.** The article (§5.3) starts `python -m torch.distributed.launch --nproc_per_node=4 --nnodes=2 --node_rank=…` on each of 2 machines with 4 GPUs, on `train_script.py`: its §5.2 script with §5.3's `setup()`, whose `main()` calls `mp.spawn(train, args=(world_size,), nprocs=world_size, join=True)` with `world_size = torch.cuda.device_count()`. How many training processes run on each machine, and why do their ranks clash?

# %%
answer("5.q3")

# %%
disttutor.course.chapters.glossary(5)
