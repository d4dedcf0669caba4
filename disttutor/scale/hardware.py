"""Hardware as data: every constant carries its value, its unit, how we know it, and its source.

Introduced in chapter 13 (at scale). A constant is

* **reported** -- a figure printed by its source (a vendor sheet, a paper), quoted as printed;
* **derived** -- computed here from reported figures (the formula is in ``source``);
* **measured** -- fitted on the learner's machine by :mod:`disttutor.scale.fit`;
* **assumed** -- an order of magnitude with no published source we could confirm; the chapter
  says so wherever it matters.

The chapter prints these tags next to every number it derives from them. Pure Python.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

TAGS = ("reported", "derived", "measured", "assumed")


@dataclass(frozen=True)
class Constant:
    value: float
    unit: str
    tag: str
    source: str

    def __post_init__(self):
        if self.tag not in TAGS:
            raise ValueError(f"tag must be one of {TAGS}, got {self.tag!r}")


@dataclass(frozen=True)
class Hardware:
    """One accelerator type in a cluster: compute, memory, and the two network levels.

    ``intra_*`` is the link inside a node (NVLink here, shared memory on a laptop), ``inter_*`` the
    link between nodes (one NIC per GPU). Bandwidths are *bus* bandwidths in nccl-tests' sense:
    bytes per second per device, one direction, so ``t = alpha + S * factor(n) / bandwidth``
    (:mod:`disttutor.scale.costmodel`).
    """

    name: str
    peak_flops: Constant          # dense bf16 matmul FLOP/s per device (fp32 on a CPU)
    memory_bytes: Constant        # device memory
    gpus_per_node: int
    intra_bw: Constant
    inter_bw: Constant
    intra_alpha: Constant
    inter_alpha: Constant
    notes: tuple[str, ...] = field(default=())
    # the fraction of peak a step's compute runs at, calibrated on named published runs
    # (disttutor.scale.calibration); None: 1.0 (every matmul at peak)
    efficiency: Constant | None = None

    def constants(self) -> dict[str, Constant]:
        return {k: getattr(self, k) for k in ("peak_flops", "memory_bytes", "intra_bw", "inter_bw",
                                               "intra_alpha", "inter_alpha")}

    def table(self) -> list[tuple[str, str, str, str]]:
        """(name, value with unit, tag, source) rows, for the chapter's tables."""
        return [(k, f"{c.value:.4g} {c.unit}", c.tag, c.source) for k, c in self.constants().items()]


HOPPER_PEAK = Constant(989.4e12, "FLOP/s", "reported",
                       "NVIDIA Hopper (H100 SXM5) specifications: BF16 Tensor Core 989.4 TFLOPS dense "
                       "(the data sheet's 1,979 TFLOPS is with 2:4 sparsity)")
NVLINK4 = Constant(450e9, "B/s", "derived",
                   "NVIDIA: NVLink 4 is 900 GB/s per H100/H200 GPU, both directions together; "
                   "one direction = 900/2 = 450 GB/s")
NIC_400G = Constant(50e9, "B/s", "derived",
                    "400 Gb/s per GPU (Llama 3 paper §3.3.1: RoCE and InfiniBand, 400 Gbps between GPUs; "
                    "torchtitan's Llama 3 H100 benchmark of December 2024, formerly its docs/performance.md: 400 Gb/s per GPU) / 8 bits = 50 GB/s line rate")
# Ampere (A100) and memory bandwidths (the A100 preset below, the chapters' worked problems).
AMPERE_PEAK = Constant(312e12, "FLOP/s", "reported",
                       "NVIDIA A100 Tensor Core GPU data sheet: BF16 Tensor Core 312 TFLOPS dense "
                       "(624 TFLOPS is with 2:4 sparsity)")
NVLINK3 = Constant(300e9, "B/s", "derived",
                   "NVIDIA A100 data sheet: NVLink 600 GB/s per GPU, both directions together; "
                   "one direction = 600/2 = 300 GB/s")
