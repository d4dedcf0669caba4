"""One tolerance per kind of comparison the checkers (and their tests) make, each with its reason.

Comparisons of integers (byte counts, schedules, all-reduce inputs of small
integers) are exact and need none.
"""

#: Data parallel vs one process on the full batch (Exercises 4.1, 4.2, 8.1; chapters 4 and 8).
#: fp32 with a different summation order (per-rank partial sums, then an all-reduce, versus
#: one sum over the whole batch) differs by a few ulps (~1e-7 relative) per step; 1e-5 leaves
#: 100x headroom for a few SGD steps, while a real mistake (a missing division, a stale or
#: missing bucket, a frozen parameter that moved) is off by more than 1e-2.
DATA_PARALLEL_RTOL = 1e-5

#: A model split over ranks vs the same model in one process (Exercise 6.1). Every stage runs
#: the same layers on the same full batch in the same order, so the values agree to the last
#: bit on one CPU; 1e-6 only allows for a different matmul kernel on another device, and a
#: missing or wrong gradient moves a parameter by more than 1e-3.
SPLIT_MODEL_RTOL = 1e-6

#: Memory formulas (Exercise 1.1) vs the calculator: the same products and quotients of
#: integers in float64; 1e-9 absorbs only the order of a multiplication and a division.
FORMULA_RTOL = 1e-9

#: Tensor, sequence, context and expert parallelism vs the same module in one process (chapter 12,
#: Exercises 12.1 and 12.3). A contraction split over ranks (partial sums added by an all-reduce or a
#: reduce-scatter) or a softmax merged block by block (online softmax) rounds in another order: a
#: few ulps. Absolute, because the compared gradients of a summed loss reach ~10: measured up to
#: 4e-6 on 2 and 4 ranks (~1e-7 relative). 1e-4 is 25x headroom, while a real mistake (a bias
#: added on every rank, a gradient all-reduced twice, blocks averaged instead of merged) is off by
#: more than 1e-2.
SPLIT_TENSOR_ATOL = 1e-4
