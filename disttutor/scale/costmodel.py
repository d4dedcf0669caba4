"""The alpha-beta-gamma cost model: how long a collective or a matmul takes.

Introduced in chapter 13 (at scale). Three constants describe a machine:

* **alpha** (latency, s): the fixed cost of one call, whatever its size;
* **beta** (s/byte), written here as its inverse, the **bus bandwidth** ``B = 1/beta`` (bytes/s);
* **gamma** (FLOP/s): the sustained matmul rate.

A collective over ``n`` ranks on ``S`` bytes takes ``t = alpha + factor(n) * S / B``. The factor
is nccl-tests' bus-bandwidth correction (doc/PERFORMANCE.md), the number of bytes each rank must
move per byte of data, whatever the algorithm (ring or tree) as long as it is built from
point-to-point sends:

==============  ==================  =================================================
collective      factor(n)           S is
==============  ==================  =================================================
all-reduce      2(n-1)/n            the tensor each rank holds
all-gather      (n-1)/n             the *gathered* (output) tensor
reduce-scatter  (n-1)/n             the *input* (full) tensor
send/recv       1                   the message
==============  ==================  =================================================

so ``busbw = algbw * factor(n)`` with ``algbw = S/t``. Compute takes ``flops / gamma``.
Pure Python: the chapter's planner evaluates millions of these.
"""
from __future__ import annotations

from dataclasses import dataclass

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "send_recv")


def bus_factor(op: str, n: int) -> float:
    """Bytes each rank moves per byte of ``S`` (nccl-tests' busbw correction)."""
    if op not in COLLECTIVES:
        raise ValueError(f"op must be one of {COLLECTIVES}, got {op!r}")
    if n < 1 or int(n) != n:
        raise ValueError(f"n (ranks) must be a positive integer, got {n!r}")
    if op == "send_recv":
        return 1.0
    if n == 1:
        return 0.0  # nothing to move: one rank already has everything
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1) / n


def busbw(op: str, nbytes: float, seconds: float, n: int) -> float:
    """nccl-tests' bus bandwidth of one measured call: ``S/t * factor(n)``."""
    return nbytes / seconds * bus_factor(op, n)


@dataclass(frozen=True)
class Link:
    """alpha (s per call) and bus bandwidth (bytes/s) of one collective on one kind of link."""

    alpha: float
    bandwidth: float

    def __post_init__(self):
        if self.alpha < 0 or not self.bandwidth > 0:
            raise ValueError(f"need alpha >= 0 and bandwidth > 0, got {self.alpha}, {self.bandwidth}")

    @property
    def beta(self) -> float:
        return 1.0 / self.bandwidth


def collective_time(op: str, nbytes: float, n: int, link: Link) -> float:
    """``alpha + factor(n) * S / B``; zero for a group of one (no call is made)."""
    if n == 1 and op != "send_recv":
        return 0.0
    return link.alpha + bus_factor(op, n) * nbytes / link.bandwidth


def compute_time(flops: float, gamma: float) -> float:
    if not gamma > 0:
        raise ValueError(f"gamma (FLOP/s) must be > 0, got {gamma}")
    return flops / gamma


def linear_flops(batch: int, d_in: int, d_out: int) -> tuple[float, float]:
    """(forward, backward) FLOPs of one ``nn.Linear`` on ``batch`` rows: ``2 b i o`` and twice that
    (one matmul for the input's gradient, one for the weight's)."""
    f = 2.0 * batch * d_in * d_out
    return f, 2.0 * f


def mlp_step_flops(batch: int, dims: list[int] | tuple[int, ...]) -> float:
    """Forward + backward FLOPs of an MLP with layer widths ``dims`` (``6 b * sum(i*o)``)."""
    return sum(sum(linear_flops(batch, a, b)) for a, b in zip(dims[:-1], dims[1:]))


@dataclass(frozen=True)
class Machine:
    """Fitted constants of one machine: a :class:`Link` per collective and gamma."""

    links: dict
    gamma: float
    n: int  # the ranks the links were fitted with

    def t(self, op: str, nbytes: float, n: int | None = None) -> float:
        return collective_time(op, nbytes, self.n if n is None else n, self.links[op])

    def compute(self, flops: float) -> float:
        return compute_time(flops, self.gamma)
