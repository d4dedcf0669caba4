"""DDP communication hooks: bytes on the wire per step, and what they do to the loss (chapter 8, §8.3).

Each hook trains a fresh DDP replica of the same seeded model on the same batches:

* ``allreduce`` -- ``default_hooks.allreduce_hook``: what DDP does without a hook (fp32);
* ``fp16`` / ``bf16`` -- ``default_hooks.fp16_compress_hook`` / ``bf16_compress_hook``
  (the article's example): half the bytes, rounding error in every gradient. torch accepts
  the bf16 hook only with NCCL 2.10+: elsewhere its row says ``refused`` and why;
* ``powersgd`` -- ``powerSGD_hook`` with rank-1 low-rank approximation and error feedback
  (its first ``start_powerSGD_iter`` steps are plain all-reduces);
* ``learner`` -- a hook loaded from ``--source FILE --name FUNC``: Exercise 8.3's checker runs the
  learner's own from-scratch hook here (the course ships no from-scratch copy: it would be the answer).

Bytes are counted by :class:`disttutor.data_parallel.perf.CommRecorder` as the hooks call ``dist.all_reduce``::

    disttutor run comm_hooks -n 2 -- --hooks allreduce fp16 powersgd
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from disttutor.data_parallel import perf
from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt

Hook = Literal["allreduce", "fp16", "bf16", "powersgd", "learner"]
POWERSGD_START = 2  # PowerSGD needs >= 2 plain steps first when error feedback is on (torch checks it)
# A compressed hook must send at most this fraction of the fp32 bytes (fp16: 0.5) ...
MAX_BYTES_RATIO = 0.55
# ... and end within this fraction of the fp32 run's loss: fp16 rounding (~1e-3 relative per
# gradient) barely moves 30 SGD steps; a hook that forgets to average (x world) or drops
# gradients ends far off (it diverges or stalls at the starting loss).
LOSS_RTOL = 0.05


@dataclass(frozen=True)
class HookConfig:
    hooks: tuple[str, ...] = opt(("allreduce", "fp16", "bf16", "powersgd"), "hooks to compare")
    steps: int = opt(30, "optimiser steps per hook")
    batch: int = opt(64, "GLOBAL batch per step")
    lr: float = opt(0.05, "SGD learning rate")
    seed: int = opt(0, "model and data seed")
    source: str = opt("", "file with a learner's hook (for the 'learner' hook)")
    name: str = opt("fp16_compress_hook", "the hook function's name in --source")

    def __post_init__(self):
        require_positive(self, "steps", "batch")
        known = Hook.__args__  # type: ignore[attr-defined]
        bad = [h for h in self.hooks if h not in known]
        if not self.hooks or bad:
            raise ValueError(f"hooks must be among {', '.join(known)}; got {list(self.hooks)}")
        if "learner" in self.hooks and not self.source:
            raise ValueError("the 'learner' hook needs --source FILE (and --name FUNC)")
        if self.steps <= POWERSGD_START and "powersgd" in self.hooks:
            raise ValueError(f"powersgd needs steps > {POWERSGD_START} (its first steps are uncompressed)")


def make_hook(name: str, cfg: HookConfig):
    """(state, hook) for ``register_comm_hook``."""
    if name == "allreduce":
        return None, default_hooks.allreduce_hook
    if name == "fp16":
        return None, default_hooks.fp16_compress_hook
    if name == "bf16":
        return None, default_hooks.bf16_compress_hook
    if name == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                            start_powerSGD_iter=POWERSGD_START, min_compression_rate=1.0)
        return state, powerSGD_hook.powerSGD_hook
    from disttutor.checks.adapter import load_exercise
    return None, load_exercise(cfg.source, cfg.name)


def train(name: str, cfg: HookConfig, ctx, data, rec: perf.CommRecorder) -> dict:
    ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
    ddp = DDP(perf.model(cfg.seed).to(ctx.device), device_ids=ids)
    try:
        ddp.register_comm_hook(*make_hook(name, cfg))
    except TypeError as e:
        # torch refuses some hooks outright on some backends (bf16_compress_hook needs NCCL 2.10+):
        # the same refusal on every rank, before any collective, so it is safe to report and go on.
        return dict(hook=name, refused=str(e).split("\n")[0])
    opt_ = torch.optim.SGD(ddp.parameters(), lr=cfg.lr)
    x, y = data
    losses, nbytes, calls = [], [], []
    for s in range(cfg.steps):
        xb, yb = perf.batch(x, y, s, cfg.batch, ctx.rank, ctx.world_size)
        mark = rec.mark()
        opt_.zero_grad(set_to_none=True)
        loss = F.mse_loss(ddp(xb), yb)
        loss.backward()  # the hook runs here, once per bucket
        opt_.step()
        n, b = rec.since(mark)
        calls.append(n)
        nbytes.append(b)
        losses.append(loss.item())
    params = torch.cat([p.detach().reshape(-1) for p in ddp.parameters()])
    grad_bytes = sum(p.numel() * p.element_size() for p in ddp.parameters())
    steady = nbytes[POWERSGD_START:] or nbytes  # after PowerSGD's plain warm-up steps (same for the others)
    return dict(hook=name, loss=losses, bytes_per_step=sum(steady) / len(steady),
                bytes_first_step=nbytes[0], calls_per_step=calls[-1], grad_bytes=grad_bytes,
                param_sha=runtime.summarize(params)["sha1"])


def verdict(rows: dict[str, dict], world: int) -> dict:
    """Exercise 8.3: the learner's hook sends fewer bytes and converges like the fp32 run."""
    ref, me = rows["allreduce"], rows["learner"]
    if "refused" in me:
        return dict(passed=False, problem=f"DDP refused your hook: {me['refused']}")
    if me["calls_per_step"] == 0:
        return dict(passed=False, problem="your hook sent nothing: call dist.all_reduce (or all_gather) on "
                                          "the compressed bucket and return its future")
    ratio = me["bytes_per_step"] / ref["bytes_per_step"]
    if ratio > MAX_BYTES_RATIO:
        return dict(passed=False, problem=(
            f"your hook sent {me['bytes_per_step']:.0f} bytes per step, {ratio:.2f}x the fp32 all-reduce "
            f"({ref['bytes_per_step']:.0f}); compress to at most {MAX_BYTES_RATIO}x (fp16 is 0.5x)"))
    a, b = ref["loss"][-1], me["loss"][-1]
    if not abs(a - b) <= LOSS_RTOL * abs(a):  # also catches NaN
        hint = " -- did you divide by the world size?" if b > a else ""
        return dict(passed=False, problem=(
            f"after {len(me['loss'])} steps the loss is {b:.4g} with your hook and {a:.4g} with the fp32 "
            f"all-reduce (allowed {LOSS_RTOL:.0%} apart){hint}"))
    return dict(passed=True, bytes_ratio=ratio)


