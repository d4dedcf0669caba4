"""Solution to Exercise 6.1 (chapter 6): one pipeline stage's forward and backward over send/recv.

Check it from a notebook or a shell::

    from disttutor.checks.model_parallel import check_stage
    print(check_stage("solutions/ex6_1_stage_forward_backward.py"))

Self-contained on purpose: the checker runs this file's source on every rank.
Same steps as :func:`disttutor.programs.model_parallel.train_step`.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F


def stage_forward_backward(stage, x, y, act_shape, out_shape):
    """Forward and backward of this rank's stage; the loss on the last rank, else None."""
    rank, world = dist.get_rank(), dist.get_world_size()
    # forward: the first stage reads the data, every other one waits for its predecessor
    if rank == 0:
        inp = x
    else:
        inp = torch.empty(act_shape)
        dist.recv(inp, src=rank - 1)
        # autograd cannot follow a tensor across processes: the received copy is a leaf
        # of our local graph, and backward() leaves d loss / d input in its .grad
        inp.requires_grad_(True)
    out = stage(inp)
    if rank < world - 1:
        dist.send(out.detach().contiguous(), dst=rank + 1)
        grad_out = torch.empty(out_shape)
        dist.recv(grad_out, src=rank + 1)  # d loss / d (our output), from the next stage
        out.backward(grad_out)             # continue the chain rule where the next rank stopped
        loss = None
    else:
        loss_t = F.mse_loss(out, y)
        loss_t.backward()
        loss = loss_t.item()
    if rank > 0:
        dist.send(inp.grad.contiguous(), dst=rank - 1)
    return loss
