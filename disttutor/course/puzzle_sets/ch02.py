"""Chapter 2's puzzles: what each collective leaves on a rank, and who shares a group.

Each runs for real on 4 gloo ranks in the tests (``disttutor.programs.puzzle_check``); ``values``
computes the same answer in plain Python, element by element.
"""
from __future__ import annotations

from disttutor.course.puzzle_sets._code import WORLD
from disttutor.course.puzzles import Puzzle, register


def _z1() -> dict:
    n, rank, per = WORLD, 2, 8 // WORLD
    mine = range(rank * per, (rank + 1) * per)        # the positions of chunk `rank`
    return {"n": n, "rank": rank, "first": rank * per, "last": (rank + 1) * per - 1,
            "answer": [sum(k + 10 * r for r in range(n)) for k in mine],
            "own": [k + 10 * rank for k in mine],
            "all_reduce": [sum(k + 10 * r for r in range(n)) for k in range(8)]}


def _z2() -> dict:
    n, rank = WORLD, 3
    return {"n": n, "rank": rank, "answer": [v for r in range(n) for v in (r, r * r)],
            "interleaved": [r for r in range(n)] + [r * r for r in range(n)]}


def _z3() -> dict:
    n, src = WORLD, 2
    return {"n": n, "src": src, "val": src + 1, "answer": n * (src + 1), "no_bcast": sum(r + 1 for r in range(n)),
            "bcast_only": src + 1}


def _z4() -> dict:
    n, rank = WORLD, 1
    return {"n": n, "rank": rank, "answer": [rank + 4 * r for r in range(n)],
            "own": [4 * rank + k for k in range(n)]}


def _z5() -> dict:
    n, rank = WORLD, 3
    group = [r for r in range(n) if r // 2 == rank // 2]  # consecutive pairs: [0, 1] and [2, 3]
    parity = [r for r in range(n) if r % 2 == rank % 2]   # the evens/odds split of the script above
    return {"rank": rank, "group": group, "terms": " + ".join(str(r * r) for r in group),
            "answer": sum(r * r for r in group), "world": sum(r * r for r in range(n)),
            "parity": sum(r * r for r in parity)}


register(
    Puzzle(
        "2.z1", "collective",
        "{n} ranks each hold 8 numbers. After `reduce_scatter_tensor`, what does rank {rank} hold in `out`?",
        "Reduce-scatter cuts every rank's input into {n} chunks of 2 and gives chunk *r* to rank *r*, "
        "**summed over the ranks**. Rank {rank} gets positions {first}-{last}, each summed over the {n} "
        "ranks: **{answer}**.",
        _z1, "answer",
        code="inp = torch.arange(8.) + 10 * rank      # rank r: 10r, 10r+1, ..., 10r+7\n"
             "out = torch.empty(2)\n"
             "dist.reduce_scatter_tensor(out, inp)     # op=SUM",
        expr="out", reads=lambda per: per[2],
        wrong={"own": "That is rank {rank}'s own chunk, untouched: reduce-scatter *reduces* first -- every "
                      "position of the chunk is summed over all {n} ranks.",
               "all_reduce": "That is all-reduce's result, all 8 sums. Reduce-scatter leaves each rank only "
                             "its own chunk of them (2 numbers)."}),
    Puzzle(
        "2.z2", "collective",
        "On {n} ranks, after `all_gather_into_tensor`, what does rank {rank} hold in `out`?",
        "All-gather puts rank *r*'s whole tensor at positions 2r and 2r+1 of `out`, rank after rank, and "
        "every rank ends with the same `out`: **{answer}**.",
        _z2, "answer",
        code="x = torch.tensor([rank, rank * rank], dtype=torch.float)\n"
             "out = torch.empty(2 * world)\n"
             "dist.all_gather_into_tensor(out, x)",
        expr="out", reads=lambda per: per[3],
        wrong={"interleaved": "The output is laid out *rank after rank*: rank 0's 2 numbers, then rank 1's, "
                              "and so on -- not all first elements, then all second ones."}),
    Puzzle(
        "2.z3", "collective",
        "{n} ranks broadcast from rank {src}, then all-reduce. What does rank 0 hold at the end?",
        "`broadcast` overwrites every rank's `x` with rank {src}'s value, {val}. The all-reduce then sums "
        "{n} copies of it: {n} × {val} = **{answer}**.",
        _z3, "answer",
        code="x = torch.tensor([rank + 1.0])\n"
             "dist.broadcast(x, src=2)\n"
             "dist.all_reduce(x)",
        expr="x.item()", reads=lambda per: per[0],
        wrong={"no_bcast": "That sums every rank's starting value; but the broadcast ran first and replaced "
                           "each `x` with rank {src}'s {val}.",
               "bcast_only": "That is the value after the broadcast; the all-reduce then sums it over the "
                             "{n} ranks."}),
    Puzzle(
        "2.z4", "collective",
        "On {n} ranks, after `all_to_all_single`, what does rank {rank} hold in `out`?",
        "All-to-all cuts each rank's tensor into {n} chunks and sends chunk *j* to rank *j*. Rank {rank} "
        "receives chunk {rank} of every rank, in rank order: **{answer}** -- a transpose of ranks and chunks.",
        _z4, "answer",
        code="x = torch.arange(4.) + 4 * rank          # rank r: 4r, 4r+1, 4r+2, 4r+3\n"
             "out = torch.empty(4)\n"
             "dist.all_to_all_single(out, x)",
        expr="out", reads=lambda per: per[1],
        wrong={"own": "That is rank {rank}'s own input. Rank {rank} keeps only its own chunk {rank} and receives "
                      "chunk {rank} of each other rank."}),
    Puzzle(
        "2.z5", "group",
        "Every rank creates two groups, then all-reduces in the one it belongs to. What does rank {rank} "
        "hold at the end?",
        "Rank {rank} is in `high` = ranks {group}, so it sums their squares: {terms} = **{answer}**. Every rank "
        "calls `new_group` for *both* groups, in the same order, even the one it is not in.",
        _z5, "answer",
        code="low, high = dist.new_group([0, 1]), dist.new_group([2, 3])\n"
             "x = torch.tensor([float(rank * rank)])\n"
             "dist.all_reduce(x, group=high if rank >= 2 else low)",
        expr="x.item()", reads=lambda per: per[3],
        wrong={"world": "That is the sum over the whole world; `group=` limits the all-reduce to the ranks "
                        "{group}.",
               "parity": "That is the odd ranks' group of the script above; here the groups are consecutive "
                         "ranks, and rank {rank} shares one with the ranks {group}."}),
)
