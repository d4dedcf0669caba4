"""Solution to Exercise 7.3 (chapter 7): split a model into PipelineStages and drive Schedule1F1B.

Check it from a notebook or a shell::

    from disttutor.checks.pipeline_stages import check_pipeline_step
    print(check_pipeline_step("solutions/ex7_3_pipeline_step.py"))
"""
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B


def pipeline_step(model, x, y, n_microbatches, loss_fn):
    """This rank's contiguous share of ``model``'s blocks, trained one step by Schedule1F1B.

    Returns (piece, losses): the module this rank kept, and the micro-batch losses ([] except on
    the last rank).
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    if x.shape[0] % n_microbatches:   # every rank sees the batch: all refuse it, before any message
        raise ValueError(f"a batch of {x.shape[0]} rows does not split into {n_microbatches} equal micro-batches")
    # n blocks over `world` ranks: n // world each, and the first n % world ranks one more
    base, extra = divmod(len(model), world)
    start = rank * base + min(rank, extra)
    piece = model[start:start + base + (1 if rank < extra else 0)]   # shares the model's parameters
    stage = PipelineStage(piece, rank, world, x.device)
    # The loss is a mean per micro-batch; scale_grads (default) divides the summed gradients by m.
    schedule = Schedule1F1B(stage, n_microbatches, loss_fn=loss_fn)
    losses = []
    args = (x,) if rank == 0 else ()                                  # the first stage feeds the batch
    kwargs = {"target": y, "losses": losses} if rank == world - 1 else {}   # the last one computes the loss
    schedule.step(*args, **kwargs)
    return piece, losses
