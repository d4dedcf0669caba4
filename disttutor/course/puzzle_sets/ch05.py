"""Chapter 5's puzzles: the numbers torchrun gives each process on several nodes.

Every worker's ``RANK`` is ``GROUP_RANK × LOCAL_WORLD_SIZE + LOCAL_RANK`` (tests/test_ch05_multi_node.py
checks it on a two-node run; with static rendezvous ``--node-rank`` is the ``GROUP_RANK``:
tests/test_cluster.py); the tests enumerate every process of each launch here.
"""
from __future__ import annotations

from disttutor.course.puzzles import Puzzle, register


def _z1() -> dict:
    nnodes, nproc, node, local = 2, 4, 1, 2
    return {"nnodes": nnodes, "nproc": nproc, "node": node, "local": local, "answer": node * nproc + local,
            "local_only": local, "added": node + local}


def _z2() -> dict:
    nodes, nproc = 4, 8
    return {"nodes": nodes, "nproc": nproc, "answer": nodes * nproc, "per_node": nproc, "tasks": nodes}


def _z3() -> dict:
    nproc, rank = 8, 13
    return {"nproc": nproc, "rank": rank, "g": rank // nproc, "l": rank % nproc,
            "answer": [rank // nproc, rank % nproc],
            "swapped": [rank % nproc, rank // nproc]}


register(
    Puzzle(
        "5.z1", "launch",
        "This runs on the second of {nnodes} nodes. What `RANK` does the process with `LOCAL_RANK={local}` get?",
        "With static rendezvous `--node-rank` is the node's `GROUP_RANK`. Node {node} starts after node 0's "
        "{nproc} processes: `RANK` = `GROUP_RANK` × `LOCAL_WORLD_SIZE` + `LOCAL_RANK` = {node} × {nproc} + "
        "{local} = **{answer}**.",
        _z1, "answer",
        code="torchrun --nnodes 2 --nproc-per-node 4 --node-rank 1 \\\n"
             "         --master-addr node0 --master-port 29500 train.py",
        wrong={"local_only": "That is its `LOCAL_RANK`, its number on this node. `RANK` counts over all "
                             "nodes: node 0's processes come first.",
               "added": "Node {node} does not start one rank later but {nproc} later: `GROUP_RANK` × "
                        "`LOCAL_WORLD_SIZE` + `LOCAL_RANK`."}),
    Puzzle(
        "5.z2", "launch",
        "A Slurm job starts one torchrun per node. What `WORLD_SIZE` does each training process see?",
        "{nodes} nodes × {nproc} processes each = **{answer}**: `WORLD_SIZE` counts every training process "
        "of the job; `LOCAL_WORLD_SIZE` ({per_node}) counts those of one node.",
        _z2, "answer",
        code="#SBATCH --nodes=4\n"
             "#SBATCH --ntasks-per-node=1\n"
             "srun torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d \\\n"
             "     --rdzv-endpoint \"$HEAD:29500\" train.py",
        wrong={"per_node": "That is `LOCAL_WORLD_SIZE`, the processes of one node. `WORLD_SIZE` counts "
                           "all nodes' processes.",
               "tasks": "That counts Slurm's tasks: the {nodes} torchrun agents. Each agent starts {nproc} "
                        "training processes, and those are the ranks."}),
    Puzzle(
        "5.z3", "launch",
        "`torchrun --nproc-per-node {nproc}` on several nodes. The process with `RANK={rank}`: on which node "
        "(`GROUP_RANK`) is it, and what is its `LOCAL_RANK`? Answer `[GROUP_RANK, LOCAL_RANK]`.",
        "Ranks are numbered node by node, {nproc} a node: {rank} = {g} × {nproc} + {l}, so `GROUP_RANK` = "
        "{rank} // {nproc} and `LOCAL_RANK` = {rank} % {nproc}: **{answer}**. `LOCAL_RANK` picks the GPU: "
        "`torch.cuda.set_device(LOCAL_RANK)`.",
        _z3, "answer",
        wrong={"swapped": "Swapped: the node is {rank} // {nproc}, the local rank the remainder."}),
)
