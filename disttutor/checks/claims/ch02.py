"""Chapter 2's named checks: process groups, torchrun's environment, backends, every collective against the same
arithmetic in one process, deadlocks that end, and the timing sweeps (asserted only on a quiet machine)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from disttutor.checks.claims.base import claim


def check_process_groups(results: Sequence[Mapping[str, Any]], group_size: int = 2) -> str:
    """Ranks 0..n-1; a collective with ``group=`` adds only that group's members (even/odd ranks, blocks of
    ``group_size``), each rank knows its rank inside each group, and the default group adds everybody."""
    n = len(results)
    claim([rep["rank"] for rep in results] == list(range(n)),
          f"ranks should be 0..{n - 1}: {[r['rank'] for r in results]}")
    for r, rep in enumerate(results):
        parity = [q for q in range(n) if q % 2 == r % 2]
        block = [q for q in range(n) if q // group_size == r // group_size]
        claim(rep["parity_group"] == parity and rep["parity_rank"] == parity.index(r),
              f"rank {r}: parity group {rep['parity_group']} (rank {rep['parity_rank']}), expected {parity} "
              f"(rank {parity.index(r)})")
        # each rank contributes rank + 1; small integers in float32 add exactly
        claim(rep["parity_sum"] == sum(q + 1 for q in parity),
              f"rank {r}: the parity group's sum {rep['parity_sum']} != {sum(q + 1 for q in parity)}")
        claim(rep["block_group"] == block and rep["block_sum"] == sum(q + 1 for q in block),
              f"rank {r}: block group {rep['block_group']} with sum {rep['block_sum']}, expected {block} with "
              f"{sum(q + 1 for q in block)}")
        claim(rep["world_sum"] == n * (n + 1) / 2, f"rank {r}: world sum {rep['world_sum']} != {n * (n + 1) / 2:g}")
    return (f"{n} ranks: each group's all-reduce added only its members; the world's added all {n} "
            f"(1 + ... + {n} = {n * (n + 1) // 2})")


def check_skipped_new_group(result: Any, where: Mapping[int, Sequence[str]], timeout_s: float) -> str:
    """A rank that skips ``new_group``: the job still ends on its own; rank 0 never leaves ``new_group``, rank 1
    waits in the world's all-reduce and fails after the collective timeout."""
    claim(result.outcome == "finished" and not result.ok,
          f"the job should end on its own, failed: outcome {result.outcome!r}, ok {result.ok}")
    claim(list(where[0]) == ["entering new_group([0, 1])"], f"rank 0 should stop inside new_group: {where[0]}")
    claim(bool(where[1]) and where[1][-1] == "entering all_reduce over the world" and result.ranks[1].status == "error",
          f"rank 1 should fail in the world's all-reduce: {where[1]}, {result.ranks[1].status}")
    claim(f"waited more than {timeout_s:g}s" in (result.ranks[1].error or ""),
          f"rank 1 should have waited {timeout_s:g} s: {result.ranks[1].error!r}")
    return (f"a deadlock across two calls: rank 0 waited inside new_group, rank 1 in the all-reduce, until the "
            f"{timeout_s:g} s collective timeout ended it")


def check_torchrun_env(results: Sequence[Mapping[str, Any]]) -> str:
    """torchrun gave rank r ``RANK=r``, ``WORLD_SIZE=n`` and, on one machine, ``LOCAL_RANK=r``."""
    n = len(results)
    for r, rep in enumerate(results):
        env = rep["env"]
        claim(env["RANK"] == str(r) and env["WORLD_SIZE"] == str(n),
              f"rank {r}: RANK={env['RANK']!r}, WORLD_SIZE={env['WORLD_SIZE']!r}, expected {r} and {n}")
        claim(env["LOCAL_RANK"] == str(r), f"rank {r}: one machine, so LOCAL_RANK should be {r}: {env['LOCAL_RANK']!r}")
    return f"RANK = LOCAL_RANK = r (one machine) and WORLD_SIZE = {n} on every rank"


