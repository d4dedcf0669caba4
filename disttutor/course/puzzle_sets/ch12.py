"""Chapter 12's puzzles: DTensor placements on a mesh, tensor parallelism's collectives, MoE dispatch.

All four run for real on 4 gloo ranks in the tests.
"""
from __future__ import annotations

from disttutor.course.puzzle_sets._code import WORLD
from disttutor.course.puzzles import Puzzle, register

# each rank's 6 tokens: the expert (= the rank that holds it) each one is routed to
ROUTE = [[0, 0, 1, 3, 3, 3], [1, 1, 1, 2, 0, 3], [3, 3, 0, 0, 1, 2], [2, 3, 3, 3, 3, 0]]


def _z1() -> dict:
    n, rank, items = WORLD, 3, 10
    size = -(-items // n)
    q, r = divmod(items, n)
    start = [sum(q + (1 if i < r else 0) for i in range(k)) for k in range(n + 1)]
    return {"n": n, "rank": rank, "items": items, "size": size,
            "answer": list(range(items))[rank * size:(rank + 1) * size],
            "even": list(range(start[rank], start[rank + 1]))}


def _z2() -> dict:
    rank, side = 3, 4
    row, col = divmod(rank, 2)                       # the (2, 2) mesh's coordinates of the rank
    half = side // 2
    full = [[side * i + j for j in range(side)] for i in range(side)]
    return {"rank": rank, "row": row, "col": col, "rows": f"{row * half}-{row * half + half - 1}",
            "cols": f"{col * half}-{col * half + half - 1}",
            "answer": [full[i][j] for i in range(row * half, (row + 1) * half)
                       for j in range(col * half, (col + 1) * half)],
            "one_dim": [v for i in range(rank, rank + 1) for v in full[i]]}


def _z3() -> dict:
    # two blocks, not the chapter's one (whose single all-reduce it prints)
    return {"answer": 2, "four": 4, "one": 1}


def _z4() -> dict:
    rank = 3
    froms = [sum(1 for e in row if e == rank) for row in ROUTE]
    return {"rank": rank, "froms": " + ".join(map(str, froms)), "answer": sum(froms), "own": froms[rank],
            "sent": len(ROUTE[rank])}


_Z4_CODE = (
    "route = torch.tensor([" + ",\n                      ".join(str(r) for r in ROUTE) + "])[rank]\n"
    "tokens = torch.arange(6.) + 10 * rank                   # 6 tokens; expert e lives on rank e\n"
    "send = tokens[torch.argsort(route, stable=True)]         # grouped by destination\n"
    "send_counts = torch.bincount(route, minlength=world)\n"
    "recv_counts = torch.empty_like(send_counts)\n"
    "dist.all_to_all_single(recv_counts, send_counts)          # first: how many each rank will get\n"
    "recv = torch.empty(int(recv_counts.sum()))\n"
    "dist.all_to_all_single(recv, send, recv_counts.tolist(), send_counts.tolist())")

register(
    Puzzle(
        "12.z1", "mesh",
        "`distribute_tensor` shards {items} numbers over a 1-D mesh of {n} ranks with `Shard(0)`. What does "
        "rank {rank} hold locally?",
        "`Shard(0)` cuts dim 0 like `torch.chunk`: pieces of ⌈{items}/{n}⌉ = {size}, and the last rank gets "
        "what is left: **{answer}**. The DTensor is still the whole tensor of {items}; `to_local()` is the "
        "rank's piece.",
        _z1, "answer",
        code="from torch.distributed.device_mesh import init_device_mesh\n"
             "from torch.distributed.tensor import Shard, distribute_tensor\n"
             "mesh = init_device_mesh(\"cpu\", (4,))\n"
             "t = distribute_tensor(torch.arange(10.), mesh, [Shard(0)])",
        expr="t.to_local()", reads=lambda per: per[3],
        wrong={"even": "That is the most even split (`tensor_split`). DTensor's `Shard` cuts like `chunk`: "
                       "equal pieces of ⌈n/ranks⌉, the remainder on the last ranks."}),
    Puzzle(
        "12.z2", "mesh",
        "A 4×4 tensor on a 2×2 mesh, rows sharded over the mesh's first dimension and columns over its "
        "second. What does rank {rank} hold locally? Answer as a flat list, row by row.",
        "Rank {rank} sits at mesh coordinate ({row}, {col}) (ranks are laid out row by row). `Shard(0)` on "
        "mesh dim 0 gives it rows {rows}; `Shard(1)` on mesh dim 1 columns {cols}: **{answer}**, a 2×2 block.",
        _z2, "answer",
        code="from torch.distributed.device_mesh import init_device_mesh\n"
             "from torch.distributed.tensor import Shard, distribute_tensor\n"
             "mesh = init_device_mesh(\"cpu\", (2, 2))\n"
             "t = distribute_tensor(torch.arange(16.).reshape(4, 4), mesh, [Shard(0), Shard(1)])",
        expr="t.to_local().flatten()", reads=lambda per: per[3],
        wrong={"one_dim": "That is `Shard(0)` over 4 ranks. Here the rows are split over mesh dimension 0 (2 "
                          "ways) and the columns over dimension 1 (2 ways): a block, not a row."}),
    Puzzle(
        "12.z3", "count",
        "Two MLP blocks in a row, each tensor parallel: its first linear column-parallel, its second "
        "row-parallel. How many collectives does one forward run?",
        "A column-parallel linear needs the whole input (every rank has it) and leaves its output sharded "
        "by columns, which is exactly the input the row-parallel linear wants: no communication inside a "
        "block. Each block's row-parallel outputs are partial sums, added by one all-reduce, which leaves the "
        "next block's input whole on every rank: **{answer}** all-reduces.",
        _z3, "answer",
        code="from torch.distributed.device_mesh import init_device_mesh\n"
             "from torch.distributed.tensor.debug import CommDebugMode\n"
             "from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module\n"
             "mesh = init_device_mesh(\"cpu\", (4,))\n"
             "mlp = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8),\n"
             "                          torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))\n"
             "parallelize_module(mlp, mesh, {\"0\": ColwiseParallel(), \"2\": RowwiseParallel(),\n"
             "                               \"3\": ColwiseParallel(), \"5\": RowwiseParallel()})\n"
             "with CommDebugMode() as comm:\n"
             "    y = mlp(torch.randn(2, 8))",
        expr="comm.get_total_counts()", reads=lambda per: per[0],
        wrong={"four": "The column-parallel linear of the second block needs no gather: the first block's "
                       "all-reduce already left its output whole on every rank.",
               "one": "Each block's row-parallel outputs are partial sums over its own slice of the hidden "
                      "units: every block needs its own all-reduce."}),
    Puzzle(
        "12.z4", "collective",
        "Expert parallelism: each rank routes its 6 tokens to the experts' ranks. How many tokens does rank "
        "{rank} receive (`len(recv)`)?",
        "Rank {rank} receives every token routed to expert {rank}, from every rank (its own included): "
        "{froms} = **{answer}**. A rank receives what the router sends it, not what it sent: the reason the "
        "counts go first, and the reason experts get uneven loads.",
        _z4, "answer",
        code=_Z4_CODE,
        expr="len(recv)", reads=lambda per: per[3],
        wrong={"sent": "That is how many each rank *sends*. What it receives depends on how many tokens the "
                       "router sends to its expert.",
               "own": "That counts only rank {rank}'s own tokens for expert {rank}; the other ranks send "
                      "theirs too."}),
)
