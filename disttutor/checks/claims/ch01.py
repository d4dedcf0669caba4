"""Chapter 1's named checks: the memory formulas against real tensors, and what each parallelism splits."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from disttutor.checks.claims.base import claim
from disttutor.sharding import memory as mem

STATES = ("weights", "gradients", "optimizer")


def _close(got: Any, want: torch.Tensor, what: str, **tol: float) -> None:
    """``torch.testing.assert_close`` whose message starts with what was compared."""
    try:
        torch.testing.assert_close(torch.as_tensor(got), want, **tol)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


def _cover(held: Sequence[Sequence[int]], n: int, what: str) -> None:
    claim(sorted(i for h in held for i in h) == list(range(n)),
          f"every one of the {n} {what} should be on exactly one rank: {list(map(list, held))}")


def check_state_bytes(measured: Mapping[str, Mapping[str, int]], P: int, n_tensors: int) -> str:
    """The fp32 rows of the bytes-per-parameter table are the bytes PyTorch allocates, exactly, for every
    optimizer; Adam's ``step`` is one fp32 scalar per parameter *tensor*, not per parameter."""
    for name, got in measured.items():
        want = mem.bytes_per_param("fp32", name)
        for part in STATES:
            claim(got[part] == want[part] * P,
                  f"{name}, {part}: measured {got[part]} B, the table says {want[part]} B x {P} = {want[part] * P} B")
    claim(measured["adam"]["step_counters"] == 4 * n_tensors,
          f"Adam's step counters: {measured['adam']['step_counters']} B, expected 4 B x {n_tensors} tensors")
    return (f"{', '.join(measured)}: weights, gradients and optimizer states are exactly the table's fp32 bytes per "
            f"parameter; Adam's step counters are 4 bytes per tensor ({n_tensors} tensors)")


def check_mixed_precision(mixed: Mapping[str, int], P: int) -> str:
    """16-bit weights and gradients, an fp32 master copy and Adam on it: the table's mixed row, 16 B/param in all."""
    want = mem.bytes_per_param("mixed", "adam")
    for part in STATES:
        claim(mixed[part] == want[part] * P,
              f"mixed precision, {part}: measured {mixed[part]} B, the table says {want[part]} B x {P}")
    return ("mixed precision + Adam, bytes/param: " + ", ".join(f"{k} {mixed[k] // P}" for k in STATES)
            + f" = the table's row, {sum(mixed[k] for k in STATES) // P} in all")


def check_autocast(output: torch.Tensor, model: torch.nn.Module, dtype: torch.dtype = torch.bfloat16) -> str:
    """``torch.autocast`` runs the operations in 16 bits but keeps the parameters and their gradients in fp32."""
    grads = {p.grad.dtype for p in model.parameters()}
    claim(output.dtype == dtype, f"autocast's output should be {dtype}: {output.dtype}")
    claim(grads == {torch.float32} and all(p.dtype == torch.float32 for p in model.parameters()),
          f"parameters and gradients should stay float32 under autocast: gradients {grads}")
    return f"autocast: output {output.dtype} | parameters and gradients {torch.float32}"


def check_transformer_layer(n_params: int, h: int, ratio: float) -> str:
    """One Transformer layer has 12h^2 + 13h parameters; the activation estimate gets the order of magnitude."""
    claim(n_params == 12 * h * h + 13 * h, f"layer parameters {n_params} != 12h^2 + 13h = {12 * h * h + 13 * h}")
    # The estimate describes a different implementation (e.g. PyTorch eager keeps fp32 dropout masks and a
    # second copy of the ReLU output); we only claim it gets the order of magnitude right: within 2x.
    claim(0.5 < ratio < 2.0, f"measured / estimated activations = {ratio:.2f}, not within 2x")
    return "parameters = 12h^2 + 13h exactly; the activation estimate is within 2x of what autograd saved"