def check_backends(available: Mapping[str, bool], build_flags: Mapping[str, str]) -> str:
    """Every wheel has gloo; whether MPI is available agrees with the build's ``USE_MPI``."""
    claim(available["gloo"], "every PyTorch wheel has gloo")
    claim(available["mpi"] == (build_flags.get("MPI") == "ON"),
          f"MPI available {available['mpi']} but the build says USE_MPI={build_flags.get('MPI')}")
    return "gloo is built in; the live check of MPI agrees with the build's USE_MPI flag"


def _expected(op: str, r: int, X: torch.Tensor, X_BIG: torch.Tensor) -> list[float] | None:
    """What rank r holds after ``op``, computed in one process (None: unspecified)."""
    N = len(X)
    return {
        "broadcast": lambda: X[0],
        "reduce": lambda: X.sum(0) if r == 0 else None,         # other ranks' buffers: unspecified
        "all_reduce": lambda: X.sum(0),
        "all_gather": lambda: X.reshape(-1),
        "reduce_scatter": lambda: X_BIG.sum(0).tensor_split(N)[r],
        "gather": lambda: X.reshape(-1) if r == 0 else None,    # only rank 0 receives
        "scatter": lambda: X_BIG[0].tensor_split(N)[r],
        # rank r receives chunk r of every rank j, in the order j = 0, 1, ...
        "all_to_all": lambda: torch.cat([X_BIG[j].tensor_split(N)[r] for j in range(N)]),
        "send_recv": lambda: X[r - r % 2],                      # odd ranks got their even partner's x
        "isend_irecv": lambda: X[(r - 1) % N],                  # everybody got the left neighbour's x
    }[op]()


_SAYS = {"broadcast": "every rank holds rank 0's x", "reduce": "rank 0 holds the sum",
         "all_reduce": "every rank holds the sum", "all_gather": "every rank holds every x, in rank order",
         "reduce_scatter": "rank i holds chunk i of the sum (the all-reduce equivalent agrees)",
         "gather": "rank 0 holds every x, in rank order", "scatter": "rank i holds chunk i of rank 0's x",
         "all_to_all": "rank i holds chunk i of every rank, in rank order",
         "send_recv": "each odd rank holds its even partner's x",
         "isend_irecv": "every rank holds its left neighbour's x"}


def check_collective(op: str, results: Sequence[Mapping[str, Any]], X: torch.Tensor, X_BIG: torch.Tensor) -> str:
    """What every rank holds after ``op`` equals the same arithmetic done in one process with plain torch
    (``X``: every rank's 2-element x, ``X_BIG``: the n-chunk inputs). Small integers in float32: exact, so ==."""
    for r, rep in enumerate(results):
        want = _expected(op, r, X, X_BIG)
        if want is None:
            continue
        claim(rep[op]["after"] == want.tolist(), f"{op}, rank {r}: {rep[op]['after']}, expected {want.tolist()}")
        if op == "reduce_scatter":  # same answer either way: native, or all-reduce then keep my slice
            claim(rep[op]["equivalent"] == want.tolist(),
                  f"reduce_scatter's all-reduce equivalent, rank {r}: {rep[op]['equivalent']} != {want.tolist()}")
    return f"{op}: {_SAYS[op]} == the one-process reference"


def check_current_names(dist: Any, renamed: Mapping[str, str], program_lines: Sequence[str]) -> str:
    """Each old name is deprecated in this torch in favour of its new name, which exists; and the chapter's
    program calls only the new names (comments aside)."""
    for old, new in renamed.items():
        note = getattr(getattr(dist, old), "__deprecated__", "")  # set by typing_extensions.deprecated
        claim(new in note and hasattr(dist, new), f"dist.{old} should be deprecated in favour of dist.{new}: {note!r}")
    code = [ln.split("#")[0] for ln in program_lines]
    used = sorted({old for ln in code for old in renamed if f"dist.{old}(" in ln})
    claim(not used, f"the program still calls the deprecated {used}")
    return "every old name points to its new one, and disttutor/programs/collectives.py calls only the current names"


