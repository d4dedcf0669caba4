"""Chapter 11's named checks: every sharding strategy trains the same model, FSDP2's collectives, bytes,
memory, mixed precision and checkpoint, its per-parameter shards.

The TP, 2-D mesh and FedAvg checks at the end are no longer called by chapter 11's page (tensor parallelism
moved to chapter 12, FedAvg to an appendix that does not run); their tests still exercise them."""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Mapping, Sequence

from disttutor.checks.claims.base import claim
from disttutor.checks.sharding import BF16_RTOL, FP32_RTOL

FSDP_UNITS = ["root"] + [f"blocks.{i}" for i in range(4)]


def check_strategies_agree(by_world: Mapping[int, Sequence[Mapping[str, Any]]]) -> str:
    """On every rank of every run: each strategy's update equals one process's (fp32 or bf16 tolerance),
    FSDP2 equals DDP, the checkpoint reloads equal, DDP's measured bytes are the predicted ones."""
    for n, results in by_world.items():
        for rank, res in enumerate(results):
            for name, s in res["strategies"].items():
                tol = BF16_RTOL if name.endswith("bf16") else FP32_RTOL  # why these: disttutor/checks/sharding.py
                claim(s["update_diff"] <= tol, f"{n} ranks, rank {rank}, {name}: the update differs from one "
                                               f"process by {s['update_diff']:.2e} (relative) > {tol:g}")
            vs = res["strategies"]["fsdp2"]["vs_ddp"]
            claim(vs < 1e-5, f"{n} ranks, rank {rank}: FSDP2 vs DDP differ by {vs:.2e}")  # fp32 reordering, params O(0.1..1)
            ck = res["checkpoint"]
            claim(ck["reloaded_equal"] and ck["optimizer_equal"],
                  f"{n} ranks, rank {rank}: reloaded parameters equal {ck['reloaded_equal']}, AdamW state "
                  f"{ck['optimizer_equal']}")
            ddp = res["strategies"]["ddp"]
            claim(ddp["measured"] == {k: int(v) for k, v in ddp["predicted"].items()},
                  f"{n} ranks, rank {rank}: DDP's bytes {ddp['measured']} != predicted {ddp['predicted']}")
    ranks = " and ".join(str(n) for n in by_world)
    return (f"every strategy, every rank, {ranks} ranks: one process's update (fp32, bf16 tolerances); "
            "FSDP2 = DDP; checkpoint reloads equal; DDP's bytes as predicted")


def check_plain_fsdp2(logs: Sequence[Sequence[str]]) -> str:
    """The learner's FSDP2 script under torchrun: rank 0 printed a loss per step, falling, and that
    blocks.0.up.weight is a DTensor of the model's shape whose local part on every rank is 1/world of its rows.
    Lines are searched, not matched whole: torchrun's log tail can glue a prefix to a line read mid-write."""
    world = len(logs)
    losses = [float(m[1]) for ln in logs[0] if (m := re.search(r"step \d+: loss ([0-9.]+)", ln))]
    claim(len(losses) == 3 and losses[-1] < losses[0], f"rank 0 should print 3 falling losses: {losses}")
    want = f"blocks.0.up.weight: DTensor (256, 64), local parts {[(256 // world, 64)] * world}"
    claim(any(want in ln for ln in logs[0]), f"rank 0 should print {want!r}; it printed {list(logs[0])[-2:]}")
    return f"{world} ranks: 3 falling losses; blocks.0.up.weight a DTensor, 1/{world} of its rows on each rank"


def check_fsdp2_matches_one_process(F2: Sequence[Mapping[str, Any]]) -> str:
    """FSDP2 (with and without activation checkpointing) trains as one process on the full batch."""
    worst = max(max(r["vs_one_process"].values()) for r in F2)
    # fp32, the same sums in another order (rank-local halves, then a reduce-scatter): ulps of O(1) values
    claim(worst < 1e-5, f"FSDP2 vs one process: largest parameter difference {worst:.2e} >= 1e-5")
    return f"3 AdamW steps on {len(F2)} ranks = one process on the full batch (largest difference {worst:.1e})"


