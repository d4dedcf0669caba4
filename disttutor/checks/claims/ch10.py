"""Chapter 10's named checks: the plain script, the article's ladder and snippets, the capstone run, the time split,
the bitwise resume."""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from disttutor.checks.claims.base import claim


# ---- chapter 10 -------------------------------------------------------------------------------

def check_article_ladder(ladder: Sequence[Sequence[Mapping[str, Any]]], fixes: Sequence[Any]) -> str:
    """The article's §10.2 run: attempt k fails on every rank with the error fix k addresses; the last finishes."""
    claim(len(ladder) == len(fixes) + 1, f"expected {len(fixes) + 1} attempts (one per fix, then a finished run), "
                                         f"got {len(ladder)}")
    for k, results in enumerate(ladder[:-1]):
        for rank, r in enumerate(results):
            claim(r["error"] is not None and fixes[k].expect in r["error"],
                  f"attempt {k}, rank {rank}: expected the failure fix {k + 1} addresses ({fixes[k].expect!r}), "
                  f"got {r['error']!r}")
    claim(all(r["error"] is None for r in ladder[-1]), f"with every fix train() should finish: {ladder[-1]}")
    keys = ladder[-1][0]["saved_keys"]
    claim(bool(keys) and all(k.startswith("module.") for k in keys),
          f"the article's torch.save(model.state_dict()) of the DDP model should save 'module.' keys: {keys}")
    return (f"{len(fixes)} attempts failed, each on every rank with the error its fix addresses; with all {len(fixes)} "
            f"fixes train() finished and saved keys like {keys[0]!r}")


def check_plain_lm(log: Sequence[str], ckpt: Sequence[str], files: Sequence[str], world: int) -> str:
    """The plain script: rank 0 logged a falling loss, and the checkpoint was committed with every rank's part."""
    losses = [float(ln.rsplit(" ", 1)[1]) for ln in log if ln.startswith("step ")]
    # From ~ln 60 = 4.1 nats: 20 AdamW steps at lr 3e-3 bring it well below (2.6 measured), on any CPU's kernels.
    claim(len(losses) == 2 and losses[-1] < losses[0] < 4.1, f"rank 0's loss should fall from below ln 60: {log}")
    claim(ckpt == ["step_20"], f"only the committed checkpoint should remain, no .tmp: {ckpt}")
    want = {".metadata", *(f"rng_rank{r}.pt" for r in range(world))}
    claim(want <= set(files) and sum(f.endswith(".distcp") for f in files) == world,
          f"the checkpoint should hold .metadata, one .distcp file and one RNG file per rank: {files}")
    return (f"rank 0's loss fell below ln 60 and kept falling; step_20 committed, no .tmp left, "
            f"with a part and an RNG file for each of {world} ranks")


def check_article_snippets(snippets: Sequence[Mapping[str, Any]]) -> str:
    """The article's §10.3 on every rank: checkpointing's undefined names and use_reentrant warning; the
    accumulation loop's 3-D criterion raises; AdamW runs."""
    for rank, sn in enumerate(snippets):
        claim("name 'd_model' is not defined" in sn["checkpointing"] and sn["checkpointing_defined"] == "ran"
              and any("use_reentrant" in w for w in sn["checkpointing_defined_warnings"]), f"rank {rank}: {sn}")
        claim("Expected target size" in sn["accumulation"], f"rank {rank}: accumulation: {sn['accumulation']}")
        claim(sn["adamw"] == "ran" and sn["adamw_type"] == "AdamW", f"rank {rank}: AdamW: {sn}")
    return (f"§10.3 on {len(snippets)} ranks: checkpointing needs d_model, nhead and warns about use_reentrant; "
            "criterion on 3-D logits raises; AdamW runs")


def check_training_run(val: Mapping[str, float], steps: int, result: Mapping[str, Any], live: Any) -> str:
    """The capstone run learned (validation loss fell by > 1 nat), DDP's keys, and the live plot saw every point."""
    claim(val[str(steps)] < val["0"] - 1.0,  # from uniform guessing (ln 60 = 4.1) to < 3.1
          f"validation loss should fall by more than 1 nat: {val}")
    claim(result["ddp_state_dict_key"].startswith("module."), f"DDP's state_dict key: {result['ddp_state_dict_key']}")
    claim([live.train[s] for s in range(steps)] == result["history"]["loss"]
          and live.val == {int(k): v for k, v in val.items()}, "the live plot missed points the run reported")
    return (f"validation loss fell by more than 1 nat per character; DDP's own state_dict keys start with 'module.'; "
            f"the live plot received all {len(live.train)} train and {len(live.val)} validation points")


