"""Chapter 3's puzzles: how ``nn.DataParallel`` splits a batch, and the bytes through device 0.

DataParallel scatters the batch with ``Tensor.chunk`` (``torch/csrc/cuda/comm.cpp``, ``scatter``: with
no chunk sizes given it calls ``tensor.chunk(devices.size(), dim)``), so the tests check 3.z1 and 3.z2
against ``torch.chunk``; 3.z3 against :func:`disttutor.data_parallel.dataparallel.expected_bytes`.
"""
from __future__ import annotations

from disttutor.course.puzzles import Puzzle, register


def _chunks(n_rows: int, n: int) -> list[int]:
    """Sizes of ``chunk(n)``: pieces of ⌈rows/n⌉, the last one smaller, fewer pieces if they run out."""
    size = -(-n_rows // n)
    return [min(size, n_rows - i) for i in range(0, n_rows, size)]


def _z1() -> dict:
    rows, n = 10, 4
    q, r = divmod(rows, n)
    return {"rows": rows, "n": n, "size": -(-rows // n), "answer": _chunks(rows, n),
            "even": [q + (1 if i < r else 0) for i in range(n)]}


def _z2() -> dict:
    rows, n = 9, 4
    return {"rows": rows, "n": n, "size": -(-rows // n), "sizes": _chunks(rows, n), "answer": len(_chunks(rows, n)),
            "all": n}


def _z3() -> dict:
    n, params, elem = 4, 25e6, 4
    s = params * elem / 1e6                                    # MB of parameters, and of gradients
    return {"n": n, "others": n - 1, "params_m": params / 1e6, "s": round(s), "answer": round(2 * (n - 1) * s),
            "params_only": round((n - 1) * s), "once": round(2 * s), "ring": round(2 * (n - 1) / n * s)}


register(
    Puzzle(
        "3.z1", "data",
        "`nn.DataParallel` over {n} GPUs gets a batch of {rows} rows. How many rows does each GPU's replica "
        "get, in device order?",
        "DataParallel scatters with `Tensor.chunk({n})`: pieces of ⌈{rows}/{n}⌉ = {size} rows until the "
        "rows run out, **{answer}**. `torch.tensor_split` would give {even}, but that is not what it calls.",
        _z1, "answer",
        code="model = torch.nn.DataParallel(net, device_ids=[0, 1, 2, 3])\n"
             "out = model(torch.randn(10, 32))",
        wrong={"even": "That is the most even split (`torch.tensor_split`). DataParallel's scatter calls "
                       "`chunk`, which cuts equal pieces of ⌈rows/n⌉ and leaves the remainder to the last."}),
    Puzzle(
        "3.z2", "data",
        "The same model gets a batch of {rows} rows on {n} GPUs. On how many GPUs does a replica run?",
        "`chunk({n})` cuts pieces of ⌈{rows}/{n}⌉ = {size}: {sizes}, and the rows are gone after "
        "{answer} pieces. DataParallel replicates the model only onto as many devices as there are pieces: "
        "**{answer}** GPUs work, one idles.",
        _z2, "answer",
        code="model = torch.nn.DataParallel(net, device_ids=[0, 1, 2, 3])\n"
             "out = model(torch.randn(9, 32))",
        wrong={"all": "`chunk` may return fewer pieces than asked: pieces of {size} rows run out after "
                      "{answer}, and DataParallel uses only that many devices."}),
    Puzzle(
        "3.z3", "memory",
        "`nn.DataParallel` on {n} GPUs trains a model of {params_m:g}M fp32 parameters, copying them from "
        "device 0 to each other GPU every step and the gradients back. How many MB of parameters and "
        "gradients go through device 0 per step, sent plus received (1 MB = 10⁶ bytes)?",
        "The model is {s} MB. Device 0 sends a copy to each of the other {others} GPUs ({others} × {s} MB) and "
        "receives each one's gradients (as much again): 2 × {others} × {s} = **{answer} MB**, every step, through "
        "one device. DDP's ring all-reduce sends 2 × {others}/{n} × {s} = {ring} MB of gradients per rank and "
        "receives as much, the same on every rank.",
        _z3, "answer",
        wrong={"params_only": "That is the parameters going out; the gradients come back to device 0 too, "
                              "as many bytes again.",
               "once": "That is one copy each way. Device 0 sends a replica to *each* other GPU and "
                       "receives each one's gradients: {others} of each."}),
)
