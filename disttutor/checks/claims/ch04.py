"""Chapter 4's named checks: the plain script's run, what the DDP wrap broadcasts, the sampler's epochs,
DDP == one process, the order of gradients and all-reduces, the gradients DDP averages, what
``find_unused_parameters`` is for, uneven inputs with and without ``Join``, and what overlap saved."""
from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

import torch

from disttutor.checks.claims.base import claim


def check_plain_script(logs: Sequence[Sequence[str]], samples: int, saved: bool) -> str:
    """The learner's script under torchrun: every rank saw ceil(samples / world) samples an epoch, rank 0
    printed one all-reduced loss per epoch over all ``samples`` (falling), and rank 0 saved its checkpoint."""
    world = len(logs)
    per = math.ceil(samples / world)
    for rank, log in enumerate(logs):
        claim(f"rank {rank}: {per} samples an epoch" in log,
              f"rank {rank} should print 'rank {rank}: {per} samples an epoch'; it printed {list(log)[-3:]}")
    epochs = [re.fullmatch(r"epoch \d+: loss ([0-9.]+) over (\d+) samples", ln) for ln in logs[0]]
    epochs = [m for m in epochs if m]
    claim(len(epochs) >= 2, f"rank 0 printed {len(epochs)} epoch lines; expected one per epoch")
    claim(all(int(m[2]) == per * world for m in epochs),
          f"each epoch's loss should be over all {per * world} samples: {[int(m[2]) for m in epochs]}")
    losses = [float(m[1]) for m in epochs]
    claim(losses[-1] < losses[0], f"the loss did not fall: {losses}")
    claim(saved, "rank 0's checkpoint ddp_train.pt is missing")
    return (f"{world} ranks: {per} samples each an epoch; loss over all {per * world} samples "
            f"{losses[0]:.2f} -> {losses[-1]:.2f} (falling); checkpoint saved")


def check_ddp_run(results: Sequence[Mapping[str, Any]]) -> str:
    """The wrap broadcasts rank 0's weights; one dataset, identical trained replicas and one averaged loss; the
    article's unseeded dataset differs on every rank; ``.module`` saves plain keys, the wrapper "module." ones,
    and every rank loaded rank 0's checkpoint."""
    r0 = results[0]
    before = [r["init_sum_before_wrap"] for r in results]
    claim(len(set(before)) == len(results), f"each rank should start from its own weights: {before}")
    after = [r["init_sum_after_wrap"] for r in results]
    claim(all(a == before[0] for a in after), f"after the wrap every rank should hold rank 0's weights "
                                              f"({before[0]}): {after}")
    for key in ("data_sha", "final_sha", "epoch_loss"):  # the averaged loss is one number, the same on every rank
        claim(all(r[key] == r0[key] for r in results),
              f"{key} should be the same on every rank: {[r[key] for r in results]}")
    article = [r["article_data_sha"] for r in results]
    claim(len(set(article)) == len(results), f"the article's unseeded datasets should all differ: {article}")
    claim(not any(k.startswith("module.") for k in r0["saved_keys"]), f"saved keys carry 'module.': {r0['saved_keys']}")
    claim(all(k.startswith("module.") for k in r0["ddp_keys"]), f"DDP's own keys lack 'module.': {r0['ddp_keys']}")
    claim(all(r["loaded_equal"] for r in results), f"loaded_equal per rank: {[r['loaded_equal'] for r in results]}")
    return (f"all {len(results)} ranks got rank 0's weights, one dataset, identical replicas; the article's unseeded "
            f"data: {len(set(article))} datasets")


def check_set_epoch(with_epoch: Sequence[Sequence[int]], without_epoch: Sequence[Sequence[int]],
                    coverage_drop_last: Mapping[str, int], samples: int, world: int,
                    padded: Mapping[str, int] | None = None) -> str:
    """``set_epoch`` gives a fresh shuffle every epoch, without it every epoch repeats epoch 0's order;
    ``drop_last=True`` hands out floor(samples / world) * world distinct indices, none repeated; by default
    (``padded``, if given) ceil(samples / world) * world indices, every sample once and the rest repeated."""
    claim(all(a != b for a, b in zip(with_epoch, with_epoch[1:])),
          "with set_epoch two consecutive epochs had the same order")
    claim(all(o == without_epoch[0] for o in without_epoch), "without set_epoch the epochs' orders differ")
    kept = samples // world * world
    want = {"handed": kept, "distinct": kept, "repeated": 0}
    claim(dict(coverage_drop_last) == want, f"drop_last=True: {dict(coverage_drop_last)}, expected {want}")
    if padded is not None:
        handed = math.ceil(samples / world) * world
        pad = {"handed": handed, "distinct": samples, "repeated": handed - samples}
        claim(dict(padded) == pad, f"padding (the default): {dict(padded)}, expected {pad}")
    pads = "" if padded is None else f"padding: {padded['repeated']} repeats; "
    return (f"{pads}set_epoch: a new order every epoch; without it: one order {len(without_epoch)} epochs running; "
            f"drop_last: {kept} distinct, no repeats")


