"""Chapter 6's named checks: the split model is the one-process model, one rank computes at a time, the article's
RPC code fails as it says, its fixed calls give no gradient, and the RPC training matches one process."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from disttutor.checks.claims.base import claim


def _close(got: Sequence[float], want: Sequence[float], rtol: float, atol: float = 0.0) -> bool:
    """``torch.testing.assert_close``'s rule, element-wise: |got - want| <= atol + rtol * |want|."""
    return len(got) == len(want) and all(abs(a - b) <= atol + rtol * abs(b) for a, b in zip(got, want))


def check_split_model(rows: Sequence[Mapping[str, Any]], losses: Sequence[float], ref_losses: Sequence[float]) -> str:
    """Every rank's stage equals the same slice of the unsplit model trained in one process, and the last rank's
    loss equals the single-process loss at every step."""
    bad = [r["rank"] for r in rows if not r["matches reference"]]
    claim(not bad, f"rank(s) {bad}: the stage's parameters differ from the same slice of the one-process model")
    # same float32 ops in the same order: 1e-5 relative leaves room only for rounding in the loss's sum
    claim(_close(losses, ref_losses, rtol=1e-5), f"last rank's losses {list(losses)} vs one process {list(ref_losses)}")
    return f"✓ all {len(rows)} stages = the one-process model's slices, and the last rank's losses = one process's (to float32 rounding)"


def check_one_rank_at_a_time(overlap_s: float, results: Sequence[Mapping[str, Any]], window_s: float) -> str:
    """Compute spans of different ranks never overlap, so all ranks' compute fits in the window (the average rank
    idles at least (n-1)/n of it)."""
    # 1e-5 s: the report rounds timestamps to 1 us
    claim(overlap_s < 1e-5, f"two ranks computed at once for {overlap_s * 1e3:.3f} ms")
    total = sum(x["compute_s"] for x in results)
    claim(total <= window_s + 1e-5, f"the ranks' compute ({total:.6f} s) exceeds the window ({window_s:.6f} s)")
    return (f"✓ two ranks computed at once for {overlap_s * 1e3:.3f} ms; all ranks' compute is "
            f"{total / window_s:.2f} of the window")


def check_article_rpc_fails(art: Any) -> str:
    """The article's RPC model, as written, fails on the master: it passes an RRef where a Tensor must go."""
    claim(not art.ok and art.ranks[0].status == "error", f"the article's code should fail on the master: {art.summary()}")
    err = art.ranks[0].error or ""
    claim("must be Tensor" in err and "PyRRef" in err, f"expected 'must be Tensor, not PyRRef': {err[:200]!r}")
    return "✓ as written, the master fails: a PyRRef is passed where a Tensor must be"


def check_no_remote_grads(out: Mapping[str, Any], shape: Sequence[int], empty_error: str | None = None) -> str:
    """With the calls fixed the forward runs (the output requires grad), yet no worker's parameter gets a .grad:
    local autograd stops at the RPC boundary. With ``empty_error`` (what ``optim.SGD([])`` raised), also: the
    master holds no parameter, so a local optimizer over its model cannot even be built."""
    claim(out["output_shape"] == list(shape) and out["output_requires_grad"],
          f"output shape {out['output_shape']} (expected {list(shape)}), requires_grad {out['output_requires_grad']}")
    bad = {w: (g, n) for w, (g, n) in out["remote_grads"].items() if not (g == 0 and n > 0)}
    claim(not bad, f"workers whose parameters got a .grad (or have none): {bad}")
    if empty_error is None:
        return "✓ the forward runs and requires grad, and no worker's parameter received a gradient"
    claim(out["local_params"] == 0, f"the master's model should hold no parameter: {out['local_params']}")
    claim("empty parameter list" in empty_error, f"optim.SGD([]) should raise on the empty list: {empty_error!r}")
    return (f"✓ no worker's parameter got a .grad; the master holds {out['local_params']} parameters, "
            f"and optim.SGD over them raises: {empty_error}")


def check_rpc_training(rows: Sequence[Mapping[str, Any]], losses_match: bool, ref_losses: Sequence[float]) -> str:
    """Every worker's stage changed, matches the one-process training and never had a local .grad; the master's
    losses match one process's and go down."""
    bad = [r["worker"] for r in rows if not (r["changed"] and r["matches reference"] and r[".grad stayed None"])]
    claim(not bad, f"{bad}: unchanged, different from one process, or with a local .grad: {rows}")
    claim(losses_match, "the master's losses differ from the single-process losses")
    claim(ref_losses[-1] < ref_losses[0], f"the loss should go down: {list(ref_losses)}")
    return (f"✓ every worker's stage = one process's training (to float32 rounding), through dist_autograd alone; "
            f"loss {ref_losses[0]:.3f} -> {ref_losses[-1]:.3f}")


def check_one_process_split(split: Sequence[Any], whole: Sequence[Any], same_device: bool) -> str:
    """The model split over two devices with ``.to(device)`` trains to the parameters of the unsplit model.

    On one device (both parts on the CPU) the same ops run in the same order: bit-identical. Across two
    GPUs the kernels are the same but run on other devices: float32 rounding, 1e-6 relative.
    """
    import torch

    claim(len(split) == len(whole), f"{len(split)} parameter tensors split, {len(whole)} unsplit")
    if same_device:
        same = all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(split, whole))
        claim(same, "on one device the split model should train bit-identically to the unsplit one")
        return f"✓ {len(split)} parameter tensors after training: bit-identical to the unsplit model (same ops, same order)"
    close = all(torch.allclose(a.cpu(), b.cpu(), rtol=1e-6, atol=1e-7) for a, b in zip(split, whole))
    claim(close, "across devices the split model should match the unsplit one to float32 rounding")
    return f"✓ {len(split)} parameter tensors after training: the unsplit model's, within float32 rounding"


def check_rpc_warnings(seen: Sequence[str]) -> str:
    """This torch's RPC stack warns of its own deprecations: RPC init (a 2.0 API) and the TorchScript optimizer."""
    init = any("deprecated since PyTorch 2.0" in w for w in seen)
    script = any("TorchScript" in w and "deprecated" in w for w in seen)
    claim(init and script, f"expected the RPC init and TorchScript deprecation warnings, got: {list(seen)}")
    return (f"✓ {len(seen)} distinct warnings, among them: RPC init uses an API deprecated since PyTorch 2.0, "
            "DistributedOptimizer's TorchScript is deprecated")
