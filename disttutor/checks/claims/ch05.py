"""Chapter 5's named checks: torchrun's rank layout, the article's launcher and double spawn, Slurm, Kubeflow."""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from disttutor.checks.claims.base import claim


def _layout_ok(e: Mapping[str, str]) -> bool:
    return int(e["RANK"]) == int(e["GROUP_RANK"]) * int(e["LOCAL_WORLD_SIZE"]) + int(e["LOCAL_RANK"])


def check_rank_layout(envs: Sequence[Mapping[str, str]], reports: Sequence[Mapping[str, Any]], world: int) -> str:
    """RANK = GROUP_RANK x LOCAL_WORLD_SIZE + LOCAL_RANK on every rank; the all-reduces crossed the nodes (2 ranks
    counted on each node, ranks summing to 0+1+...); each RANK once; one store (MASTER_ADDR:MASTER_PORT) for the whole job."""
    for e, rep in zip(envs, reports):
        claim(_layout_ok(e), f"RANK {e['RANK']} != GROUP_RANK {e['GROUP_RANK']} x LOCAL_WORLD_SIZE "
                             f"{e['LOCAL_WORLD_SIZE']} + LOCAL_RANK {e['LOCAL_RANK']}")
        claim(rep["ranks_per_node"] == [2.0, 2.0] and rep["rank_sum"] == sum(range(world)),
              f"rank {e['RANK']}: ranks per node {rep['ranks_per_node']}, rank sum {rep['rank_sum']} "
              f"(expected [2, 2] and {sum(range(world))})")
    ranks = sorted(int(e["RANK"]) for e in envs)  # the sum alone would pass 0, 0, 3, 3
    claim(ranks == list(range(world)), f"every RANK once: got {ranks}, expected 0..{world - 1}")
    stores = {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs}
    claim(len(stores) == 1, f"every rank should meet at one store: {stores}")
    return f"RANK == GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK holds on all {world} ranks"


def check_group_rank_order(assign: str, pids_by_group: Sequence[int]) -> str:
    """c10d's rendezvous numbers the agents by sorting them; on one host that is the agents' pid order."""
    claim("enumerate(sorted(state.participants))" in assign, f"dynamic_rendezvous no longer sorts: {assign!r}")
    claim(list(pids_by_group) == sorted(pids_by_group),
          f"GROUP_RANK should follow the agents' pid order on one host: pids by GROUP_RANK {list(pids_by_group)}")
    return "the rendezvous sorts its participants; GROUP_RANK follows the agents' pid order"


def check_launch_deprecated(returncode: int, warn: str, help_text: str) -> str:
    """``torch.distributed.launch`` still runs, warns that it is deprecated, points to torchrun, and adds
    ``--use-env`` to torchrun's parser."""
    claim(returncode == 0, f"torch.distributed.launch --help exited with {returncode}")
    claim("deprecated" in warn and "Use torchrun" in warn, f"expected a deprecation pointing to torchrun: {warn!r}")
    claim("--use-env" in help_text, "torch.distributed.launch's help lacks --use-env")
    return "torch.distributed.launch still runs, is deprecated (FutureWarning), and points to torchrun"