def check_live_collectives(y: Sequence[torch.Tensor], z: Sequence[torch.Tensor],
                           gathered: Sequence[Sequence[torch.Tensor]], X: torch.Tensor) -> str:
    """Pulled from live ranks: the all-reduce is the sum of all x, the even/odd group's all-reduce the sum over
    the group, the all-gather every x in rank order -- on every rank, bit for bit (small integers)."""
    for r in range(len(y)):
        claim(torch.equal(y[r], X.sum(0)), f"rank {r}: all_reduce gave {y[r].tolist()}, expected {X.sum(0).tolist()}")
        group = X[[q for q in range(len(X)) if q % 2 == r % 2]].sum(0)
        claim(torch.equal(z[r], group),
              f"rank {r}: the group's all_reduce gave {z[r].tolist()}, expected {group.tolist()}")
        claim(torch.equal(torch.stack(list(gathered[r])), X),
              f"rank {r}: all_gather gave {torch.stack(list(gathered[r])).tolist()}, expected {X.tolist()}")
    return "live results == one-process reference on every rank"


def check_deadlock_ended(result: Any, timeout_s: float) -> str:
    """Blocking sends facing each other: the job fails, and a rank names the collective timeout that ended it."""
    claim(not result.ok, "send-then-recv on both sides should not finish")
    claim(any(f"waited more than {timeout_s:g}s" in (r.error or "") for r in result.ranks),
          f"no rank names the {timeout_s:g} s timeout: {[r.error for r in result.ranks]}")
    return f"both ranks sat in send; the {timeout_s:g} s collective timeout ended the deadlock"


def check_sweep(data: Sequence[Mapping[str, Any]], algos: Sequence[str], nprocs: Sequence[int],
                sizes: Sequence[int], quiet: bool) -> str:
    """The sweep measured every (algorithm, ranks, size) with a positive time; on a quiet machine (only there:
    a timing claim) the built-in all-reduce on 2 ranks reaches a higher bus bandwidth at the largest size."""
    claim(len(data) == len(algos) * len(nprocs) * len(sizes) and all(r["time_s"] > 0 for r in data),
          f"expected {len(algos) * len(nprocs) * len(sizes)} positive timings: {len(data)} rows")
    bw = {(r["algo"], r["nproc"], r["bytes"]): r["busbw"] for r in data}
    big_better = bw[("builtin", 2, max(sizes))] > bw[("builtin", 2, min(sizes))]
    if quiet:
        claim(big_better, f"big messages should use the link better than small ones: busbw "
                          f"{bw[('builtin', 2, max(sizes))]:.3g} vs {bw[('builtin', 2, min(sizes))]:.3g} B/s")
    return ("big messages used the link better than small ones" if big_better
            else "big messages used the link no better than small ones in this noisy run (not asserted: busy machine)")


def check_cost_model(model: Mapping[str, Any]) -> str:
    """Bytes the busiest rank sends: on 2 ranks all three send one tensor; on 16 the ring < 2 < tree < naive."""
    claim(model["naive"](2) == model["tree"](2) == model["ring"](2) == 1,
          f"on 2 ranks every algorithm should send one tensor: {[model[a](2) for a in ('naive', 'tree', 'ring')]}")
    claim(model["ring"](16) < 2 < model["tree"](16) < model["naive"](16),
          f"on 16 ranks expected ring < 2 < tree < naive: {[model[a](16) for a in ('ring', 'tree', 'naive')]}")
    return "2 ranks: every algorithm sends one tensor; 16 ranks: ring < 2 tensors < tree < naive"


def check_emulated_link(runs: Sequence[Mapping[str, Any]], quiet: bool) -> str:
    """On the emulated link no all-reduce beats the link's own time; on a quiet machine (a timing claim, asserted
    only there) the ring is faster than the naive all-reduce at every rank count."""
    for r in runs:
        for a in ("naive", "ring"):
            # The link's time is a floor: each message waits its α + bytes/B (5 %: the ranks leave the barrier
            # that starts a call up to a few ms apart on a busy machine, and the model's time is counted from each
            # rank's own start).
            claim(r[f"{a}_s"] >= 0.95 * r[f"{a}_model_s"],
                  f"{r['world']} ranks, {a}: {r[f'{a}_s']:.3f} s, below the link's {r[f'{a}_model_s']:.3f} s")
    faster = all(r["ring_s"] < r["naive_s"] for r in runs)
    if quiet:
        claim(faster, f"the ring should beat naive on the link: {[(r['ring_s'], r['naive_s']) for r in runs]}")
    return ("no run beat its link's time; the ring was faster than naive at "
            + ("every rank count" if faster else "not every rank count in this noisy run (not asserted: busy machine)"))
