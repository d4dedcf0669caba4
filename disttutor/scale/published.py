"""Published training runs with complete layouts, for checking and calibrating the planner.

Introduced in chapter 13 (at scale). Each :class:`Run` is one row of a named source: the model's
shape, the layout (TP, CP, PP, v, DP and ZeRO stage, micro-batch, recomputation), the hardware preset,
sequence length, global batch in sequences, the metric and its published value -- all **reported**
by ``source``, except what ``notes`` names as derived or assumed. ``role`` says whether a row
calibrates its hardware's efficiency (:mod:`disttutor.scale.calibration`) or is held out to test it.

Sources:

* ``LLAMA3``: "The Llama 3 Herd of Models" (arXiv 2407.21783), Table 4 (§3.3.2); H100 SXM.
* ``TITAN``: torchtitan ``benchmarks/llama3_h100_202412_torchtitan.md`` (Dec 2024), Tables 1 and 3;
  H100 96 GB HBM2e at 500 W; seq 8,192 from ``llama3_8b.toml`` (with ``selective_ac_option = 'op'``).
* ``FOUNDRY``: MosaicML llm-foundry ``scripts/train/benchmarking/README.md``: MPT models, FSDP
  FULL_SHARD (ZeRO-3), flash attention, ``Activation Checkpointing`` True = every block recomputed;
  columns SeqLen, # GPUs, MicroBatchSize, GlobalBatchSize, Throughput (T/s/GPU); the A100 tables say
  "1600 Gbps node-node interconnect" (8 x 200 Gb/s).
* ``MTNLG``: Smith et al., "Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B"
  (arXiv 2201.11990): 280 / 350 / 420 DGX A100 (the A100's memory size is not used), global batch 1,920, iteration 60.1 /
  50.2 / 44.4 s; TP 8 x PP 35 with activation checkpointing.
"""
from __future__ import annotations

from dataclasses import dataclass

from disttutor.scale.layout import Layout
from disttutor.scale.shapes import LLAMA3_8B, LLAMA3_405B, ModelShape

LLAMA3 = "Llama 3 paper (arXiv 2407.21783) Table 4"
TITAN = "torchtitan benchmarks/llama3_h100_202412_torchtitan.md"
FOUNDRY = "llm-foundry scripts/train/benchmarking/README.md"
MTNLG = "MT-NLG paper (arXiv 2201.11990) §2.4"
ROLES = ("calibration", "held-out")


@dataclass(frozen=True)
class Run:
    name: str
    shape: ModelShape
    layout: Layout
    hardware: str          # a key of disttutor.scale.hardware.PRESETS
    seq: int
    global_batch: int      # sequences per step
    metric: str            # tokens/s/GPU, TFLOPs/GPU (model FLOPs), MFU, HFU or step_s
    published: float
    source: str
    role: str = "held-out"
    notes: str = ""
    tag: str = "reported"

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"Run.role must be one of {ROLES}, got {self.role!r}")


