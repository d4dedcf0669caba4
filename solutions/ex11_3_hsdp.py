"""Solution to Exercise 11.3 (chapter 11): HSDP -- replicate x shard on a 2-D device mesh with FSDP2.

Check it from a notebook or a shell::

    from disttutor.checks.hsdp import check_hsdp
    print(check_hsdp("solutions/ex11_3_hsdp.py"))

Self-contained on purpose: the checker runs this file's source on every rank (4 of them).
"""
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def hsdp_train(model, batches, loss_fn, replicas, shards, lr):
    device_type = next(model.parameters()).device.type
    # Dim 0 replicates (across nodes: one all-reduce of the gradient shards), dim 1 shards (inside a node:
    # all-gathers and reduce-scatters on the fast links). Rank r sits at (r // shards, r % shards).
    mesh = init_device_mesh(device_type, (replicas, shards), mesh_dim_names=("replicate", "shard"))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)   # a 2-D mesh: placements (Replicate(), Shard(0)), i.e. HSDP
    fully_shard(model, mesh=mesh)       # the root unit last: embedding, final norm, the tied head
    opt = torch.optim.SGD(model.parameters(), lr=lr)   # after sharding: it steps the local shards
    for x, y in batches:
        loss_fn(model(x), y).backward()  # reduce-scatter in the shard group, all-reduce over the replicas
        opt.step()
        opt.zero_grad()
    return model
