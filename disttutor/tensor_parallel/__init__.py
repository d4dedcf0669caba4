"""Tensor, sequence, context and expert parallelism (chapter 12), one concept per module.

* :mod:`~disttutor.tensor_parallel.counting` -- record every collective a piece of code calls;
* :mod:`~disttutor.tensor_parallel.models` -- the small MLP, attention and block every part splits;
* :mod:`~disttutor.tensor_parallel.tp` -- Megatron tensor parallelism from scratch (f and g);
* :mod:`~disttutor.tensor_parallel.sp` -- sequence parallelism: all-gather / reduce-scatter on the sequence;
* :mod:`~disttutor.tensor_parallel.ring_attention` -- context parallelism: ring attention, online softmax;
* :mod:`~disttutor.tensor_parallel.moe` -- expert parallelism: top-k routing, all-to-all dispatch/combine;
* :mod:`~disttutor.tensor_parallel.placements` -- which rank holds which element under a DTensor placement.
"""
