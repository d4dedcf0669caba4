def accumulate_step(ddp_model, optimizer, micro_batches):
    """One optimizer step over this rank's micro-batches (gradient accumulation under DDP).

    Should move the weights exactly as one SGD step on the mean loss of ALL ranks' samples.
    """
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss = torch.nn.functional.mse_loss(ddp_model(x), y)
        loss.backward()
    optimizer.step()
