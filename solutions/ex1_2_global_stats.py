"""Solution to Exercise 1.2 (chapter 1): the mean and variance of all ranks' samples, from uneven shards.

Check it from a notebook or a shell::

    from disttutor.checks.shard_stats import check_global_stats
    print(check_global_stats("solutions/ex1_2_global_stats.py"))

Self-contained on purpose: the checker runs this file's source on every rank. Data parallelism in
one line: each rank computes partial results on its own samples (a count, a sum, a sum of squares),
one all-reduce adds them up, and every rank finishes the same computation on the totals.
"""
import torch
import torch.distributed as dist


def global_stats(x_local: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance (dividing by the total count) over every rank's samples, on every rank."""
    x = x_local.double()  # a new tensor: the caller's x_local is left as it was
    parts = torch.cat([torch.tensor([float(len(x))], dtype=torch.float64),  # this rank's count
                       x.sum(0),                                             # its sum per feature
                       (x * x).sum(0)])                                      # its sum of squares
    dist.all_reduce(parts)  # SUM over the ranks, the same totals on every rank (an empty shard adds zeros)
    d = x.shape[1]
    n, s, q = parts[0], parts[1:1 + d], parts[1 + d:]
    mean = s / n
    var = q / n - mean * mean  # E[x^2] - mean^2, in float64 so the subtraction loses nothing that matters
    return mean.to(x_local.dtype), var.to(x_local.dtype)
