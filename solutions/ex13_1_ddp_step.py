"""Solution to Exercise 13.1 (chapter 13): a DDP step predicted from the fitted constants.

Check it from a notebook or a shell::

    from disttutor.checks.cost_model import check_ddp_step
    print(check_ddp_step("solutions/ex13_1_ddp_step.py"))
"""


def ddp_step(machine, model, batch):
    """Seconds for one DDP step of ``model`` on ``batch`` rows per rank over ``machine.n`` ranks.

    Compute: every ``nn.Linear`` costs 2 FLOPs per row and weight forward, twice that backward (the
    input's gradient and the weight's), at ``machine.gamma`` FLOP/s. Communication: one bucket holds
    every float32 gradient, so its all-reduce starts only after backward and none of it overlaps:
    one call's latency plus the ring's 2(n-1)/n of the bytes at the fitted bus bandwidth.
    """
    import torch

    n = machine.n
    weights = sum(m.in_features * m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear))
    compute = 6 * batch * weights / machine.gamma
    nbytes = 4 * sum(p.numel() for p in model.parameters())
    link = machine.links["all_reduce"]
    comm = link.alpha + 2 * (n - 1) / n * nbytes / link.bandwidth
    return compute + comm
