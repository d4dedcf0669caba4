"""Solution to Exercise 1.1 (chapter 1): per-device memory under DDP and ZeRO-1/2/3.

Check it from a notebook or a shell::

    from disttutor.checks.memory import check_zero_memory
    print(check_zero_memory("solutions/ex1_1_zero_memory.py"))
"""


def zero_memory(n_params, bytes_per_param, world, stage):
    """Bytes per device of weights, gradients and optimizer states.

    Plain DDP (stage 0) keeps everything on every device. ZeRO shards over the
    ``world`` data-parallel devices: stage 1 the optimizer states, stage 2 also
    the gradients, stage 3 also the weights.
    """
    out = {}
    for part, first_sharded_stage in (("optimizer", 1), ("gradients", 2), ("weights", 3)):
        total = n_params * bytes_per_param[part]
        out[part] = total / world if stage >= first_sharded_stage else total
    return out
