"""Chapter 12's named checks: the plain parallelize_module cell, TP's and SP's collectives and bytes, ring attention, expert parallelism, DTensor placements."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from disttutor.checks.claims.base import claim

ONE_ALL_REDUCE = {"all_reduce": 1}


def _calls(r: Mapping[str, Any]) -> tuple:
    return r["forward"], r["backward"]


def check_tp_collectives(results: Sequence[Mapping[str, Any]], tol: float) -> str:
    """Every TP block equals the unsplit one on every rank; one all-reduce forward and one backward per
    from-scratch block (Megatron's f and g), the same calls on every rank, DTensor attention 3 in backward."""
    TP = results[0]["tp"]
    for rank, q in enumerate(results):
        bad = {k: r["diff"] for k, r in q["tp"].items() if not r["diff"] <= tol}
        claim(not bad, f"rank {rank}: these blocks differ from one process by more than {tol:g}: {bad}")
        # a collective is called by all ranks or it hangs: every rank must count the same calls
        other = [k for k in TP if _calls(q["tp"][k]) != _calls(TP[k])]
        claim(not other, f"rank {rank} made other calls than rank 0 in {other}")
    for k in ("scratch_mlp", "dtensor_mlp"):
        claim(_calls(TP[k]) == (ONE_ALL_REDUCE, ONE_ALL_REDUCE),
              f"{k}: expected one all-reduce forward and one backward, got {_calls(TP[k])}")
    claim(TP["scratch_attention"]["backward"] == ONE_ALL_REDUCE,
          f"scratch_attention's backward: expected one all-reduce, got {TP['scratch_attention']['backward']}")
    att = TP["dtensor_attention"]["backward"].get("all_reduce")
    claim(att == 3, f"DTensor attention's backward: expected 3 all-reduces (one per ColwiseParallel q, k, v), got {att}")
    return "checked: one all-reduce forward and one backward per from-scratch block, as Megatron says"


def check_plain_tp(diffs: Sequence[float], tol: float) -> str:
    """The learner's ``parallelize_module`` MLP: output, input gradient and every weight gradient equal the
    unsplit copy's on every rank, to ``tol`` (fp32 summed in another order)."""
    claim(all(d <= tol for d in diffs), f"the split MLP differs from the unsplit copy by more than {tol:g}: {diffs}")
    return f"parallelize_module's MLP = the unsplit MLP (output and all gradients) on all {len(diffs)} ranks"


def check_block_ring_bytes(SP: Mapping[str, Any], s: int, b: int, d: int, t: int) -> str:
    """Per rank, a TP block's two ring all-reduces of [s*b, d] send 2 * 2(t-1)/t * s*b*d * 4 bytes; SP's
    all-gathers and reduce-scatters send the same, plus one all-reduce of LayerNorm's and the bias's 3d grads."""
    block = 2 * 2 * (t - 1) / t * s * b * d * 4
    ln = 2 * (t - 1) / t * 3 * d * 4
    got = (SP["tp"]["ring_bytes"], SP["sp"]["ring_bytes"])
    claim(got == (block, block + ln), f"ring bytes (TP, SP) {got} != the formula {(block, block + ln)}")
    return f"ring bytes per rank as derived: TP {block:,.0f}, SP {block:,.0f} + {ln:,.0f} (replicated parameters' gradients)"


def check_sp_collectives(results: Sequence[Mapping[str, Any]], tol: float) -> str:
    """TP and SP blocks equal one process; SP swaps each all-reduce for an all-gather + reduce-scatter
    (plus LayerNorm's small gradient all-reduce) and saves fewer bytes for backward."""
    SP = results[0]["sp"]
    for rank, q in enumerate(results):
        diffs = {m: q["sp"][m]["diff"] for m in ("tp", "sp")}
        claim(all(d <= tol for d in diffs.values()), f"rank {rank}: differs from one process by more than {tol:g}: {diffs}")
    claim(_calls(SP["tp"]) == (ONE_ALL_REDUCE, ONE_ALL_REDUCE), f"TP block's calls: {_calls(SP['tp'])}")
    ag_rs = {"all_gather_single": 1, "reduce_scatter_single": 1}
    claim(SP["sp"]["forward"] == ag_rs, f"SP forward: expected {ag_rs}, got {SP['sp']['forward']}")
    claim(SP["sp"]["backward"] == {**ag_rs, "all_reduce": 1},
          f"SP backward: expected {ag_rs} plus one all-reduce, got {SP['sp']['backward']}")
    claim(SP["sp"]["saved_bytes"] < SP["tp"]["saved_bytes"],
          f"SP should save fewer bytes for backward: SP {SP['sp']['saved_bytes']} vs TP {SP['tp']['saved_bytes']}")
    return ("TP and SP equal one process; SP: all-gather + reduce-scatter where TP all-reduces, and fewer bytes "
            "saved for backward")


def check_sp_bytes(SP: Mapping[str, Any], tp_formula: int, sp_formula: int, ln_sync: float) -> str:
    """The bytes saved for backward equal the formula from the shapes, exactly; SP's ring bytes are TP's plus
    the one all-reduce of LayerNorm's and the bias's gradients."""
    got = (SP["tp"]["saved_bytes"], SP["sp"]["saved_bytes"])
    claim(got == (tp_formula, sp_formula), f"saved bytes (TP, SP) {got} != the formula {(tp_formula, sp_formula)}")
    extra = SP["sp"]["ring_bytes"] - SP["tp"]["ring_bytes"]
    claim(extra == ln_sync, f"SP's ring bytes exceed TP's by {extra}, not LayerNorm's all-reduce ({ln_sync})")
    return "saved bytes = the formula from the shapes, TP and SP; SP's ring bytes = TP's + the replicated parameters' all-reduce"


def check_ring_attention(CP: Sequence[Mapping[str, Any]], tol: float) -> str:
    """Ring attention equals full causal attention on every rank; each rank sends and receives n - 1 times."""
    n = len(CP)
    for rank, r in enumerate(CP):
        claim(r["diff"] <= tol, f"rank {rank}: ring attention differs from full attention by {r['diff']:.2g} > {tol:g}")
        claim(r["calls"] == {"isend": n - 1, "irecv": n - 1},
              f"rank {rank}: expected {n - 1} isend and irecv on {n} ranks, got {r['calls']}")
    return f"ring attention = full causal attention on every rank; {n - 1} isend + {n - 1} irecv per rank on {n} ranks"


def check_expert_parallel(EP: Sequence[Mapping[str, Any]], tol: float, tokens: int, top_k: int) -> str:
    """Expert-parallel MoE equals every expert in one process; three all-to-alls (counts, dispatch,
    combine) per rank; every token routed to ``top_k`` experts."""
    for rank, r in enumerate(EP):
        claim(r["diff"] <= tol, f"rank {rank}: MoE differs from one process by {r['diff']:.2g} > {tol:g}")
        claim(r["calls"] == {"all_to_all_single": 3},
              f"rank {rank}: expected 3 all-to-alls (counts, dispatch, combine), got {r['calls']}")
        claim(sum(r["tokens_per_expert"]) == tokens * top_k,
              f"rank {rank}: {tokens} tokens x top-{top_k} should be {tokens * top_k} pairs, got {r['tokens_per_expert']}")
    return (f"MoE = one process on every rank; 3 all-to-alls per rank (counts, dispatch, combine); "
            f"{tokens} tokens x {top_k} experts routed per rank")


def check_one_dim_placements(ONE: Sequence[Mapping[str, Any]]) -> str:
    """On a 1-D mesh of 4 ranks holding a 4x4 tensor 0..15: Shard(0) = row r, Shard(1) = column r,
    Replicate = everything, Partial = a pending sum (1+2+3+4 once all-reduced)."""
    n = len(ONE)
    claim([o["S(0)"]["held"] for o in ONE] == [list(range(4 * r, 4 * r + 4)) for r in range(n)],
          f"Shard(0) should give rank r row r: {[o['S(0)']['held'] for o in ONE]}")
    claim([o["S(1)"]["held"] for o in ONE] == [list(range(r, 16, 4)) for r in range(n)],
          f"Shard(1) should give rank r column r: {[o['S(1)']['held'] for o in ONE]}")
    claim(all(o["R"]["held"] == list(range(16)) for o in ONE), "Replicate should hold all 16 elements on every rank")
    claim(all(o["Partial()"]["sum"] == [1.0 + 2 + 3 + 4] * 16 for o in ONE),
          f"Partial's sum should be 10 everywhere: {[o['Partial()']['sum'][:2] for o in ONE]}")
    return "1-D mesh: Shard(0) = rows, Shard(1) = columns, Replicate = everything, Partial = a pending sum"


def check_two_dim_placements(nested: Mapping, strided: Mapping, placements: str) -> str:
    """On a (dp=2, tp=2) mesh, (Shard(0), Shard(0)) gives contiguous rows in mesh order; FSDP2 over TP gives
    each dp index the same sub-block inside every tp shard, recorded as _StridedShard(dim=0, sf=2)."""
    want_nested = {(0, 0): [0, 1], (0, 1): [2, 3], (1, 0): [4, 5], (1, 1): [6, 7]}
    want_strided = {(0, 0): [0, 1], (0, 1): [4, 5], (1, 0): [2, 3], (1, 1): [6, 7]}
    claim(nested == want_nested, f"(Shard(0), Shard(0)) rows: {nested}, expected {want_nested}")
    claim(strided == want_strided, f"FSDP2 over TP rows: {strided}, expected {want_strided}")
    claim("_StridedShard(dim=0, sf=2)" in placements, f"FSDP2 over TP's placements: {placements}")
    return "2-D mesh: nested Shard(0) = contiguous rows; FSDP2 over TP = strided rows, _StridedShard(dim=0, sf=2)"