def check_calculator(rows: Sequence[Mapping[str, Any]], params: int, n: int, device_gib: float) -> str:
    """The calculator: 16 B/param of model states on one device; DP keeps all of them on each of n devices and
    divides only the activations; one device of ``device_gib`` is too small, n with ZeRO-3 are enough."""
    by = {r["strategy"]: r for r in rows}
    one, dp, z3 = by["1 device"], by[f"DP x{n}"], by[f"ZeRO-3/FSDP x{n}"]
    states = sum(one[k] for k in STATES)
    claim(abs(states - 16 * params / mem.GIB) < 0.01,  # 0.01 GiB: the table rounds each part to 3 decimals
          f"model states on one device: {states} GiB, 16 B x {params} = {16 * params / mem.GIB:.3f} GiB")
    claim(all(dp[k] == one[k] for k in STATES), f"DP x{n} should keep every model state whole: {dp} vs {one}")
    claim(abs(dp["activations"] - one["activations"] / n) < 0.01,  # 0.01 GiB: the same 3-decimal rounding
          f"DP x{n} should divide the activations by {n}: {dp['activations']} vs {one['activations']}")
    claim(one["total"] > device_gib and z3["total"] < device_gib,
          f"one {device_gib:g} GiB device should be too small ({one['total']} GiB) and {n} with ZeRO-3 enough "
          f"({z3['total']} GiB)")
    return (f"{params / 1e9:.2f}B parameters: model states {states:.1f} GiB (16 B/param) on one device, unchanged on "
            f"each of DP x{n}, which divides only the activations by {n}; one {device_gib:g} GiB device: no, "
            f"{n} with ZeRO-3: yes")


def check_traffic(sent: Mapping[str, float], cfg: mem.TrainingSetup, n: int) -> str:
    """Bytes each rank sends per step (GiB), for 16-bit gradients: DDP and ZeRO-1/2 a ring all-reduce,
    2(n-1)/n x 2P; ZeRO-3 1.5x that; a middle pipeline stage only 2 b s h e (activations and their gradients)."""
    claim(cfg.precision == "mixed", f"this check counts 16-bit gradients and activations, not {cfg.precision}")
    ring = 2 * (n - 1) / n * 2 * cfg.params / mem.GIB
    pipe = 2 * cfg.batch * cfg.seq * cfg.hidden * 2 / mem.GIB
    # 1e-9 relative: the same products in another order, float64
    for name in (f"DP x{n}", f"ZeRO-1 x{n}", f"ZeRO-2 x{n}"):
        claim(abs(sent[name] - ring) <= 1e-9 * ring, f"{name} sends {sent[name]} GiB, 2(n-1)/n x 2P = {ring} GiB")
    z3, pp = sent[f"ZeRO-3/FSDP x{n}"], sent[f"pipeline x{n}"]
    claim(abs(z3 - 1.5 * ring) <= 1e-9 * ring, f"ZeRO-3 sends {z3} GiB, 1.5 x DDP's {ring} GiB = {1.5 * ring}")
    claim(abs(pp - pipe) <= 1e-9 * pipe and pp < ring / 10, f"a pipeline stage sends {pp} GiB, 2bshe = {pipe} GiB")
    return (f"sent per rank per step: DDP and ZeRO-1/2 {ring:.1f} GiB, ZeRO-3 {z3 / ring:.1f}x that, "
            f"a pipeline stage {pp:.1f} GiB ({pp / ring:.1%} of DDP's)")


def check_data_parallel(samples: Sequence[Sequence[int]], grads: Sequence[Any], full_grad: torch.Tensor,
                        n_samples: int) -> str:
    """Data parallelism: the ranks' samples are a disjoint cover of the batch, and every rank's averaged
    gradient is the single-process full-batch gradient."""
    _cover(samples, n_samples, "samples")
    for r, g in enumerate(grads):
        # Same math, different summation order (N shards + all-reduce vs one batch): float32 rounding only.
        _close(g, full_grad, f"rank {r}'s averaged gradient vs the full-batch gradient", rtol=1e-5, atol=1e-6)
    return "each sample on exactly one rank; every rank's averaged gradient == the single-process full-batch gradient"


