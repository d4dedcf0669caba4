"""Chapter 4's named checks: what the DDP wrap broadcasts, the sampler's epochs, DDP == one process, the
gradients DDP averages, and what ``find_unused_parameters`` is for."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from disttutor.checks.claims.base import claim


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
    return (f"the wrap gave all {len(results)} ranks rank 0's weights; one dataset, one averaged loss, identical "
            f"trained replicas; {len(set(article))} different article datasets; saved without 'module.', "
            "loaded on every rank")


def check_set_epoch(with_epoch: Sequence[Sequence[int]], without_epoch: Sequence[Sequence[int]],
                    coverage_drop_last: Mapping[str, int], samples: int, world: int) -> str:
    """``set_epoch`` gives a fresh shuffle every epoch, without it every epoch repeats epoch 0's order;
    ``drop_last=True`` hands out floor(samples / world) * world distinct indices, none repeated."""
    claim(all(a != b for a, b in zip(with_epoch, with_epoch[1:])),
          "with set_epoch two consecutive epochs had the same order")
    claim(all(o == without_epoch[0] for o in without_epoch), "without set_epoch the epochs' orders differ")
    kept = samples // world * world
    want = {"handed": kept, "distinct": kept, "repeated": 0}
    claim(dict(coverage_drop_last) == want, f"drop_last=True: {dict(coverage_drop_last)}, expected {want}")
    return (f"set_epoch: a new order every epoch; without it: the same order {len(without_epoch)} epochs running; "
            f"drop_last: {kept} distinct indices, no repeats")


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
