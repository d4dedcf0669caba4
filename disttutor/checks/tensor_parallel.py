"""Checkers for Exercises 12.1 (the row-parallel linear's backward) and 12.3 (the online-softmax merge).

* 12.1 ``RowParallelLinear``: a ``torch.autograd.Function`` whose forward (given) computes
  ``all_reduce(x_shard @ w_shard.T) + bias``; the learner writes ``backward``. On 2 ranks each
  rank's three gradients are compared with the matching slices of the unsplit ``nn.Linear``'s, and
  the collectives ``backward`` calls are recorded: it needs none (its output gradient is already
  the same on every rank), so an all-reduce there is rejected even when the numbers come out right.
* 12.3 ``merge(out_a, lse_a, out_b, lse_b)``: first on cases chosen to catch the usual mistakes
  (blocks of very different weight, logits large enough to overflow ``exp``, blocks that saw no key),
  then inside :func:`disttutor.tensor_parallel.ring_attention.ring_attention` on the ranks, against
  full causal attention.

This module is also the rank-side program
(``python -m disttutor.checks.tensor_parallel --source F --name merge --exercise merge``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, run_check
from disttutor.checks.tolerances import SPLIT_TENSOR_ATOL
from disttutor.contract.options import cli, opt

COLLECTIVE_TIMEOUT_S = 20.0


def check_row_parallel(cls: Callable | str, nproc: int = 2) -> CheckResult:
    """Exercise 12.1: ``RowParallelLinear.backward`` -> (grad_x_shard, grad_w_shard, grad_bias)."""
    return run_check("12.1", "disttutor.checks.tensor_parallel", cls, function_name(cls, "RowParallelLinear"),
                     nproc, args={"exercise": "row"}, timeout=JOB_TIMEOUT_S, collective_timeout=COLLECTIVE_TIMEOUT_S,
                     hint="a rank waits in a collective the other never calls: backward should call none")


def check_merge(fn: Callable | str, nproc: int = 2) -> CheckResult:
    """Exercise 12.3: ``merge(out_a, lse_a, out_b, lse_b) -> (out, lse)``, the online-softmax step."""
    return run_check("12.3", "disttutor.checks.tensor_parallel", fn, function_name(fn, "merge"), nproc,
                     args={"exercise": "merge"}, timeout=JOB_TIMEOUT_S, collective_timeout=COLLECTIVE_TIMEOUT_S)


@dataclass(frozen=True)
class TPCheck(LearnerCode):
    exercise: Literal["row", "merge"] = opt("row", "which exercise")


def _ratio(got, want) -> float | None:
    """got / want if got is (nearly) a multiple of want, else None."""
    denom = (want * want).sum().item()
    if denom == 0:
        return None
    k = (got * want).sum().item() / denom
    return k if (got - k * want).abs().max().item() <= 1e-4 * max(1.0, want.abs().max().item()) else None


def _row(cls, rank: int, world: int) -> dict[str, Any]:
    import torch
    from torch import nn

    from disttutor.tensor_parallel.counting import recording

    torch.manual_seed(0)
    full = nn.Linear(8, 6)
    x = torch.randn(5, 8, requires_grad=True)
    full(x).pow(2).sum().backward()            # the reference: one process, the whole layer
    cols = slice(rank * 8 // world, (rank + 1) * 8 // world)
    xs = x.detach()[:, cols].clone().requires_grad_()
    ws = full.weight.detach()[:, cols].clone().requires_grad_()
    b = full.bias.detach().clone().requires_grad_()
    y = cls.apply(xs, ws, b)
    if (y - full(x)).abs().max().item() > SPLIT_TENSOR_ATOL:
        return {"passed": False, "problem": "the forward no longer gives the layer's output: keep the given forward"}
    names = ("grad_x_shard", "grad_w_shard", "grad_bias")
    with recording() as rec:
        try:
            y.pow(2).sum().backward()
        except RuntimeError as e:  # autograd checks the shapes: say it with the exercise's names
            import re

            m = re.search(r"invalid gradient at index (\d) - got \[([\d, ]*)\] but expected shape compatible with "
                          r"\[([\d, ]*)\]", str(e))
            if not m:
                raise
            return {"passed": False, "problem": (
                f"{names[int(m.group(1))]} has shape [{m.group(2)}], expected [{m.group(3)}]: a gradient has the "
                "shape of the tensor it belongs to (check which side of the matmul each factor goes, and its "
                "transpose)")}
    if rec.calls:
        calls = ", ".join(f"{k} x{v}" for k, v in rec.counts().items())
        return {"passed": False, "problem": (
            f"backward called {calls}: the output was all-reduced, so grad_y is already the same on every rank "
            "and each gradient here can be computed from this rank's own tensors -- no communication "
            "(an all-reduce of identical tensors only multiplies them by the world size)")}
    want = {"grad_x_shard": x.grad[:, cols], "grad_w_shard": full.weight.grad[:, cols], "grad_bias": full.bias.grad}
    got = {"grad_x_shard": xs.grad, "grad_w_shard": ws.grad, "grad_bias": b.grad}
    for name, w in want.items():
        g = got[name]
        if g is None:
            return {"passed": False, "problem": f"{name} is None: backward must return a gradient for each input"}
        if g.shape != w.shape:
            return {"passed": False, "problem": (
                f"{name} has shape {list(g.shape)}, expected {list(w.shape)}: a gradient has the shape of the "
                "tensor it belongs to (check which side of the matmul each factor goes and its transpose)")}
        if (g - w).abs().max().item() > SPLIT_TENSOR_ATOL:
            k = _ratio(g, w)
            why = {world: f" -- {world}x too large, as if summed over the {world} ranks",
                   1 / world: f" -- 1/{world} of it: the bias is added once to the whole output, its "
                              "gradient is not split"}.get(round(k, 6) if k else None, "") if k else ""
            return {"passed": False, "problem": (
                f"{name} differs from the unsplit layer's by {(g - w).abs().max().item():.3g}{why}")}
    return {"passed": True}


def _cases(merge) -> str | None:
    """Single-process cases, each aimed at one mistake; a problem in words, or None."""
    import torch

    from disttutor.tensor_parallel.ring_attention import block_attention

    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    for scale, what in ((1.0, "ordinary logits"), (300.0, "large logits (attention scores in the hundreds)")):
        ref, ref_lse = block_attention(q * scale, k, v, causal=False)
        # the large case must really overflow a naive exp (float32's exp is inf above ~88.7)
        assert scale == 1.0 or ref_lse.max().item() > 89, "the overflow case does not overflow"
        a, la = block_attention(q * scale, k[:, :, :2], v[:, :, :2], causal=False)   # keys 0-1 ...
        b, lb = block_attention(q * scale, k[:, :, 2:], v[:, :, 2:], causal=False)   # ... and 2-5
        out, lse = merge(a, la, b, lb)
        if not (torch.isfinite(out).all() and torch.isfinite(lse).all()):
            return (f"with {what} the result has inf or nan: exp(lse) overflows float32 once lse > 88; "
                    "weigh each block by exp(lse_a - lse) with lse = logaddexp(lse_a, lse_b)")
        if (lse - ref_lse).abs().max().item() > SPLIT_TENSOR_ATOL * max(1.0, ref_lse.abs().max().item()):
            return (f"with {what} the returned lse is not the log-sum-exp over both blocks: "
                    "lse = log(e^lse_a + e^lse_b) (torch.logaddexp), not their max or sum")
        if (out - ref).abs().max().item() > SPLIT_TENSOR_ATOL:
            avg = (a + b) / 2
            hint = (" -- that is the plain average: a block's weight is its share of the softmax denominator, "
                    "e^lse_a / (e^lse_a + e^lse_b)") if (out - avg).abs().max().item() < 1e-6 else ""
            return f"with {what} (2 keys + 4 keys) the merged output is not attention over all 6 keys{hint}"
    empty_out, empty_lse = torch.zeros(1, 2, 4, 8), torch.full((1, 2, 4), float("-inf"))
    a, la = block_attention(q, k, v, causal=False)
    out, lse = merge(a, la, empty_out, empty_lse)
    if not torch.isfinite(out).all() or (out - a).abs().max().item() > SPLIT_TENSOR_ATOL:
        return ("merging with a block that saw no key (lse = -inf, output 0) must give the other block unchanged "
                f"(got a difference of {(out - a).abs().max().item():.3g}); ring attention starts from such an "
                "empty result")
    out, lse = merge(empty_out, empty_lse, empty_out, empty_lse)
    if torch.isnan(out).any() or not torch.isneginf(lse).all():
        return ("merging two blocks that both saw no key must give output 0 and lse -inf, not nan: "
                "exp(-inf - (-inf)) is nan -- measure the weights from 0 where lse is -inf")
    return None


def _merge(merge, rank: int, world: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from disttutor.tensor_parallel.ring_attention import ring_attention

    problem = _cases(merge)
    if problem:
        return {"passed": False, "problem": problem}
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 2, 4 * world, 8) * 3 for _ in range(3))
    mine = slice(rank * 4, (rank + 1) * 4)
    out = ring_attention(q[:, :, mine], k[:, :, mine], v[:, :, mine], merge_fn=merge)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, :, mine]
    diff = (out - ref).abs().max().item()
    if not diff <= SPLIT_TENSOR_ATOL:
        return {"passed": False, "problem": f"ring attention with your merge differs from full causal attention "
                                            f"by {diff:.3g} on this rank's queries"}
    return {"passed": True, "ring_diff": diff}


def _run(cfg: TPCheck) -> None:
    from disttutor.checks.adapter import load_exercise
    from disttutor.rank import runtime

    with runtime.setup() as ctx:
        obj = load_exercise(cfg.source, cfg.name)
        runtime.report(**(_row if cfg.exercise == "row" else _merge)(obj, ctx.rank, ctx.world_size))


main = cli(TPCheck, _run)

if __name__ == "__main__":
    main()