def check_tensor_parallel(units: Sequence[Sequence[int]], outputs: Sequence[Any], want: torch.Tensor,
                          n_units: int) -> str:
    """Tensor parallelism: each hidden unit lives on exactly one rank, and every rank ends with the full output."""
    _cover(units, n_units, "hidden units")
    for r, out in enumerate(outputs):
        # The all-reduce sums N partial products instead of one dot product over all units: rounding only.
        _close(out, want, f"rank {r}'s output vs one process's", rtol=1e-5, atol=1e-6)
    return "each hidden unit on exactly one rank; every rank holds the full output == the single-process output"


def check_layer_parallel(layers: Sequence[Sequence[int]], output: Any, want: torch.Tensor,
                         ticks: Sequence[Sequence[int]], n_modules: int) -> str:
    """Layer-wise model parallelism: each module on one rank, the last rank's output is one process's, and with
    the whole batch as one piece of work only one rank works at a time (N ticks, utilisation 1/N)."""
    W = len(layers)
    _cover(layers, n_modules, "modules")
    # Same ops in the same order, yet not bit-exact across processes: a matmul's last bits depend on the
    # kernel the CPU library picks (AVX2 or AVX-512, the memory alignment of its inputs), and the ranks and
    # this kernel need not pick the same one. So: equal to float32 rounding.
    _close(output, want, "the last rank's output vs one process's", rtol=1e-5, atol=1e-6)
    n_ticks = max(max(t) for t in ticks) + 1
    busy = sum(len(t) for t in ticks) / (W * n_ticks)
    claim(n_ticks == W and busy == 1 / W, f"expected {W} ticks at utilisation 1/{W}: {n_ticks} ticks, {busy:.3f}")
    return f"{n_ticks} ticks, each rank busy in 1 of them: utilisation {busy:.0%}; the output == one process's"


def check_pipeline(stages: Sequence[Mapping[str, Any]], layers: Sequence[Sequence[int]], want: torch.Tensor,
                   M: int) -> str:
    """Pipeline parallelism: the layer-wise split, every stage sees every micro-batch, stage r does micro-batch m
    at tick r + m, so M micro-batches take M + N - 1 ticks; the output is still one process's."""
    W = len(stages)
    claim([p["layers"] for p in stages] == list(map(list, layers)),
          f"the pipeline should split the model as the layer-wise run did: {[p['layers'] for p in stages]}")
    claim(all(p["micro_batches"] == list(range(M)) for p in stages),
          f"every stage should see micro-batches 0..{M - 1}: {[p['micro_batches'] for p in stages]}")
    # Each output row depends only on its own input row, but a matmul kernel may block 8 rows differently
    # from 32: allow float32 rounding (assert_close's default float32 tolerances).
    _close(stages[-1]["out"], want, "the last stage's output vs one process's")
    claim(all(p["ticks"] == [r + m for m in range(M)] for r, p in enumerate(stages)),
          f"stage r should do micro-batch m at tick r + m: {[p['ticks'] for p in stages]}")
    n_ticks = max(max(p["ticks"]) for p in stages) + 1
    claim(n_ticks == M + W - 1, f"{M} micro-batches on {W} stages should take {M + W - 1} ticks: {n_ticks}")
    busy = sum(len(p["ticks"]) for p in stages) / (W * n_ticks)
    return (f"{M} micro-batches on {W} stages: {n_ticks} ticks (M + N - 1) instead of {M * W} without overlap; "
            f"utilisation {busy:.0%}, bubble {1 - busy:.0%} = (N-1)/(M+N-1)")


def check_opposites(table: Sequence[Mapping[str, Any]], W: int) -> str:
    """Data parallelism: every rank holds each layer, one rank processes each sample; pipeline: the reverse."""
    data, pipe = table
    claim(data["ranks holding each layer"] == [W] and data["ranks processing each sample"] == [1],
          f"data parallel should replicate every layer on {W} ranks and give each sample to one: {data}")
    claim(pipe["ranks holding each layer"] == [1] and pipe["ranks processing each sample"] == [W],
          f"pipeline should keep each layer on one rank and pass each sample through all {W}: {pipe}")
    return (f"data: each layer on all {W} ranks, each sample on 1; "
            f"pipeline: each layer on 1 rank, each sample on all {W}")
