"""Solution to Exercise 2.1 (chapter 2): ring all-reduce with point-to-point ops.

Check it from a notebook or a shell::

    from disttutor.checks.allreduce import check_ring_allreduce
    print(check_ring_allreduce("solutions/ex2_1_ring_allreduce.py"))

Self-contained on purpose (only torch and torch.distributed): the checker runs
this file's source on every rank. Same algorithm as
:func:`disttutor.scratch.allreduce.ring_all_reduce`.
"""
import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """Ring all-reduce (sum), in place: reduce-scatter, then all-gather.

    The flat tensor is cut into ``n`` chunks (``tensor_split``: sizes differ
    by at most one when ``numel % n != 0``). Each of the ``2(n-1)`` steps every
    rank sends one chunk to its right neighbour and receives one from its left.
    After the reduce-scatter rank ``r`` owns the full sum of chunk ``(r+1) % n``;
    the all-gather passes the finished chunks once around the ring.
    """
    rank, n = dist.get_rank(), dist.get_world_size()
    if n == 1:
        return tensor
    right, left = (rank + 1) % n, (rank - 1) % n
    # Work on one contiguous 1-D view so chunks are big contiguous slices that
    # go on the wire without copies; copy back only if the input was strided.
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.reshape(-1).clone()
    chunks = flat.tensor_split(n)
    buf = torch.empty_like(chunks[0])    # chunk 0 is the largest one

    def exchange(send_chunk: torch.Tensor, recv_into: torch.Tensor) -> None:
        # isend + irecv, then wait: every rank sends AND receives in the same
        # step. Two blocking sends facing each other would deadlock (gloo's
        # send waits until the peer has posted the matching recv).
        if send_chunk.numel() == 0 and recv_into.numel() == 0:
            return                       # tiny tensors: n > numel leaves empty chunks
        ops = []
        if send_chunk.numel():
            ops.append(dist.isend(send_chunk, right))
        if recv_into.numel():
            ops.append(dist.irecv(recv_into, left))
        for op in ops:
            op.wait()

    for step in range(n - 1):            # reduce-scatter
        s, r = (rank - step) % n, (rank - step - 1) % n
        incoming = buf[: chunks[r].numel()]
        exchange(chunks[s], incoming)
        chunks[r].add_(incoming)         # accumulate in place, into the tensor itself
    for step in range(n - 1):            # all-gather: receive straight into place
        s, r = (rank - step + 1) % n, (rank - step) % n
        exchange(chunks[s], chunks[r])
    if not tensor.is_contiguous():       # we worked on a copy: write the sums back
        tensor.copy_(flat.view_as(tensor))
    return tensor