def check_equals_single_process(name: str, runs: Sequence[Mapping[str, Any]], rtol: float) -> str:
    """After every step, every rank's model equals the single-process model trained on the full batch, to
    ``rtol`` relative to the largest parameter (fp32 summation-order noise is ~1e-7 a step, a bug > 1e-2)."""
    for rank, r in enumerate(runs):
        errs = r["max_rel_err"]
        claim(bool(errs) and max(errs) < rtol,
              f"{name}, rank {rank}: max relative error per step {errs}, allowed < {rtol:g}")
    return f"{name} on {len(runs)} ranks == single process on the full batch, every step, within {rtol:g}"


def check_ddp_gradients(g_ddp: Sequence[torch.Tensor], g_local: Sequence[torch.Tensor]) -> str:
    """Live DDP: every rank holds the very same gradient bits, their value is the mean of the ranks' local
    gradients, and those local gradients differ (each rank had its own batch)."""
    claim(all(torch.equal(g, g_ddp[0]) for g in g_ddp), "DDP's gradients differ between ranks")
    mean = torch.stack(list(g_local)).mean(0)
    # float32 sums in a different order differ in the last bits: compare with a tolerance
    # (torch.allclose's rtol 1e-5, atol 1e-6)
    diff = (g_ddp[0] - mean).abs().max().item()
    claim(torch.allclose(g_ddp[0], sum(g_local[1:], g_local[0]) / len(g_local), atol=1e-6),
          f"DDP's gradient is not the mean of the local ones: max difference {diff:.2e}")
    claim(not torch.allclose(g_local[0], g_local[1]), "the ranks' local gradients should differ (own batches)")
    return "DDP gradient == mean of the ranks' local gradients, on every rank"


def check_unused_parameters(results: Sequence[Mapping[str, Any]]) -> str:
    """A parameter forward never uses: without ``find_unused_parameters`` DDP fails at the next step (step 1),
    with it every rank trains."""
    without = results[0]["find_unused_False"]
    claim(without.startswith("RuntimeError at step 1"), f"without the flag: {without!r}")
    claim(all(r["find_unused_True"] == "ok" for r in results),
          f"with the flag: {[r['find_unused_True'] for r in results]}")
    return "without find_unused_parameters: a RuntimeError at step 1; with it: every rank trains"


def check_overlap_order(trace: Sequence[Sequence[Any]], first_layer: str) -> str:
    """DDP's trace of one backward: the first all-reduce was launched while gradients were still to come,
    among them the first layer's (communication began before backward reached the first layer)."""
    kinds = [kind for kind, _ in trace]
    claim("launch" in kinds, f"no all-reduce was launched in the trace: {list(trace)}")
    first = kinds.index("launch")
    after = [what for kind, what in trace[first:] if kind == "grad"]
    claim(first_layer in after, f"the first all-reduce started after {first_layer}'s gradient: {list(trace)}")
    return f"the first all-reduce started with {len(after)} gradients still to compute, {first_layer} among them"


def check_join(uneven, joined) -> str:
    """One rank a batch short: without ``Join`` the job fails (the collectives no longer match) and ends;
    with ``Join`` every rank finishes, the short rank ran fewer batches, and the replicas are identical."""
    claim(not uneven.ok, "without Join, a rank a batch short should make the job fail")
    failed = [r.rank for r in uneven.ranks if r.status != "ok"]
    claim(bool(failed), f"without Join no rank failed: {[r.status for r in uneven.ranks]}")
    claim(joined.ok, f"with Join the job should finish: {[r.status for r in joined.ranks]}")
    batches = [sum(r["batches"]) for r in joined.results]
    claim(min(batches) < max(batches), f"with Join one rank should run fewer batches: {batches}")
    claim(len({r["final_sha"] for r in joined.results}) == 1, "with Join the trained replicas differ")
    return (f"without Join: rank(s) {failed} failed; with Join: {len(batches)} ranks finished, "
            f"{max(batches) - min(batches)} batches apart over {len(joined.results[0]['batches'])} epochs, identical replicas")


def overlap_verdict(o: Mapping[str, float], quiet: bool) -> str:
    """DDP's bucketed overlap against the same buckets sent after backward, on an emulated link: the
    numbers and their direction. Asserted only on a quiet machine (``quiet``), where overlap must win."""
    ov, de = 1e3 * o["overlap_s"], 1e3 * o["deferred_s"]
    c, m = 1e3 * o["compute_s"], 1e3 * o["comm_s"]
    claim(min(ov, de, c, m) > 0, f"every timing should be positive: {dict(o)}")
    if quiet:  # timing is asserted only on a quiet machine (disttutor.quiet): elsewhere it is printed
        claim(ov < de, f"on a quiet machine overlap should beat no overlap: {ov:.0f} vs {de:.0f} ms")
    late = f"; {o['late']} of {o['transfers']} transfers outlasted the link" if o.get("late") else ""
    if ov < de:
        return f"overlap: {ov:.0f} ms a step, {ov / de:.2f}x the {de:.0f} ms without it (faster){late}"
    return f"overlap: {ov:.0f} ms a step, {ov / de:.2f}x the {de:.0f} ms without it (not faster in this run){late}"
