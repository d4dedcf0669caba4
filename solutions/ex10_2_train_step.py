"""Exercise 10.2 -- a solution: one optimiser step of the capstone's DDP loop."""


def train_step(ddp_model, optimizer, scheduler, scaler, micro_batches, loss_fn, clip):
    import contextlib

    import torch

    n = len(micro_batches)
    optimizer.zero_grad(set_to_none=True)  # this step's gradients only
    total = 0.0
    for i, batch in enumerate(micro_batches):
        last = i == n - 1
        # all but the last backward only add up locally; the last one all-reduces the sum once
        with contextlib.nullcontext() if last else ddp_model.no_sync():
            loss = loss_fn(ddp_model, batch) / n  # the step's gradient is that of the mean loss
            scaler.scale(loss).backward()
        total += loss.item()
    scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), clip)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()  # after the optimizer: this step used this step's learning rate
    return total
