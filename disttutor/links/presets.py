"""Link presets: latency ``alpha`` (s) and bandwidth ``beta`` (bytes/s), each with its source.

Introduced in chapter 8 (performance; chapter 2 uses it for ring vs naive). A figure is tagged like
:mod:`disttutor.scale.hardware`'s constants: *reported* (printed by its source), *derived* (computed
here from a reported figure; the formula is in the source text) or *assumed* (no published figure
we could confirm; said so). Bandwidths are one direction of one link, line rate: a real stack
reaches somewhat less, so an emulated link is if anything a little *faster* than the real one.

``alpha`` is the latency of one message (one ring step), not of a whole collective: a ring
all-reduce on ``n`` ranks pays it ``2 (n-1)`` times (:meth:`Link.all_reduce_time`).

Pure Python: the kernel reads these for captions, the ranks for the emulation.
"""
from __future__ import annotations

from dataclasses import dataclass

from disttutor.scale.hardware import NVLINK4, Constant

__all__ = ["Link", "PRESETS", "preset", "custom"]


@dataclass(frozen=True)
class Link:
    name: str
    alpha: Constant   # seconds per message
    beta: Constant    # bytes per second, one direction

    def message_time(self, nbytes: int) -> float:
        """Seconds one message of ``nbytes`` occupies the link: ``alpha + nbytes / beta``."""
        return self.alpha.value + nbytes / self.beta.value

    def all_reduce_time(self, nbytes: int, world: int) -> float:
        """A bandwidth-optimal (ring) all-reduce of ``nbytes`` per rank on ``world`` ranks:
        ``2 (n-1)`` steps, each one message of ``nbytes / n`` -- ``2(n-1) alpha + 2(n-1)/n * nbytes / beta``."""
        if world < 2:
            return 0.0
        steps = 2 * (world - 1)
        return steps * self.alpha.value + steps / world * nbytes / self.beta.value

    def caption(self) -> str:
        """The words every figure or table that uses the link carries."""
        return (f"emulated link: {self.name} (alpha={self.alpha.value * 1e6:.3g} us, "
                f"beta={self.beta.value / 1e9:.4g} GB/s)")

    def sources(self) -> list[tuple[str, str, str, str]]:
        """(figure, value, tag, source) rows for a table."""
        return [("alpha", f"{self.alpha.value * 1e6:.3g} us", self.alpha.tag, self.alpha.source),
                ("beta", f"{self.beta.value / 1e9:.4g} GB/s", self.beta.tag, self.beta.source)]


_TCP_ALPHA = Constant(20e-6, "s", "reported",
                      "Hurwitz & Feng, 'Initial end-to-end performance evaluation of 10-Gigabit Ethernet', "
                      "IEEE Hot Interconnects 11 (2003): 20 us end-to-end latency between applications over TCP")
# The TCP latency is mostly host software (the kernel's stack, interrupts), not the wire: we keep the
# measured 10 GbE figure for the other Ethernet speeds instead of inventing one.
_TCP_ALPHA_KEPT = Constant(20e-6, "s", "assumed",
                           "the 10 GbE TCP latency of Hurwitz & Feng (2003) kept: TCP latency is mostly "
                           "host software, not line rate; no published figure for this speed confirmed")
# NCCL's own latency model (src/graph/tuning.cc, hwLatencies, Ring / Simple protocol, in us per
# ring step): the numbers NCCL's tuner uses to pick its algorithm, read from NVIDIA/nccl's source.
_NCCL_NET = Constant(14e-6, "s", "reported",
                     "NCCL src/graph/tuning.cc: hwLatencies[NET][Ring][Simple] = 14.0 us per step")
_NCCL_NVLINK = Constant(3.4e-6, "s", "reported",
                        "NCCL src/graph/tuning.cc: hwLatencies[NVLINK][Ring][Simple] = 3.4 us per step")


def _line_rate(gbit: float, standard: str) -> Constant:
    return Constant(gbit * 1e9 / 8, "B/s", "derived",
                    f"{standard}: {gbit:g} Gb/s line rate (reported) / 8 bits per byte")


PRESETS: dict[str, Link] = {
    "1GbE": Link("1 GbE", _TCP_ALPHA_KEPT, _line_rate(1, "IEEE 802.3ab (1000BASE-T)")),
    "10GbE": Link("10 GbE", _TCP_ALPHA, _line_rate(10, "IEEE 802.3ae (10 Gigabit Ethernet)")),
    "25GbE": Link("25 GbE", _TCP_ALPHA_KEPT, _line_rate(25, "IEEE 802.3by (25 Gigabit Ethernet)")),
    "IB100": Link("100 Gb/s InfiniBand (EDR 4x)", _NCCL_NET,
                  _line_rate(100, "InfiniBand Trade Association, EDR 4x link")),
    "NVLink": Link("NVLink 4 (H100, one direction)", _NCCL_NVLINK, NVLINK4),
}


def preset(name: str) -> Link:
    """The preset called ``name``, or a one-line error listing the ones there are."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown link {name!r}; choose from {', '.join(PRESETS)}") from None


def custom(alpha_s: float, beta_bytes_s: float, why: str) -> Link:
    """A link with chosen figures (tagged *assumed*, with ``why``): tests and probes use these."""
    if alpha_s < 0 or beta_bytes_s <= 0:
        raise ValueError(f"a link needs alpha >= 0 and beta > 0, got alpha={alpha_s}, beta={beta_bytes_s}")
    return Link(f"custom ({why})", Constant(alpha_s, "s", "assumed", why),
                Constant(beta_bytes_s, "B/s", "assumed", why))
