"""Chapter 3's named checks: DataParallel's source, its training, its traffic, every pattern trains the same model."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from disttutor.checks.claims.base import claim


# ---- chapter 3 --------------------------------------------------------------------------------

def check_dp_source(quote: Callable[..., list[str]], dp_cls: Any, parallel_apply: Any, functions: Any) -> str:
    """The installed source does the three costs: a replica every forward, one thread per replica, outputs to device 0.

    ``quote`` is ``source_lines`` (raises LookupError when a line is gone: a torch release changed the code).
    """
    forward = quote(dp_cls.forward, "self.replicate(", "self.parallel_apply(", "return self.gather(")
    claim(len(forward) == 3, f"forward should replicate, apply and gather once each: {forward}")
    threads = quote(parallel_apply, "threading.Thread(")
    out0 = quote(dp_cls.__init__, "output_device = device_ids[0]")
    backward = quote(functions.Broadcast.backward, "ReduceAddCoalesced.apply")
    claim(bool(threads and out0 and backward), "a quoted line is missing")
    return "✓ installed source: replicate every forward, a thread per replica, gather on device_ids[0], backward sums"


def check_cuda_after_wrap(wrapped: Any, inner: Any, dtype: Any, quote: Callable[..., list[str]], module_cls: Any) -> str:
    """The article's ``DataParallel(model)`` then ``.cuda()`` is right: the wrapper's move reaches the wrapped module.

    ``wrapped`` was moved with ``.to(dtype)`` after wrapping (``.cuda()`` runs the same ``_apply`` over the
    registered submodule ``module``); ``Module.cuda`` with no argument moves to the current device, cuda:0
    unless changed, which is ``device_ids[0]`` by default.
    """
    claim(wrapped.module is inner, "DataParallel should hold the very module it wraps")
    got = {p.dtype for p in inner.parameters()}
    claim(got == {dtype}, f"moving the wrapper should move the wrapped module's parameters: {got}")
    claim(bool(quote(module_cls.cuda, "self._apply(lambda t: t.cuda(device))")), "Module.cuda changed")
    return f"✓ wrapper.to({dtype}) moved the wrapped module's parameters: wrap-then-.cuda() is fine before any forward"


def check_dp_training(article: Any, fixed: Any, uniform_loss: float) -> str:
    """The article's DP loop on random labels learns nothing; on learnable data it does; its print is a partial batch."""
    claim(article.epoch_loss[-1] > 0.97 * uniform_loss,  # 3 %: what 3 epochs of memorising 1000 samples can gain
          f"random labels should stay near ln(10) = {uniform_loss:.3f}: {article.epoch_loss}")
    claim(fixed.epoch_loss[-1] < 0.6 * uniform_loss, f"learnable blobs should be learned: {fixed.epoch_loss}")
    claim(all(b < a for a, b in zip(fixed.epoch_loss, fixed.epoch_loss[1:])), f"not decreasing: {fixed.epoch_loss}")
    claim(fixed.last_batch_size < 64, f"the article prints the loss of a full batch? {fixed.last_batch_size}")
    return (f"✓ random labels: epoch loss {article.epoch_loss[-1]:.3f}, above 0.97 x ln(10); blobs: "
            f"{fixed.epoch_loss[0]:.3f} -> {fixed.epoch_loss[-1]:.3f}; last batch {fixed.last_batch_size} samples")


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
    n = ns[-1]
    most = max(runs[m][k]["ddp-ring"]["sent"] for m in ns for k in range(m)) / S
    return (f"✓ N={n}: rank 0 carries {through[(n, 'dp-copy')] / others[(n, 'dp-copy')]:.0f}x another device with "
            f"copies, {through[(n, 'dp-chain')] / others[(n, 'dp-chain')]:.2f}x with a chain; "
            f"a ring rank sends at most {most:.2f}S, under 2S")


def check_same_training(table: Sequence[Mapping[str, Any]], losses: Mapping, ref_losses: Sequence[float]) -> str:
    """Every pattern trains the same model as one process; DP's reduce is a SUM, and an average would be wrong."""
    claim(all(r["params match 1 process"] for r in table), [r for r in table if not r["params match 1 process"]])
    claim(all(r["sum == full grad"] and not r["average == full grad"] for r in table if "sum == full grad" in r),
          "the reduced gradient should equal the full-batch gradient as a SUM, not as an average")
    for key, ls in losses.items():  # 1e-5: float32 sums in a different order
        claim(all(abs(a - b) < 1e-5 for a, b in zip(ls, ref_losses)), f"{key}: losses {ls} vs {list(ref_losses)}")
    return (f"✓ {len(table)} runs: parameters and losses of one process within float32 rounding; "
            "the SUM of gradients matches, the average does not")
