"""Named one-line checks for the claims a chapter makes about its runs (kernel side).

A chapter cell reads ``check_resumed_bitwise(ref, resumed)`` instead of five ``assert`` lines of
plumbing: each check states one claim, raises an :class:`AssertionError` whose message says what
failed and with which values, and returns a one-line verdict the cell prints. Tolerances are
arguments with the reason beside the call (or here, where the claim fixes them).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence


def claim(ok: bool, message: str) -> None:
    """``assert ok, message`` that survives ``python -O`` and reads as a sentence."""
    if not ok:
        raise AssertionError(message)


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


# ---- chapter 3 --------------------------------------------------------------------------------

def check_dp_training(article: Any, fixed: Any, uniform_loss: float) -> str:
    """The article's DP loop on random labels learns nothing; on learnable data it does; its print is a partial batch."""
    claim(article.epoch_loss[-1] > 0.97 * uniform_loss,  # 3 %: what 3 epochs of memorising 1000 samples can gain
          f"random labels should stay near ln(10) = {uniform_loss:.3f}: {article.epoch_loss}")
    claim(fixed.epoch_loss[-1] < 0.6 * uniform_loss, f"learnable blobs should be learned: {fixed.epoch_loss}")
    claim(all(b < a for a, b in zip(fixed.epoch_loss, fixed.epoch_loss[1:])), f"not decreasing: {fixed.epoch_loss}")
    claim(fixed.last_batch_size < 64, f"the article prints the loss of a full batch? {fixed.last_batch_size}")
    return "random labels: nothing learned; learnable data: learned, every epoch lower; the printed loss is a partial batch"


def check_dp_traffic(through: Mapping, others: Mapping, runs: Mapping, S: int, textbook: Any) -> str:
    """Rank 0 is DataParallel's hot spot (N-1 times any other device); the ring is even and under 2S per rank."""
    ns = sorted(runs)
    growth = [through[(n + 1, "dp-copy")] - through[(n, "dp-copy")] for n in ns[:-1]]
    claim(all(g > 2 * S for g in growth), f"each extra device should add more than 2S = {2 * S} to rank 0: {growth}")
    claim(all(through[(n, "dp-copy")] == (n - 1) * others[(n, "dp-copy")] for n in ns),
          "with copies rank 0 should carry exactly N-1 times what any other device carries")
    # 1e-3: the ring's chunks differ by at most one element when S/N is not whole
    claim(all(abs(through[(n, "ddp-ring")] / others[(n, "ddp-ring")] - 1) < 1e-3 for n in ns), "the ring is uneven")
    claim(all(runs[n][k]["ddp-ring"]["sent"] < 2 * S for n in ns for k in range(n)), "a ring rank sent 2S or more")
    claim(all(abs(runs[n][0]["ddp-ring"]["sent"] - textbook(S // 4, n)) <= 4 * n for n in ns),
          "the ring's bytes differ from 2(N-1)/N*S by more than a chunk's rounding")
    claim(through[(ns[-1], "dp-copy")] > 2 * through[(ns[-1], "ddp-ring")], "dp-copy should carry > 2x the ring")
    return (f"rank 0 carries N-1 times any other device's bytes with copies and grows by > 2S per device; the ring "
            f"is even, under 2S per rank, and matches 2(N-1)/N*S")


def check_same_training(table: Sequence[Mapping[str, Any]], losses: Mapping, ref_losses: Sequence[float]) -> str:
    """Every pattern trains the same model as one process; DP's reduce is a SUM, and an average would be wrong."""
    claim(all(r["params match 1 process"] for r in table), [r for r in table if not r["params match 1 process"]])
    claim(all(r["sum == full grad"] and not r["average == full grad"] for r in table if "sum == full grad" in r),
          "the reduced gradient should equal the full-batch gradient as a SUM, not as an average")
    for key, ls in losses.items():  # 1e-5: float32 sums in a different order
        claim(all(abs(a - b) < 1e-5 for a, b in zip(ls, ref_losses)), f"{key}: losses {ls} vs {list(ref_losses)}")
    return "every pattern, every N: the parameters and losses of one process (to float32 rounding); the SUM is right"
