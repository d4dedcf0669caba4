"""Chapter 11's puzzles: ZeRO's bytes per rank, FSDP2's shard of a parameter, an HSDP mesh's groups.

11.z2 and 11.z3 run for real on 4 gloo ranks in the tests; 11.z1 is checked against the chapter's
calculator (:func:`disttutor.sharding.memory.per_device`).
"""
from __future__ import annotations

from disttutor.course.puzzle_sets._code import WORLD
from disttutor.course.puzzles import Puzzle, register
from disttutor.sharding.memory import bytes_per_param


def _z1() -> dict:
    params, n = 1.5e9, 8
    b = bytes_per_param("mixed", "adam")
    w, g, o = b["weights"], b["gradients"], b["optimizer"]
    gb = params / 1e9
    return {"params_b": gb, "n": n, "w": w, "g": g, "o": o, "answer": gb * (w + (g + o) / n),
            "zero1": gb * (w + g + o / n), "zero3": gb * (w + g + o) / n, "ddp": gb * (w + g + o)}


def _chunk_rows(rows: int, n: int) -> list[int]:
    size = -(-rows // n)
    return [max(0, min(size, rows - i * size)) for i in range(n)]


def _z2() -> dict:
    rows, n, rank = 10, WORLD, 3
    q, r = divmod(rows, n)
    return {"rows": rows, "n": n, "rank": rank, "size": -(-rows // n), "split": _chunk_rows(rows, n),
            "answer": _chunk_rows(rows, n)[rank], "even": q + (1 if rank < r else 0), "whole": rows}


def _z3() -> dict:
    rep, shard, rank = 2, 2, 3
    grid = [[i * shard + j for j in range(shard)] for i in range(rep)]   # row-major, like the mesh
    row, col = divmod(rank, shard)
    return {"rep": rep, "shard": shard, "rank": rank, "grid": grid, "answer": grid[row],
            "replicate": [grid[i][col] for i in range(rep)]}


register(
    Puzzle(
        "11.z1", "memory",
        "A {params_b:g}B-parameter model trains in mixed precision with Adam on {n} GPUs under ZeRO-2. How "
        "many GB of weights, gradients and optimizer state does each GPU hold (1 GB = 10⁹ bytes)?",
        "ZeRO-2 shards the gradients and the optimizer state, not the weights: {w} + ({g} + {o}) / {n} bytes "
        "a parameter, × {params_b:g}e9 = **{answer:.3g} GB** (ZeRO-1 {zero1:.3g}, ZeRO-3 {zero3:.3g}, "
        "plain DDP {ddp:g}).",
        _z1, "answer",
        # 3 significant digits of pen-and-paper rounding stay within 1 %; ZeRO-1's and ZeRO-3's differ by > 30 %
        rel_tol=0.02,
        wrong={"zero1": "That is ZeRO-1, which shards only the optimizer state. ZeRO-2 shards the gradients "
                        "too.",
               "zero3": "That is ZeRO-3 (FSDP), which shards the weights as well. ZeRO-2 keeps a full copy "
                        "of the weights on every GPU.",
               "ddp": "That is plain data parallelism: every GPU holds everything."}),
    Puzzle(
        "11.z2", "mesh",
        "`fully_shard` on {n} ranks shards a weight of {rows} rows along dim 0. How many rows does rank "
        "{rank}'s local shard hold?",
        "FSDP2 cuts dim 0 like `torch.chunk`: pieces of ⌈{rows}/{n}⌉ = {size} rows, {split} -- rank {rank} "
        "holds **{answer}** (FSDP pads it to {size} for the all-gather).",
        _z2, "answer",
        code="from torch.distributed.fsdp import fully_shard\n"
             "layer = torch.nn.Linear(3, 10)                  # weight: 10 rows of 3\n"
             "fully_shard(layer)                                # over the 4 ranks\n"
             "rows = layer.weight.to_local().shape[0]",
        expr="rows", reads=lambda per: per[3],
        wrong={"even": "That is the most even split (`tensor_split`). FSDP2 cuts like `chunk`: equal pieces "
                       "of ⌈rows/n⌉, the last rank gets what is left.",
               "whole": "`fully_shard` replaces the parameter with a DTensor sharded over the ranks: "
                        "`to_local()` is the rank's shard, not the whole weight."}),
    Puzzle(
        "11.z3", "group",
        "HSDP: replicate over one mesh dimension, shard over the other. Which ranks share rank {rank}'s "
        "\"shard\" group (the ranks its parameters are sharded over)?",
        "A mesh of shape ({rep}, {shard}) lays the ranks out row by row: {grid}. A \"shard\" group is a row "
        "(the last dimension), a \"replicate\" group a column: rank {rank} shards with **{answer}** and "
        "replicates with {replicate}.",
        _z3, "answer",
        code="from torch.distributed.device_mesh import init_device_mesh\n"
             "mesh = init_device_mesh(\"cpu\", (2, 2), mesh_dim_names=(\"replicate\", \"shard\"))\n"
             "group = dist.get_process_group_ranks(mesh.get_group(\"shard\"))",
        expr="group", reads=lambda per: per[3],
        wrong={"replicate": "That is the \"replicate\" group: a column of the mesh. The \"shard\" dimension "
                            "is the last one, the ranks next to each other."}),
)
