"""Data parallel x pipeline parallel on a 2-D device mesh (chapter 7, the article's section 7.1).

A small diff of :mod:`disttutor.programs.pipeline`. Four ranks form a
``(dp=2, pp=2)`` mesh::

            pp ->   stage 0   stage 1
    dp  replica 0:  rank 0 -> rank 1      (first half of the mini-batch)
    |   replica 1:  rank 2 -> rank 3      (second half)

Each row is a complete pipeline (its P2P traffic stays inside the ``pp``
group); each column holds the same stage in both replicas, and after the
schedule's backward the gradients are averaged over that ``dp`` group -- the
all-reduce DDP would do. The result must equal single-process training on
the whole mini-batch::

    disttutor run pipeline_hybrid -n 4 -- --schedule 1f1b --microbatches 2
"""
from __future__ import annotations

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from disttutor.rank import runtime
from disttutor.workloads.data import regression
from disttutor.contract.options import cli
from disttutor.programs.pipeline import D_IN, D_OUT, PipeConfig, compare, reference_losses, train

DP, PP = 2, 2


def run(cfg: PipeConfig) -> None:
    with runtime.setup() as ctx:
        if ctx.world_size != DP * PP:
            raise ValueError(f"pipeline_hybrid runs on exactly {DP * PP} ranks (a {DP}x{PP} mesh), "
                             f"got {ctx.world_size}")
        if cfg.batch % (DP * cfg.microbatches):
            raise ValueError(f"--batch {cfg.batch} must split into {DP} replicas x {cfg.microbatches} "
                             "equal micro-batches")
        # Row-major mesh: rank = dp * PP + pp. Sub-groups come from the mesh, not from hand-made rank lists.
        mesh = init_device_mesh(ctx.device.type, (DP, PP), mesh_dim_names=("dp", "pp"))
        dp_rank, pp_rank = mesh["dp"].get_local_rank(), mesh["pp"].get_local_rank()
        dp_group, pp_group = mesh["dp"].get_group(), mesh["pp"].get_group()

        data = regression(n=cfg.batch, d_in=D_IN, d_out=D_OUT, seed=cfg.seed)
        x, y = data.tensors
        half = cfg.batch // DP
        mine = slice(dp_rank * half, (dp_rank + 1) * half)  # this replica's share of the mini-batch

        def average_over_replicas(params):
            # Equal shares: the mean of the two replicas' mean-gradients is the full-batch mean-gradient.
            for p in params:
                dist.all_reduce(p.grad, group=dp_group)
                p.grad /= DP

        out = train(cfg, ctx, x[mine], y[mine], pp_rank=pp_rank, pp_size=PP, group=pp_group,
                    after_backward=average_over_replicas)
        ref_losses = reference_losses(cfg, out["reference"], x, y)  # the whole mini-batch, one process
        report = dict(dp_rank=dp_rank, pp_rank=pp_rank, stages=out["stages"], ref_losses=ref_losses,
                      max_weight_diff=compare(out["stages_obj"], out["stages"], out["reference"], cfg,
                                              out["n_stages"]))
        if out["is_last"]:
            report["losses"] = out["losses"]  # this replica's own half-batch loss
        runtime.report(**report)
        dist.barrier()


main = cli(PipeConfig, run)  # the same options as the pipeline program: PipeConfig's fields



if __name__ == "__main__":
    main()
