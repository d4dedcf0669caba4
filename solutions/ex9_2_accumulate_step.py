def accumulate_step(ddp_model, optimizer, micro_batches):
    """One optimizer step over this rank's micro-batches (gradient accumulation under DDP).

    Two fixes: (1) each micro-batch's loss is divided by their number, so the accumulated
    gradient is the gradient of the MEAN loss, not of the sum; (2) all but the last backward
    run inside no_sync(): gradients only accumulate locally, and the last backward all-reduces
    the sum once -- one all-reduce per optimizer step instead of one per micro-batch.
    """
    import contextlib

    optimizer.zero_grad()
    n = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        sync = i == n - 1
        with contextlib.nullcontext() if sync else ddp_model.no_sync():
            loss = torch.nn.functional.mse_loss(ddp_model(x), y) / n
            loss.backward()
    optimizer.step()