def check_fsdp_collectives(F2: Sequence[Mapping[str, Any]], off: Sequence[str], on: Sequence[str]) -> str:
    """Per unit and step, with and without prefetching: one all-gather forward, one backward, one
    reduce-scatter (gloo runs it as an all_reduce), nothing else; prefetching moves block 2's gather
    before block 3's reduce-scatter."""
    want = Counter({(op, ph, u): 1 for u in FSDP_UNITS for op, ph in
                    (("all_gather", "forward"), ("all_gather", "backward"), ("reduce_scatter", "backward"))})
    for cond in ("prefetch off", "prefetch on"):
        for rank, r in enumerate(F2):
            calls = r["comm"][cond]["calls"]
            per_unit = Counter((c["op"], c["phase"], c["unit"]) for c in calls)
            claim(per_unit == want, f"{cond}, rank {rank}: collectives per (op, phase, unit) differ: extra "
                                    f"{dict(per_unit - want)}, missing {dict(want - per_unit)}")
            odd = [c for c in calls if c["backend_op"] != ("all_gather" if c["op"] == "all_gather" else "all_reduce")]
            claim(not odd, f"{cond}, rank {rank}: gloo ran these as something else: {odd[:2]}")
    claim(list(off[:3]) == ["AG3", "RS3", "AG2"], f"without prefetching backward should start AG3 RS3 AG2: {off[:3]}")
    claim(list(on[:3]) == ["AG3", "AG2", "RS3"], f"with prefetching backward should start AG3 AG2 RS3: {on[:3]}")
    return ("per unit and step: 1 all-gather forward, 1 all-gather backward, 1 reduce-scatter; "
            "gloo runs every reduce-scatter as an all_reduce")


def check_fsdp_bytes(rows: Sequence[Mapping[str, Any]], P: int, ag_bf16: int, ag_fp32: int) -> str:
    """Payload: DDP P, FSDP2 3P (exact, from the trace); the ring formula's 1.5x; on Linux the bytes sent
    are the formula plus gloo's headers; bf16 all-gathers carry half the bytes."""
    for rank, row in enumerate(rows):
        claim(row["ddp_payload"] == P and row["payload"] == 3 * P,
              f"rank {rank}: payloads DDP {row['ddp_payload']}, FSDP2 {row['payload']}; expected P = {P} and 3P")
        claim(row["formula"] == 1.5 * row["ddp_formula"],
              f"rank {rank}: ring formula FSDP2 {row['formula']} != 1.5 x DDP's {row['ddp_formula']}")
        if row["sent"] is not None:  # Linux: measured bytes = the formula plus gloo's message headers (< 2 %)
            for sent, formula, what in ((row["ddp_sent"], row["ddp_formula"], "DDP"), (row["sent"], row["gloo"], "FSDP2")):
                claim(1.0 <= sent / formula < 1.02, f"rank {rank}: {what} sent {sent} bytes, formula {formula:.0f}: "
                                                    f"ratio {sent / formula:.4f} outside [1, 1.02)")
    claim(ag_bf16 * 2 == ag_fp32, f"bf16 all-gathers should carry half fp32's bytes: {ag_bf16} vs {ag_fp32}")
    return "payload: DDP P, FSDP2 3P; ring formula 1.5x; sent = formula + gloo's headers; bf16 all-gathers half the bytes"


def check_fsdp_memory(mem: Mapping[int, Mapping[str, Mapping[str, int]]], block_bytes: int, root_bytes: int,
                      ac_vs_no_ac: float) -> str:
    """Resharding keeps at most two blocks' weights plus the root full; not resharding holds more; activation
    checkpointing lowers the activation peak and trains the same bits."""
    for rank, m in mem.items():
        t, f = m["reshard_after_forward=True"], m["reshard_after_forward=False"]
        # at most one block's full weights alive at a time (two while a prefetched one arrives), plus the root's.
        # The snapshot is taken at the step's peak total, whose moment varies from run to run (gloo frees buffers
        # on its own thread): on one rank it fell in backward with only part of the root gathered (18,944 bytes),
        # so only the upper bound is a claim.
        claim(t["UNSHARDED_PARAM"] <= 2 * block_bytes + root_bytes,
              f"rank {rank}: {t['UNSHARDED_PARAM']} full-weight bytes with resharding > 2 blocks + root "
              f"({2 * block_bytes + root_bytes})")
        claim(f["UNSHARDED_PARAM"] > t["UNSHARDED_PARAM"] and f["Total"] > t["Total"],
              f"rank {rank}: without resharding full weights {f['UNSHARDED_PARAM']} / total {f['Total']} should "
              f"exceed {t['UNSHARDED_PARAM']} / {t['Total']}")
    # only the blocks' inputs are kept, the rest is recomputed: the activations' own peak over the step is lower
    # (the activation bytes at the total's peak are not: that moment varies per run, above)
    ac = max(m["True + activation checkpointing"]["ACT_PEAK"] for m in mem.values())
    plain = max(m["reshard_after_forward=True"]["ACT_PEAK"] for m in mem.values())
    claim(ac < plain, f"activation checkpointing's activation peak {ac} should be below {plain} bytes")
    # the recompute runs the same ops on the same values: on one machine, the same bits (allow fp32 ulps elsewhere)
    claim(ac_vs_no_ac < 1e-6, f"with checkpointing the trained model differs by {ac_vs_no_ac:.2e}")
    return ("resharding: at most 2 blocks + the root full; without it more full weights and a higher peak; "
            "activation checkpointing: a lower activation peak, the same training")