def run(cfg: HookConfig) -> None:
    with runtime.setup() as ctx:
        data = tuple(t.to(ctx.device) for t in perf.dataset(4 * cfg.batch, cfg.seed + 1))
        names = list(cfg.hooks)
        if "learner" in names and "allreduce" not in names:
            names.insert(0, "allreduce")  # the learner's hook is judged against the fp32 run
        rows = {}
        with perf.CommRecorder() as rec:
            for i, name in enumerate(names):
                rows[name] = train(name, cfg, ctx, data, rec)
                runtime.progress(i + 1, len(names), desc="comm hooks")
        # Every replica must hold identical parameters, whatever the hook (it all-reduced the same thing).
        shas = [None] * ctx.world_size
        dist.all_gather_object(shas, {k: r.get("param_sha") for k, r in rows.items()})
        for r in rows.values():
            if "refused" not in r:
                r["replicas_equal"] = all(s[r["hook"]] == r["param_sha"] for s in shas)
        out = dict(rows=list(rows.values()), backend=ctx.backend)
        if "learner" in rows:
            out.update(verdict(rows, ctx.world_size))
            if out["passed"] and not rows["learner"]["replicas_equal"]:
                out.update(passed=False, problem="the replicas' parameters differ after training: every rank "
                                                 "must end with the same averaged gradient")
        runtime.report(**out)


main = cli(HookConfig, run)


if __name__ == "__main__":
    main()
