"""Introduced in chapter 8: what mixed precision gives on GPUs, as published (*reported*, with the source).

A CPU course cannot measure tensor cores, so chapter 8 quotes a published measurement of the same
experiment -- fp32 (or TF32) training against mixed precision, same model, same GPU -- and
derives the speed-up from the two printed throughputs. Every row is quoted as printed; nothing
here is typed in without its source.
"""
from __future__ import annotations

from dataclasses import dataclass

_RN50 = ("NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md, "
         "https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/ConvNets/resnet50v1.5")


@dataclass(frozen=True)
class Reported:
    gpu: str
    what: str            # the experiment: model, training or inference, batch
    full: str            # the full-precision dtype of the comparison (fp32, or TF32 on Ampere)
    full_value: float
    mixed_value: float
    unit: str
    source: str          # document and section the two figures are printed in

    @property
    def speedup(self) -> float:
        """*derived*: mixed-precision throughput over full precision."""
        return self.mixed_value / self.full_value


ROWS = (
    Reported("1x A100 80GB", "ResNet-50 v1.5 training", "TF32", 938, 2470, "img/s",
             _RN50 + ", 'Training performance: NVIDIA DGX A100 (8x A100 80GB)', pytorch-21.03 NGC container"),
    Reported("1x V100 16GB", "ResNet-50 v1.5 training", "FP32", 367, 1200, "img/s",
             _RN50 + ", 'Training performance: NVIDIA DGX-1 16GB (8x V100 16GB)', pytorch-21.03 NGC container"),
    # The small-work case, the GPU's version of this chapter's CPU result: batch 1 is too little work
    # for the tensor cores to repay the casts and launches.
    Reported("1x V100 16GB", "ResNet-50 v1.5 inference, batch 1", "FP32", 96, 78, "img/s",
             _RN50 + ", 'Inference performance: NVIDIA DGX-1 (1x V100 16GB)', pytorch-21.03 NGC container"),
    Reported("1x V100 16GB", "ResNet-50 v1.5 inference, batch 256", "FP32", 1261, 3382, "img/s",
             _RN50 + ", 'Inference performance: NVIDIA DGX-1 (1x V100 16GB)', pytorch-21.03 NGC container"),
)


def table() -> list[dict]:
    """The rows for a chapter table, each figure tagged."""
    return [{"GPU": r.gpu, "experiment": r.what, "full precision (reported)": f"{r.full} {r.full_value:g} {r.unit}",
             "mixed precision (reported)": f"{r.mixed_value:g} {r.unit}", "speed-up (derived)": f"{r.speedup:.2f}x"}
            for r in ROWS]
