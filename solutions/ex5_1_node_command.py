"""Solution to Exercise 5.1 (chapter 5): one torchrun command per node of a multi-node job.

Check it from a notebook or a shell::

    from disttutor.checks.cluster import check_node_command
    print(check_node_command("solutions/ex5_1_node_command.py"))
"""


def node_command(node_rank, nnodes, nproc_per_node, head, port, job_id):
    """torchrun's arguments for node ``node_rank`` (c10d rendezvous: the same on every node)."""
    # With c10d the agents meet at head:port and number themselves; node_rank is not needed
    # (with --rdzv-backend=static it would be: --node-rank=node_rank --master-addr=head ...).
    return [f"--nnodes={nnodes}", f"--nproc-per-node={nproc_per_node}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={head}:{port}", f"--rdzv-id={job_id}",
            "-m", "disttutor.programs.whoami"]