A100_MEMORY = Constant(80e9, "B", "reported", "NVIDIA A100 data sheet: A100 80GB, HBM2e")
A100_HBM_BW = Constant(2.039e12, "B/s", "reported", "NVIDIA A100 data sheet: A100 80GB SXM, 2,039 GB/s HBM2e")
H100_HBM_BW = Constant(3.35e12, "B/s", "reported", "NVIDIA H100 SXM data sheet: 3.35 TB/s HBM3")
NIC_200G = Constant(25e9, "B/s", "derived",
                    "NVIDIA DGX A100 user guide: eight 200 Gb/s HDR InfiniBand ports for the cluster network, "
                    "one per GPU; 200 Gb/s / 8 bits = 25 GB/s line rate")
# No published latency of a single NCCL call could be confirmed for these systems: an assumption,
# of the order nccl-tests prints for small messages (tens of microseconds), labelled as such.
ALPHA_NVLINK = Constant(10e-6, "s", "assumed", "order of magnitude, not a confirmed published figure")
ALPHA_NET = Constant(30e-6, "s", "assumed", "order of magnitude, not a confirmed published figure")

H100 = Hardware(
    name="H100 SXM (8 per node, 400 Gb/s NIC per GPU)",
    peak_flops=HOPPER_PEAK,
    memory_bytes=Constant(80e9, "B", "reported", "NVIDIA H100 SXM data sheet: 80 GB HBM3"),
    gpus_per_node=8, intra_bw=NVLINK4, inter_bw=NIC_400G, intra_alpha=ALPHA_NVLINK, inter_alpha=ALPHA_NET,
    notes=("torchtitan's H100s (its Llama 3 H100 benchmark of December 2024) were 96 GB HBM2e parts at 500 W, whose peak lies "
           "'between SXM and NVL' by torchtitan's own note: MFU against the SXM peak reads low.",),
    efficiency=Constant(0.485, "of peak", "derived",
                        "geometric mean of published/predicted-at-peak over the H100 calibration rows of "
                        "disttutor.scale.published: Llama 3 405B on 8,192 and 16,384 GPUs (Table 4), torchtitan 8B "
                        "FSDP on 8 H100, MPT 7B (8 GPUs), 13B (64) and 30B (32, AC) of llm-foundry's H100 table"))

H200 = replace(
    H100, name="H200 SXM (8 per node, 400 Gb/s NIC per GPU)",
    memory_bytes=Constant(141e9, "B", "reported", "NVIDIA H200 data sheet: 141 GB HBM3e"),
    notes=("Same Hopper compute and NVLink 4 as H100 (same peak); more and faster memory.",),
    efficiency=Constant(0.485, "of peak", "assumed",
                        "the H100 preset's calibration (same Hopper compute and NVLink 4); no H200 run calibrates it"))

A100 = Hardware(
    name="A100 SXM 80GB (8 per node, 200 Gb/s HDR NIC per GPU)",
    peak_flops=AMPERE_PEAK, memory_bytes=A100_MEMORY, gpus_per_node=8, intra_bw=NVLINK3, inter_bw=NIC_200G,
    intra_alpha=ALPHA_NVLINK, inter_alpha=ALPHA_NET,
    notes=("DGX A100: NVLink 3 through NVSwitch inside a node, one 200 Gb/s HDR InfiniBand port per GPU.",),
    efficiency=Constant(0.645, "of peak", "derived",
                        "geometric mean of published/predicted-at-peak over the A100 calibration rows of "
                        "disttutor.scale.published: MPT 7B (8 GPUs), 13B (8, AC, seq 4,096) and 70B (64, AC) of "
                        "llm-foundry's A100 80GB table, MT-NLG 530B on 2,240 A100 (iteration time)"))

PRESETS: dict[str, Hardware] = {"H100": H100, "H200": H200, "A100": A100}


def local_machine(peak_flops: float, intra_bw: float, intra_alpha: float, memory_bytes: float,
                  cores: int, how: str = "fitted by disttutor.scale.fit on this machine") -> Hardware:
    """This machine as a 'cluster' of one node with ``cores`` ranks: every constant *measured*."""
    m = lambda v, u: Constant(v, u, "measured", how)  # noqa: E731
    return Hardware(name=f"this machine ({cores} CPU ranks, gloo)", peak_flops=m(peak_flops, "FLOP/s"),
                    memory_bytes=m(memory_bytes, "B"), gpus_per_node=cores, intra_bw=m(intra_bw, "B/s"),
                    inter_bw=m(intra_bw, "B/s"), intra_alpha=m(intra_alpha, "s"), inter_alpha=m(intra_alpha, "s"))
