"""Solution to Exercise 8.2 (chapter 8): gradient accumulation with torch's DDP and ``no_sync()``.

Check it from a notebook or a shell::

    from disttutor.checks.accumulation import check_accumulate_train
    print(check_accumulate_train("solutions/ex8_2_accumulate.py"))
"""
import contextlib

import torch


def accumulate_train(ddp, optimizer, micro_batches, k):
    """Train on this rank's micro-batches, one optimizer step per group of ``k`` (the last group may
    be shorter: it steps too, its losses divided by its own size). Returns nothing."""
    for start in range(0, len(micro_batches), k):
        group = micro_batches[start:start + k]
        for i, (x, y) in enumerate(group):
            last = i == len(group) - 1
            # all but the group's last backward only add into .grad; the last one all-reduces the sum
            with contextlib.nullcontext() if last else ddp.no_sync():
                loss = torch.nn.functional.mse_loss(ddp(x), y) / len(group)  # the mean over the group
                loss.backward()
        optimizer.step()
        optimizer.zero_grad()
