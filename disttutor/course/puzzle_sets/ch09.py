"""Chapter 9's puzzles: a collective only some ranks call, and collectives called in another order.

Both run for real on 4 gloo ranks in the tests; 9.z1 in a group with a short timeout, which stands
for "forever".
"""
from __future__ import annotations

from disttutor.course.puzzle_sets._code import WORLD, waiting
from disttutor.course.puzzles import Puzzle, register


def _z1() -> dict:
    return {"n": WORLD, "answer": [0], "others": list(range(1, WORLD)), "all": list(range(WORLD))}


def _z2() -> dict:
    a = [r + 1 for r in range(WORLD)]
    b = [10 * (r + 1) for r in range(WORLD)]
    return {"n": WORLD, "a0": a[0], "b_rest": " + ".join(str(v) for v in b[1:]), "answer": a[0] + sum(b[1:]),
            "meant": sum(a)}


register(
    Puzzle(
        "9.z1", "deadlock",
        "Only rank 0 logs, so only rank 0 averages the loss. This is the script's last collective. On {n} "
        "ranks, which ranks wait forever? (`[]` if none.)",
        "A collective completes only when every rank of its group has called it. Ranks 1-3 skip the "
        "`if` and go on; rank 0 waits in `all_reduce` for partners that never come: **{answer}**. Inside a "
        "loop it is worse: the others' *next* collective meets rank 0's: wrong tensors summed (puzzle "
        "9.z2), or an error. Every rank calls every collective; only rank 0 prints.",
        _z1, "answer",
        code="loss = torch.tensor([float(rank)])\n"
             "if rank == 0:\n"
             "    dist.all_reduce(loss)                 # \"only rank 0 needs the mean\"\n"
             "    print(loss.item() / dist.get_world_size())",
        expr="None", reads=waiting, hangs=True,
        wrong={"others": "Ranks 1-3 never enter the `all_reduce`: nothing stops them here. The one *inside* "
                         "the collective is the one that waits.",
               "all": "Ranks 1-3 run past the `if`: only the rank inside the collective waits at this line."}),
    Puzzle(
        "9.z2", "collective",
        "Rank 0 all-reduces `a` then `b`; the other ranks `b` then `a`. Same shapes, no error. What does "
        "rank 0 hold in `a` at the end?",
        "Collectives are matched by **order**, not by name: rank 0's first call (its `a` = {a0}) is summed "
        "with the others' first calls (their `b`): {a0} + {b_rest} = **{answer}**. No error, no hang -- a "
        "silently wrong number. Even `TORCH_DISTRIBUTED_DEBUG=DETAIL` lets it pass: it compares each call's "
        "operation, shapes and dtypes across the ranks, and here both calls are all-reduces of one float.",
        _z2, "answer",
        code="a = torch.tensor([rank + 1.0])           # 1, 2, 3, 4\n"
             "b = torch.tensor([10.0 * (rank + 1)])    # 10, 20, 30, 40\n"
             "if rank == 0:\n"
             "    dist.all_reduce(a); dist.all_reduce(b)\n"
             "else:\n"
             "    dist.all_reduce(b); dist.all_reduce(a)",
        expr="a.item()", reads=lambda per: per[0],
        wrong={"meant": "That is what was meant. But the ranks' calls meet by their order: rank 0's first "
                        "all-reduce meets the others' first, which is their `b`."}),
)