def mpt(size: str, layers: int, hidden: int) -> ModelShape:
    """An MPT model of llm-foundry's benchmarks: 4h GELU MLP, tied embeddings, vocabulary 50,368.
    Heads are *assumed* (width 128 a head); they change none of these predictions (flash attention, TP 1)."""
    return ModelShape(f"MPT {size}", layers, hidden, hidden // 128, 50368)


MPT = {"1b": mpt("1B", 24, 2048), "3b": mpt("3B", 32, 2560), "7b": mpt("7B", 32, 4096),
       "13b": mpt("13B", 40, 5120), "30b": mpt("30B", 48, 7168), "70b": mpt("70B", 80, 8192)}
# NumParams reported by FOUNDRY at seq 2048 (learned positions of 2048 x hidden included): checks the shapes
MPT_PARAMS = {"1b": 1315950592, "3b": 2651837440, "7b": 6658859008, "13b": 12853954560, "30b": 29975214080,
              "70b": 64862437376}
MTNLG_530B = ModelShape("MT-NLG 530B", 105, 20480, 128, 51200)


def _foundry(hw: str, size: str, seq: int, gpus: int, mb: int, gbs: int, ac: bool, tps: float,
             role: str = "held-out", gb40: bool = False) -> Run:
    tag = f"{'A100 40GB' if gb40 else hw} {size} seq {seq}, {gpus} GPUs" + (", AC" if ac else "")
    return Run(f"MPT {tag}", MPT[size], Layout(dp=gpus, zero=3, microbatch=mb, checkpointing="full" if ac else "none"),
               hw, seq, gbs, "tokens/s/GPU", tps, FOUNDRY, role,
               "A100 40 GB table (same compute as the 80 GB preset)" if gb40 else "")


def _llama(name: str, lay: Layout, seq: int, gb: int, tflops: float, role: str, notes: str) -> Run:
    return Run(name, LLAMA3_405B, lay, "H100", seq, gb, "TFLOPs/GPU", tflops, LLAMA3, role,
               "interleaving v = 4 and micro-batch 1 assumed; their FSDP (no reshard after forward) modelled as ZeRO-2" + notes)


RUNS: list[Run] = [
    _llama("Llama 3 405B, 8,192 GPUs", Layout(dp=64, tp=8, pp=16, zero=2, v=4), 8192, 2048, 430, "calibration", ""),
    _llama("Llama 3 405B, 16,384 GPUs", Layout(dp=128, tp=8, pp=16, zero=2, v=4), 8192, 2048, 400, "calibration", ""),
    _llama("Llama 3 405B, 16,384 GPUs, 131K", Layout(dp=8, tp=8, pp=16, cp=16, zero=2, v=4), 131072, 128, 380,
           "held-out", "; DP 8 derived (16,384 / (8 x 16 x 16)): Table 4 prints DP 4, which gives 8,192 GPUs"),
    Run("torchtitan 8B FSDP, 8 H100", LLAMA3_8B, Layout(dp=8, zero=3, microbatch=2, checkpointing="selective"),
        "H100", 8192, 16, "tokens/s/GPU", 5762, TITAN, "calibration", "seq 8,192 assumed (llama3_8b.toml)"),
    Run("torchtitan 8B FSDP, 128 H100", LLAMA3_8B, Layout(dp=128, zero=3, microbatch=2, checkpointing="selective"),
        "H100", 8192, 256, "tokens/s/GPU", 5605, TITAN, "held-out", "seq 8,192 assumed (llama3_8b.toml)"),
    # llm-foundry, H100 80GB BF16 table
    _foundry("H100", "7b", 2048, 8, 6, 48, False, 10643, "calibration"),
    _foundry("H100", "13b", 2048, 64, 2, 128, False, 4800, "calibration"),
    _foundry("H100", "30b", 2048, 32, 14, 1344, True, 2308, "calibration"),
    _foundry("H100", "70b", 2048, 64, 8, 2048, True, 1039),
    _foundry("H100", "7b", 8192, 8, 8, 128, True, 6935),
    _foundry("H100", "13b", 4096, 8, 10, 240, True, 4717),
    _foundry("H100", "30b", 8192, 8, 1, 168, True, 1384),
    _foundry("H100", "3b", 2048, 64, 6, 1152, False, 22525),
    _foundry("H100", "1b", 2048, 8, 14, 112, False, 45455),
    _foundry("H100", "7b", 65536, 8, 1, 16, True, 1956),
    # llm-foundry, A100 80GB table
    _foundry("A100", "7b", 2048, 8, 6, 96, False, 4641, "calibration"),
    _foundry("A100", "13b", 4096, 8, 10, 240, True, 2060, "calibration"),
    _foundry("A100", "70b", 2048, 64, 8, 2048, True, 410, "calibration"),
    _foundry("A100", "30b", 2048, 8, 3, 504, True, 916),
    _foundry("A100", "13b", 2048, 8, 2, 48, False, 2262),
    _foundry("A100", "70b", 2048, 32, 2, 1024, True, 373),
    _foundry("A100", "7b", 8192, 8, 8, 128, True, 3206),
    _foundry("A100", "30b", 8192, 8, 1, 168, True, 574),
    _foundry("A100", "3b", 2048, 8, 10, 160, False, 10811),
    _foundry("A100", "1b", 2048, 8, 14, 448, False, 20513),
    _foundry("A100", "7b", 65536, 8, 1, 16, True, 1013),
    _foundry("A100", "13b", 32768, 8, 1, 24, True, 1016),
    # llm-foundry, A100 40GB table (multi-node)
    _foundry("A100", "7b", 2048, 128, 18, 2304, True, 3623, gb40=True),
    _foundry("A100", "13b", 2048, 128, 16, 2048, True, 1972, gb40=True),
    _foundry("A100", "30b", 2048, 128, 6, 768, True, 865, gb40=True),
    _foundry("A100", "70b", 2048, 128, 4, 512, True, 376, gb40=True),
    # MT-NLG 530B on DGX A100: TP 8 x PP 35 x DP 8 / 10 / 12, micro-batch 1
    *(Run(f"MT-NLG 530B, {n:,} A100", MTNLG_530B, Layout(dp=n // 280, tp=8, pp=35, zero=1, checkpointing="full"),
          "A100", 2048, 1920, "step_s", t, MTNLG, role,
          "DGX A100 (memory size not used: same compute as the preset); vocabulary 51,200 and ZeRO-1 assumed; "
          "micro-batch 1 assumed")
      for n, t, role in ((2240, 60.1, "calibration"), (2800, 50.2, "held-out"), (3360, 44.4, "held-out"))),
]

# Peak memory per GPU (GiB, the allocator's peak reserved, max over ranks), torchtitan's H100 tables 1, 3, 4, 5
_FULL = "Float8 + torch.compile + AsyncTP (not modelled); "
MEMORY_RUNS: list[Run] = [
    Run("torchtitan 8B FSDP, 8 H100", LLAMA3_8B, Layout(dp=8, zero=3, microbatch=2, checkpointing="selective"),
        "H100", 8192, 16, "peak GiB", 82.4, TITAN + " Table 1", notes="seq 8,192 assumed (llama3_8b.toml)"),
    Run("torchtitan 8B FSDP, 128 H100", LLAMA3_8B, Layout(dp=128, zero=3, microbatch=2, checkpointing="selective"),
        "H100", 8192, 256, "peak GiB", 67.0, TITAN + " Table 3", notes="seq 8,192 assumed (llama3_8b.toml)"),
    Run("torchtitan 405B, FSDP 8 x TP 8 x PP 8, 1F1B", LLAMA3_405B,
        Layout(dp=8, tp=8, pp=8, zero=3, microbatch=4, checkpointing="full"), "H100", 8192, 256, "peak GiB", 82.5,
        TITAN + " Table 5", notes=_FULL + "seq 8,192 assumed; 8 micro-batches (torchtitan's default: one per stage) "
        "assumed, so micro-batch 4"),
    Run("torchtitan 405B, FSDP 8 x TP 8 x PP 8, interleaved 1F1B", LLAMA3_405B,
        Layout(dp=8, tp=8, pp=8, v=2, zero=3, microbatch=2, checkpointing="full"), "H100", 8192, 256, "peak GiB",
        72.7, TITAN + " Table 5", notes=_FULL + "seq 8,192 assumed; 2 stages a rank and 16 micro-batches (one per "
        "stage) assumed, so micro-batch 2"),
]