def check_time_split(prof: Mapping[int, Mapping[str, float]], parts: Iterable[str], on_cpu: bool) -> str:
    """Per rank: the parts fill the profiled window, every collective ran inside a region; on CPU the ordering."""
    parts = list(parts)
    for rank, s in prof.items():
        total = sum(s[p + "_ms"] for p in parts)
        claim(abs(total - s["window_ms"]) < 1e-6 * s["window_ms"], f"rank {rank}: the parts do not fill the window: {s}")
        claim(all(s[p + "_ms"] >= 0 for p in parts) and s["communication_ms"] > 0, f"rank {rank}: {s}")
        # Gloo records a collective's span on its own worker thread, so the span's end can fall a little after
        # the main thread's region that waited for it has closed: an edge effect per step, not a share of the
        # communication (0.06-1.25 ms over 3 steps measured on an idle 2-core machine, where communication was
        # 10-57 ms). Hence 5 % of the communication plus 0.5 ms per profiled step.
        claim(s["comm_outside_regions_ms"] <= 0.05 * s["communication_ms"] + 0.5 * s["steps"],
              f"rank {rank}: collectives outside any region: {s}")
        if on_cpu:  # gloo on CPU runs collectives synchronously; on GPUs kernels are asynchronous
            claim(s["compute_share"] > s["communication_share"] > s["data_share"], f"rank {rank}: ordering {s}")
    return ("per rank: communication + data + compute + other = the profiled window; every collective ran inside a "
            "region" + ("; compute > communication > data" if on_cpu else ""))


def check_resumed_bitwise(a: Mapping[str, Any], b: Mapping[str, Any], resumed: Mapping[str, Any],
                          reference_losses: Sequence[float], resumed_from: int) -> float:
    """The killed-and-resumed run ends bit-identical to the uninterrupted one; returns the max difference (0.0)."""
    max_diff = max((a[k] - b[k]).abs().max().item() for k in a)
    claim(resumed["attempt"] == 1 and resumed["resumed_from"] == resumed_from,
          f"expected the second attempt to resume from step {resumed_from}: {resumed['attempt']=}, "
          f"{resumed['resumed_from']=}")
    claim(max_diff == 0.0, f"the resumed run's parameters differ from the uninterrupted run's by {max_diff}")
    claim(resumed["history"]["loss"] == list(reference_losses), "the resumed run's losses differ")
    return max_diff


def check_model_arithmetic(n_run: int, n_derived: int, flops_counted: float, flops_derived: int) -> str:
    """The run's model has exactly the derived parameter count, and torch's FLOP counter counts exactly the
    derived training FLOPs per token (both are integer counts of the same matmuls: no tolerance)."""
    claim(n_run == n_derived, f"the run's model has {n_run} parameters, the formula says {n_derived}")
    claim(flops_counted == flops_derived, f"FlopCounterMode counted {flops_counted} FLOPs per token, "
                                          f"the derivation {flops_derived}")
    return f"✓ N = {n_run:,} and {flops_derived:,} FLOPs per training token, counted exactly as derived"


def check_checkpoint_split(written: Mapping[str, int], n_params: int, n_tensors: int, world: int,
                           largest: int) -> str:
    """A DDP checkpoint's data files hold weights and AdamW's two moments once (12N bytes, plus one 4-byte step
    counter a parameter tensor), one file a rank, each within one tensor of an even share 12N/n (DCP hands
    whole tensors to the ranks, balancing their bytes)."""
    claim(sorted(written) == [f"__{r}_0.distcp" for r in range(world)], f"data files {sorted(written)}")
    total = sum(written.values())
    claim(total == 12 * n_params + 4 * n_tensors,
          f"the files hold {total} tensor bytes, expected 12N + 4 x {n_tensors} = {12 * n_params + 4 * n_tensors}")
    even = 12 * n_params / world
    worst = max(abs(b - even) for b in written.values())
    claim(worst <= largest, f"a rank wrote {worst:.0f} bytes off an even share {even:.0f}, more than the largest "
                            f"tensor ({largest} bytes)")
    return (f"✓ the files hold 12N + {4 * n_tensors} bytes of tensors, each rank within {100 * worst / even:.2f} % "
            f"of 12N/{world}")