def check_mixed_precision(mpd: Mapping[str, Any], rs_dtypes: set) -> str:
    """MixedPrecisionPolicy: bf16 weights and outputs inside the block, fp32 sharded parameter, gradient and
    AdamW state (the master weights), reduce-scatters in fp32."""
    claim(mpd["in_forward"] == {"weight": "torch.bfloat16", "output": "torch.bfloat16"},
          f"inside the block during forward: {mpd['in_forward']}, expected bf16 weight and output")
    kept = (mpd["sharded_param"], mpd["grad_after_step"], mpd["optimizer_state"])
    claim(kept == ("torch.float32",) * 3, f"sharded parameter, gradient, AdamW state should be fp32: {kept}")
    claim(rs_dtypes == {"float"}, f"reduce-scatters should run in fp32 (reduce_dtype): {rs_dtypes}")
    return "compute in bf16; sharded parameters, gradients and AdamW state in fp32; reduce-scatters in fp32"


def check_fsdp_checkpoint(F2: Sequence[Mapping[str, Any]], n: int) -> str:
    """DCP: every rank reloads its shards equal, one more step from them gives the same bits, one .distcp per
    rank plus .metadata."""
    for rank, r in enumerate(F2):
        ck = r["checkpoint"]
        claim(ck["params_equal"] and ck["optimizer_equal"],
              f"rank {rank}: reloaded parameters equal {ck['params_equal']}, AdamW state {ck['optimizer_equal']}")
        # same state, same data, same ops: the same bits
        claim(ck["resumed_diff"] == 0.0, f"rank {rank}: a step from the reloaded state differs by {ck['resumed_diff']}")
        shards = [f for f in ck["files"] if f.endswith(".distcp")]
        claim(".metadata" in ck["files"] and len(shards) == n, f"rank {rank}: files {ck['files']}, expected "
                                                               f".metadata and {n} .distcp")
    return f"every rank reloads its shards equal; a step from them gives the same bits; {n} .distcp files + .metadata"


def check_flat_vs_per_param(views: Mapping[str, Any]) -> str:
    """FSDP1-style flattening leaves one shard and empty placeholders and still moves a weight frozen after
    wrapping; FSDP2 keeps every parameter a DTensor and the frozen one stays put."""
    flat, per = views["flat (FSDP1-style)"], views["per-parameter (FSDP2)"]
    claim(flat["parameters"][0][0] == "shard" and flat["n_placeholders"] == per["n_parameters"],
          f"flat: first parameter {flat['parameters'][0][0]!r}, {flat['n_placeholders']} placeholders vs "
          f"{per['n_parameters']} parameters")
    kinds = {kind for _, _, _, kind, _ in per["parameters"]}
    claim(kinds == {"DTensor"}, f"FSDP2's parameters should all be DTensors: {kinds}")
    claim(flat["frozen_weight_moved"] > 0 and per["frozen_weight_moved"] == 0.0,
          f"the weight frozen after wrapping moved by {flat['frozen_weight_moved']} (flat) and "
          f"{per['frozen_weight_moved']} (FSDP2); expected > 0 and 0")
    return ("flat: one shard + empty placeholders, a weight frozen after wrapping still moves; "
            "FSDP2: every parameter a DTensor, the frozen one stays")