def check_what_launchers_pass(passed: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """Plain ``torch.distributed.launch`` passes ``--local-rank=N`` on the command line; with ``--use-env`` and
    with torchrun the command line is empty; every launcher sets LOCAL_RANK in the environment."""
    plain, use_env, trun = (passed[k] for k in ("torch.distributed.launch", "torch.distributed.launch --use-env",
                                                "torchrun"))
    claim([r["argv"] for r in plain] == [["--local-rank=0"], ["--local-rank=1"]],
          f"torch.distributed.launch passed {[r['argv'] for r in plain]}")
    claim([r["argv"] for r in use_env] == [[], []] and [r["argv"] for r in trun] == [[], []],
          f"--use-env passed {[r['argv'] for r in use_env]}, torchrun {[r['argv'] for r in trun]}; expected nothing")
    bad = {k: [r["LOCAL_RANK"] for r in recs] for k, recs in passed.items()
           if [r["LOCAL_RANK"] for r in recs] != [str(i) for i in range(len(recs))]}
    claim(not bad, f"LOCAL_RANK in the environment should be 0, 1: {bad}")
    return "launch passes --local-rank=N (and sets LOCAL_RANK); --use-env and torchrun: only LOCAL_RANK"


def check_double_spawn(children: Sequence[Mapping[str, Any]], launched_pids: Sequence[int]) -> str:
    """torchrun's 2 processes each spawned 2 children: 4 distinct processes claiming ranks 0, 0, 1, 1; each either
    joined a group of 2 (its all-reduce counted 2) or failed with an error, whatever the race."""
    pids = {c["pid"] for c in children}
    claim(len(children) == 4 and len(pids) == 4, f"expected 4 distinct spawned processes: {len(children)}, {pids}")
    parents = sorted(c["parent_pid"] for c in children)
    claim(parents == sorted(list(launched_pids) * 2),
          f"each launched process should have spawned 2 children: parents {parents}, launched {list(launched_pids)}")
    ranks = sorted(c["rank"] for c in children)
    claim(ranks == [0, 0, 1, 1], f"the children should claim ranks 0, 0, 1, 1: {ranks}")
    odd = [c for c in children if not ((c["ok"] and c["sum"] == 2) or (not c["ok"] and c["error"]))]
    claim(not odd, f"a child neither joined a group of 2 nor failed with an error: {odd}")
    return "4 processes claimed ranks 0, 0, 1, 1 in worlds of 2: each joined a group of 2 or failed with an error"


def check_fixed_launch(recs: Sequence[Mapping[str, Any]], launched: Sequence[Mapping[str, Any]]) -> str:
    """The fixed launch: 2 processes, ranks 0 and 1, every all-reduce counted both, no spawned children."""
    claim([c["rank"] for c in recs] == [0, 1] and all(c["ok"] and c["sum"] == 2 for c in recs),
          f"expected ranks [0, 1], each joined with an all-reduce of 2: {recs}")
    claim(all(c["parent_pid"] != r["launched_pid"] for c, r in zip(recs, launched)),
          "a process of the fixed launch was spawned by another (it should be torchrun's own)")
    return f"{len(recs)} processes, {len(recs)} distinct ranks, every all-reduce counted all {len(recs)}"


def check_slurm_job(slurm_run: Mapping[str, Any], world: int) -> str:
    """The Slurm job COMPLETED with every rank reporting; RANK's formula holds and is the report's rank; the
    rendezvous id is the job id; the all-reduces crossed both Slurm nodes; it met at the head's NodeAddr."""
    reps = slurm_run["reports"]
    state = slurm_run["info"]["JobState"]
    claim(state == "COMPLETED" and sorted(reps) == list(range(world)),
          f"job state {state}, reports from ranks {sorted(reps)} (expected COMPLETED, 0..{world - 1})")
    for r, rep in reps.items():
        e = rep["results"]["env"]
        claim(_layout_ok(e) and int(e["RANK"]) == r, f"report {r}: RANK {e['RANK']}, GROUP_RANK {e['GROUP_RANK']}, "
                                                      f"LOCAL_RANK {e['LOCAL_RANK']}")
        claim(e["TORCHELASTIC_RUN_ID"] == slurm_run["id"],  # --rdzv-id=$SLURM_JOB_ID
              f"rank {r}: rendezvous id {e['TORCHELASTIC_RUN_ID']} != the job id {slurm_run['id']}")
        res = rep["results"]
        claim(res["ranks_per_node"] == [2.0, 2.0] and res["rank_sum"] == sum(range(world)),
              f"rank {r}: ranks per node {res['ranks_per_node']}, rank sum {res['rank_sum']}")
    nodes = {(rep["results"]["env"]["GROUP_RANK"], rep["results"]["slurm_node"]) for rep in reps.values()}
    claim(len(nodes) == 2, f"each GROUP_RANK should be one Slurm node: {nodes}")
    head = slurm_run["output"][0]
    claim(re.search(r"rendezvous at 127\.0\.0\.1:\d+$", head) is not None,  # NodeAddr, not "n1"
          f"the rendezvous should meet at the head's NodeAddr: {head!r}")
    return (f"COMPLETED; RANK = GROUP_RANK x LOCAL_WORLD_SIZE + LOCAL_RANK on all {world} ranks; the rendezvous "
            "met at the head's NodeAddr, on a port of the job's own")


def check_pytorchjob(job: Mapping[str, Any], nnodes: int, args: Any, pod_env: Mapping[str, str]) -> str:
    """The manifest is a kubeflow.org/v1 PyTorchJob with one replica per node, and torchrun's own parser accepts
    a worker pod's arguments once the operator's variables are filled in."""
    claim((job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob"),
          f"expected kubeflow.org/v1 PyTorchJob: {job['apiVersion']}, {job['kind']}")
    specs = job["spec"]["pytorchReplicaSpecs"]
    replicas = {k: v["replicas"] for k, v in specs.items()}
    claim(specs["Master"]["replicas"] + specs["Worker"]["replicas"] == nnodes, f"replicas {replicas} for {nnodes} nodes")
    got = (args.node_rank, args.master_addr, args.nnodes)
    want = (int(pod_env["PET_NODE_RANK"]), pod_env["MASTER_ADDR"], pod_env["PET_NNODES"])
    claim(got == want, f"torchrun parsed (node_rank, master_addr, nnodes) = {got}, expected {want}")
    return f"YAML parses; replicas: {replicas} | torchrun accepts worker pod {args.node_rank}'s args"


def check_train_script(ok: bool, lines: Sequence[str], world: int) -> str:
    """The corrected script ran on ``world`` ranks and DDP averaged the gradient: rank r's data is all (r + 1),
    so d(sum of 8 outputs)/dw[0, 0] = 8 (r + 1) on rank r, and the mean over the ranks is 8 (world + 1) / 2."""
    want = 8 * (world + 1) / 2
    claim(ok and len(lines) == world, f"the script should finish with one line per rank: ok={ok}, lines {list(lines)}")
    claim(all(ln.endswith(f"grad[0,0] = {want:.1f}") for ln in lines),
          f"every rank should hold the averaged gradient {want:.1f}: {list(lines)}")
    return f"{world} ranks, one process each; every rank holds the averaged gradient {want:.1f}"


def check_torchrun_parses(cmds: Sequence[str], nnodes: int, nproc: int) -> str:
    """torchrun's own parser (``torch.distributed.run.get_args_parser``) accepts every node's command, with the
    job's counts, the c10d rendezvous and one endpoint for all nodes."""
    import shlex

    from torch.distributed.run import get_args_parser

    seen = set()
    for cmd in cmds:
        words = shlex.split(cmd)
        a = get_args_parser().parse_args(words[words.index("torchrun") + 1:])
        got = (a.nnodes, a.nproc_per_node, a.rdzv_backend)
        claim(got == (str(nnodes), str(nproc), "c10d"), f"torchrun read (nnodes, nproc, backend) = {got} from {cmd!r}")
        seen.add((a.rdzv_endpoint, a.rdzv_id))
    claim(len(seen) == 1, f"every node should meet at one endpoint with one id: {seen}")
    return f"torchrun's parser accepts all {len(cmds)} commands: {nnodes} x {nproc}, c10d at {seen.pop()[0]}"


def check_bash_syntax(returncode: int, stderr: str) -> str:
    """``bash -n`` (parse, run nothing) accepts the generated batch script."""
    claim(returncode == 0, f"bash -n rejects the script: {stderr.strip()}")
    return "bash -n: the script parses"


def check_bad_interface(ok: bool, errors: Sequence[str | None], name: str) -> str:
    """A job whose ``GLOO_SOCKET_IFNAME`` names no interface fails, and every rank's error names it."""
    claim(not ok, f"GLOO_SOCKET_IFNAME={name}: the job should fail")
    claim(all(name in (e or "") for e in errors), f"every rank's error should name {name}: {list(errors)}")
    return f"GLOO_SOCKET_IFNAME={name}: all {len(errors)} ranks failed, each naming the interface"
