"""Solution to Exercise 13.2 (chapter 13): time an all-reduce the way scale_bench does.

Check it from a notebook or a shell::

    from disttutor.checks.bench import check_bench
    print(check_bench("solutions/ex13_2_bench_all_reduce.py"))
"""


def bench_all_reduce(x, warmup, iters):
    """Median over ``iters`` timed all-reduces of ``x`` of the slowest rank's seconds, on every rank."""
    import statistics
    import time

    for _ in range(warmup):  # untimed: the first calls set up connections and buffers
        dist.all_reduce(x)
    own = []
    for _ in range(iters):
        dist.barrier()  # every rank starts the call together
        t0 = time.perf_counter()
        dist.all_reduce(x)
        own.append(time.perf_counter() - t0)
    slowest = torch.tensor(own, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # per call: the rank that finished last
    return statistics.median(slowest.tolist())  # one slow call does not move the median
