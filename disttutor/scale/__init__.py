"""Chapter 13 (at scale): a cost model fitted on this machine, hardware presets, a planner, failures.

Entry point: :func:`disttutor.scale.planner.predict` (re-exported here as ``predict``), which takes a
model shape (:mod:`~disttutor.scale.shapes`), a :class:`~disttutor.scale.planner.Layout`, a hardware
preset (:mod:`~disttutor.scale.hardware`) or constants, the sequence length and the global batch,
and returns a :class:`~disttutor.scale.planner.Prediction`: step time split into compute / exposed
communication / bubble, tokens/s/GPU, MFU and memory per GPU.

Modules, one concept each: ``hardware`` (presets as data, with sources), ``costmodel`` (alpha-beta-gamma),
``fit`` (fitting them from measurements), ``local`` (predicting the course's own runs), ``shapes``
(parameters and FLOPs of a Transformer), ``layout`` (a parallel layout, checked), ``memory`` (memory per
GPU at the peak), ``planner`` (step time, ranking layouts), ``published`` (published runs with their
sources), ``calibration`` (each preset's efficiency, every run's residual), ``failures`` (MTBF,
Young-Daly). All pure Python: no torch import.
"""
from disttutor.scale.planner import Layout, Prediction, predict, rank_layouts, rules  # noqa: F401