def check_tp_placements(P: Sequence[Mapping[str, Any]]) -> str:
    """A 4x4 tensor 0..15 on 4 ranks: Shard(0) gives rank r row r, Shard(1) column r; Partial sums 1+2+3+4."""
    n = len(P)
    claim([p["Shard(0)"] for p in P] == [[[4.0 * r + c for c in range(4)]] for r in range(n)],
          f"Shard(0) should give rank r row r: {[p['Shard(0)'] for p in P]}")
    claim([p["Shard(1)"] for p in P] == [[[4.0 * i + r] for i in range(4)] for r in range(n)],
          f"Shard(1) should give rank r column r: {[p['Shard(1)'] for p in P]}")
    claim(all(p["Partial() -> full_tensor()"] == [[10.0] * 2] * 2 for p in P),  # 1+2+3+4: the pending sum
          f"Partial's full_tensor() should be 10 everywhere: {[p['Partial() -> full_tensor()'] for p in P]}")
    return "placements checked: Shard(0) = rows, Shard(1) = columns, Partial = a pending sum"


def check_tp_blocks(results: Sequence[Mapping[str, Any]]) -> str:
    """The tensor-parallel MLP and attention equal the unsplit modules (outputs and gradients) on every rank;
    one all-reduce forward per block; backward one per column-wise layer (1 for the MLP, q, k, v: 3)."""
    for block, bwd in (("mlp", 1), ("attention", 3)):
        for rank, res in enumerate(results):
            r = res[block]
            # fp32, the same products summed in another order across ranks: ulps of values ~1
            claim(r["out_diff"] < 1e-5 and r["grad_diff"] < 1e-5,
                  f"rank {rank}, {block}: output differs by {r['out_diff']:.2e}, gradient by {r['grad_diff']:.2e}")
            claim(r["forward_comms"] == {"all_reduce": 1}, f"rank {rank}, {block} forward: {r['forward_comms']}")
        r0 = results[0][block]["backward_comms"]
        claim(r0 == {"all_reduce": bwd}, f"{block} backward: expected {bwd} all-reduce(s), got {r0}")
    return ("tensor parallel = the unsplit module (outputs and gradients): forward one all-reduce per block;\n"
            "backward one per column-split layer -- q, k, v are 3 layers here (Megatron fuses them into one)")


def check_mesh_2d(m2: Sequence[Mapping[str, Any]]) -> str:
    """FSDP x TP on a (2, 2) mesh trains as one process; every element of the weight is stored exactly once."""
    diffs = [m["param_diff"] for m in m2]
    claim(all(d < 1e-5 for d in diffs), f"2-D run vs one process: {diffs}")  # fp32 reordering only, as above
    held = sorted(i for m in m2 for i in m["held"])
    size = m2[0]["weight_shape"][0] * m2[0]["weight_shape"][1]
    claim(held == list(range(size)), f"the ranks should store each of {size} elements exactly once: "
                                     f"{len(held)} stored, {len(set(held))} distinct")
    return f"2-D mesh: the one-process training; each of the weight's {size} elements stored exactly once"


def check_fedavg(fed: Mapping[str, Any]) -> str:
    """With one local step FedAvg equals data parallelism; with several the clients drift; it all-reduces
    ``local_steps`` times less."""
    claim(fed["diff_one_step"] < 1e-6,  # one local step: averaging weights = averaging gradients (fp32 rounding)
          f"FedAvg with one local step should equal SGD: differs by {fed['diff_one_step']:.2e}")
    claim(fed["diff_k_steps"] > 100 * max(fed["diff_one_step"], 1e-9),
          f"with {fed['local_steps']} local steps clients should drift: {fed['diff_k_steps']:.2e} vs "
          f"{fed['diff_one_step']:.2e}")
    claim(fed["allreduces_fedavg"] * fed["local_steps"] == fed["allreduces_data_parallel"],
          f"all-reduces: FedAvg {fed['allreduces_fedavg']} x {fed['local_steps']} != DP {fed['allreduces_data_parallel']}")
    return (f"FedAvg with 1 local step = data parallelism; with {fed['local_steps']} the clients drift; "
            f"{fed['local_steps']}x fewer all-reduces")
