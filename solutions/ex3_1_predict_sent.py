"""Solution to Exercise 3.1 (chapter 3): bytes rank 0 sends per step, DataParallel vs the ring.

Check it from a notebook or a shell::

    from disttutor.checks.traffic import check_predict_sent
    print(check_predict_sent("solutions/ex3_1_predict_sent.py"))
"""


def predict_sent(pattern, n, n_params, batch, d_in, d_out, elem=4):
    """Bytes rank 0 sends in one training step on ``n`` ranks."""
    if n == 1:
        return 0
    if pattern == "dp-copy":
        # DataParallel: device 0 broadcasts the parameters to every other device, scatters
        # their input shards, and (after the loss) scatters the output gradients.
        x_shard, y_shard = batch // n * d_in * elem, batch // n * d_out * elem
        return (n - 1) * (n_params * elem + x_shard + y_shard)
    if pattern == "ddp-ring":
        # tensor_split sizes: the first n_params % n chunks hold one element more.
        q, r = divmod(n_params, n)
        chunk = [q + (1 if i < r else 0) for i in range(n)]
        rank = 0
        reduce_scatter = sum(chunk[(rank - k) % n] for k in range(n - 1))   # step k sends chunk r-k
        all_gather = sum(chunk[(rank + 1 - k) % n] for k in range(n - 1))   # step k sends chunk r+1-k
        return (reduce_scatter + all_gather) * elem
    raise ValueError(f"unknown pattern {pattern!r}")
