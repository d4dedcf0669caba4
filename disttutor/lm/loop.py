"""Chapter 10's training loop: the article's §10.2 loop, corrected, checkpointed, and killable.

Used by :mod:`disttutor.programs.lm_train` and by the checkers of Exercises 10.1
(:mod:`disttutor.checks.resume`) and 10.2 (:mod:`disttutor.checks.lm_step`), so the run a
learner's code is compared with executes *the same* code. One optimiser step
(:func:`disttutor.lm.step.train_step`, or the ``step_fn`` handed to :func:`train`):

1. ``accum`` micro-batches; all but the last backward run inside ``ddp.no_sync()`` (gradients
   only accumulate locally), the last one all-reduces the sum once (chapter 8);
2. ``scaler.unscale_`` **before** ``clip_grad_norm_`` -- the norm is of the true gradients
   (with bf16 or fp32 the scaler is disabled and both are no-ops, unless ``loss_scale`` is set);
3. AdamW step, then the warm-up schedule's step;
4. every ``ckpt_every`` steps, :func:`disttutor.lm.checkpoint.save` (atomic, rotated).

Fault injection (first attempt only, ``TORCHELASTIC_RESTART_COUNT == 0``): rank ``fail_rank``
SIGKILLs itself at step ``fail_at_step`` (or in the middle of that step's save). torchrun
(``launch(..., max_restarts=1)``) then stops the other ranks and starts all of them again;
they resume from the newest complete checkpoint.
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import signal
import time
import types
from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function
from torch.profiler import schedule as profiler_schedule

from disttutor.lm import corpus
from disttutor.lm import model as lm
from disttutor.data_parallel import perf
from disttutor.rank import runtime
from disttutor.contract.config import require_non_negative, require_positive
from disttutor.contract.options import opt


@dataclass(frozen=True)
class LMConfig:
    steps: int = opt(120, "optimiser steps")
    seq_len: int = opt(64, "characters per training window")
    micro_batch: int = opt(8, "windows per rank per micro-batch")
    accum: int = opt(2, "micro-batches per optimiser step (no_sync for all but the last)")
    d_model: int = opt(64, "model width")
    heads: int = opt(4, "attention heads")
    layers: int = opt(2, "Transformer layers")
    dropout: float = opt(0.1, "dropout (uses each rank's RNG: a resume must restore it)")
    lr: float = opt(3e-3, "peak AdamW learning rate")
    warmup: int = opt(10, "linear warm-up steps, then cosine decay to 10%%")
    weight_decay: float = opt(0.01, "AdamW weight decay")
    clip: float = opt(1.0, "gradient-norm clipping threshold")
    amp: Literal["auto", "on", "off"] = opt("auto", "autocast: auto = on for CUDA, off on CPU (measured: not faster)")
    loss_scale: float = opt(0.0, "a fixed GradScaler loss scale, also on CPU and in fp32 (0: the precision's own)")
    act_ckpt: bool = opt(True, "activation checkpointing (non-reentrant) around each layer")
    seed: int = opt(0, "seed of the weights, the data order and the dropout streams")
    eval_every: int = opt(20, "validation every this many steps (and at the end)")
    eval_windows: int = opt(32, "validation windows (split over the ranks)")
    profile_steps: int = opt(0, "torch.profiler records this many steps on every rank (0: none) -> trace_rank{r}.json")
    profile_from: int = opt(4, "first profiled step (after one warm-up step; later than the first steps' one-off costs)")
    sample_chars: int = opt(160, "characters generated before and after training (0: none)")
    ckpt_dir: str = opt("", "checkpoint directory ('': no checkpoints, no resume)")
    ckpt_every: int = opt(0, "save a checkpoint every this many steps (0: never)")
    keep: int = opt(2, "checkpoints kept (older ones are deleted)")
    fail_at_step: int = opt(-1, "fault injection: rank fail_rank is SIGKILLed at this step (first attempt)")
    fail_rank: int = opt(1, "the rank that fails")
    fail_in_save: bool = opt(False, "fail inside the save at fail_at_step, after writing, before the commit")
    fail_always: bool = opt(False, "fail on every attempt: a rank lost for good")
    step_source: str = opt("", "a .py file whose train_step(...) runs each step instead of the course's (lm_train)")

    def __post_init__(self):
        require_positive(self, "steps", "seq_len", "micro_batch", "accum", "d_model", "heads", "layers",
                         "eval_every", "eval_windows", "keep")
        require_non_negative(self, "warmup", "weight_decay", "clip", "sample_chars", "ckpt_every", "fail_rank",
                             "profile_steps", "loss_scale")
        if self.d_model % self.heads or self.d_model % 2:
            raise ValueError(f"d_model ({self.d_model}) must be even and a multiple of heads ({self.heads})")
        if not 0 <= self.dropout < 1 or not self.lr > 0:
            raise ValueError(f"need 0 <= dropout < 1 and lr > 0, got dropout={self.dropout}, lr={self.lr}")
        if self.profile_steps and not 1 <= self.profile_from <= self.steps - self.profile_steps:
            raise ValueError(f"the profiled steps {self.profile_from}..{self.profile_from + self.profile_steps - 1} "
                             f"need 1 <= profile_from and must end by the last step ({self.steps - 1})")
        if self.ckpt_every and not self.ckpt_dir:
            raise ValueError("ckpt_every needs a ckpt_dir")
        if self.fail_at_step >= 0 and not (self.ckpt_dir and self.ckpt_every) and not self.fail_always:
            raise ValueError("fault injection without checkpoints could only start over: set ckpt_dir and ckpt_every")


def schedule(cfg: LMConfig) -> Callable[[int], float]:
    """LR factor: linear warm-up over ``warmup`` steps, then cosine down to 10% at the last step."""
    def f(step: int) -> float:
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))
    return f


def attempt() -> int:
    """Which start of the job this is: torchrun counts elastic restarts for us."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def _die(cfg: LMConfig, ctx: runtime.Context, where: str) -> None:
    if ctx.rank == cfg.fail_rank and (attempt() == 0 or cfg.fail_always):
        runtime.rank_print(f"fault injection: rank {ctx.rank} SIGKILLs itself {where} (attempt {attempt()})")
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no report: what an OOM-kill or a lost node looks like


def default_resume(ckpt_dir: str, model, optimizer, scheduler) -> int:
    """Restore the newest complete checkpoint (if any); return the number of steps it had done."""
    from disttutor.lm import checkpoint

    path = checkpoint.latest(ckpt_dir)
    if path is None:
        return 0
    return checkpoint.load(path, model, optimizer, scheduler=scheduler)["step"]


def _profiler(cfg: LMConfig, ctx: runtime.Context, done: int):
    """Chapter 9's profiler over steps ``profile_from ..`` (+1 warm-up step before them): one Chrome
    trace per rank, ``trace_rank{r}.json`` in the run directory, read by :mod:`disttutor.troubleshoot.traces`."""
    wait = cfg.profile_from - 1 - done  # prof.step() is called once per step from `done` on
    if not cfg.profile_steps or wait < 0:  # nothing to profile (or a resumed attempt started later)
        return contextlib.nullcontext(types.SimpleNamespace(step=lambda: None))
    trace = os.path.join(runtime.run_dir() or ".", f"trace_rank{ctx.rank}.json")
    return profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else []),
                   schedule=profiler_schedule(wait=wait, warmup=1, active=cfg.profile_steps, repeat=1),
                   on_trace_ready=lambda p: p.export_chrome_trace(trace))


@torch.no_grad()
def evaluate(model: torch.nn.Module, val: torch.Tensor, ctx: runtime.Context) -> float:
    """Mean validation loss: each rank scores its share of the windows, then one all-reduce."""
    model.eval()  # no dropout: evaluation uses no random numbers (and so does not move the RNG)
    mine = val[ctx.rank::ctx.world_size].to(ctx.device)
    total = torch.zeros(2, dtype=torch.float64, device=ctx.device)
    for w in mine.split(8):
        total += torch.tensor([float(lm.window_loss(model, w)) * len(w), len(w)], dtype=torch.float64,
                              device=ctx.device)
    dist.all_reduce(total)
    model.train()
    return float(total[0] / total[1])


def train(cfg: LMConfig, ctx: runtime.Context, resume: Callable[..., int] | None = None,
          step_fn: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Train (resuming from ``cfg.ckpt_dir`` if it holds a checkpoint); returns what rank 0 reports.

    ``step_fn(ddp_model, optimizer, scheduler, scaler, micro_batches, loss_fn, clip)`` runs one
    optimiser step and returns this rank's mean loss (default: :func:`disttutor.lm.step.train_step`)."""
    tok = corpus.tokenizer()
    train_ids, val_ids = corpus.splits()
    train_w = corpus.windows(train_ids, cfg.seq_len)
    val_w = corpus.windows(val_ids, cfg.seq_len)[:cfg.eval_windows]
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    # [teach setup]
    model = lm.TinyLM(tok.vocab_size, cfg.d_model, cfg.heads, cfg.layers, max_len=max(cfg.seq_len, 256),
                      dropout=cfg.dropout, activation_checkpointing=cfg.act_ckpt).to(ctx.device)
    ddp = DDP(model, device_ids=[ctx.local_rank] if ctx.device.type == "cuda" else None)
    cuda = ctx.device.type == "cuda"
    # fused kernels on CUDA, foreach (one multi-tensor op per group) on CPU
    opt_ = torch.optim.AdamW(ddp.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                             fused=True if cuda else None, foreach=None if cuda else True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt_, schedule(cfg))
    prec = perf.precision(ctx.device) if (cfg.amp == "on" or (cfg.amp == "auto" and cuda)) else None
    scaler = torch.amp.GradScaler(ctx.device.type, enabled=bool(prec and prec.scaler))
    if cfg.loss_scale:  # a fixed scale (it never grows in a short run): the scaled gradients are really scaled
        scaler = torch.amp.GradScaler(ctx.device.type, init_scale=cfg.loss_scale, growth_interval=2**30)
    # [/teach setup]
    torch.manual_seed(cfg.seed + 1 + ctx.rank)  # each rank's own dropout stream
    history: dict[str, Any] = {"loss": [], "val": {}, "lr": []}
    done = 0
    if cfg.ckpt_dir:
        # imported only here: torch.distributed.checkpoint costs each rank 2-6 s of start-up
        from disttutor.lm import checkpoint
        if ctx.rank == 0:
            os.makedirs(cfg.ckpt_dir, exist_ok=True)
        dist.barrier()
        done = (resume or default_resume)(cfg.ckpt_dir, model, opt_, sched)
        if isinstance(done, bool) or not isinstance(done, int) or not 0 <= done <= cfg.steps:
            raise ValueError(f"resume() must return the number of steps already done (an int), got {done!r}")
        if done:
            path = checkpoint.path_for(cfg.ckpt_dir, done)
            if not os.path.isdir(path):
                raise ValueError(f"resume() returned {done}, but there is no checkpoint of step {done}")
            history = checkpoint.read_meta(path)["extra"]["history"]
    resumed_from = done
    out: dict[str, Any] = {"attempt": attempt(), "resumed_from": resumed_from, "amp": prec.name if prec else "fp32",
                           "ddp_state_dict_key": next(iter(ddp.state_dict()))}
    if cfg.sample_chars and done == 0 and ctx.rank == 0:
        out["text_before"] = tok.decode(lm.generate(model, tok.encode("And God said"), cfg.sample_chars, seed=1))
    times = {"data": 0.0, "local": 0.0, "sync": 0.0, "step": 0.0}
    if step_fn is None:
        from disttutor.lm.step import train_step  # imported here: Exercise 10.2 refuses the module to learners
        step_fn = functools.partial(train_step, times=times)

    def loss_fn(m: torch.nn.Module, xb: torch.Tensor) -> torch.Tensor:  # a micro-batch's mean loss
        with torch.autocast(ctx.device.type, dtype=prec.dtype) if prec else contextlib.nullcontext():
            return lm.window_loss(m, xb)
    desc = f"training (attempt {attempt() + 1})"
    t_start = time.perf_counter()
    # record_function regions are the names chapter 9's disttutor.troubleshoot.traces reads (and cost ~nothing
    # when no profiler is recording); the backend's all-reduces are recorded as "gloo:..."/"nccl:...".
    with _profiler(cfg, ctx, done) as prof:
        for step in range(done, cfg.steps):
            if step == cfg.fail_at_step and not cfg.fail_in_save:
                _die(cfg, ctx, f"at step {step}")
            if str(step) not in history["val"] and step % cfg.eval_every == 0:
                history["val"][str(step)] = evaluate(model, val_w, ctx)
                runtime.progress(step, cfg.steps, desc=desc, val=history["val"][str(step)])  # for a live plot
            # [teach step]
            t0 = time.perf_counter()
            with record_function("data"):
                batches = [corpus.micro_batch(train_w, step * cfg.accum + j, cfg.micro_batch, ctx.rank,
                                              ctx.world_size, cfg.seed).to(ctx.device) for j in range(cfg.accum)]
            times["data"] += time.perf_counter() - t0
            history["lr"].append(sched.get_last_lr()[0])
            loss = step_fn(ddp, opt_, sched, scaler, batches, loss_fn, cfg.clip)
            with record_function("optimizer"):
                step_loss = torch.as_tensor(loss, dtype=torch.float32, device=ctx.device).detach().clone()
                dist.all_reduce(step_loss)  # the reported loss is the mean over ranks (one scalar)
            # [/teach step]
            history["loss"].append(float(step_loss) / ctx.world_size)
            runtime.progress(step + 1, cfg.steps, desc=desc, loss=history["loss"][-1])
            if ctx.rank == 0 and cfg.ckpt_dir:
                with open(os.path.join(cfg.ckpt_dir, "history.jsonl"), "a") as f:
                    f.write(json.dumps({"attempt": attempt(), "step": step, "loss": history["loss"][-1]}) + "\n")
            if cfg.ckpt_every and (step + 1) % cfg.ckpt_every == 0 and step + 1 < cfg.steps:
                fail = step + 1 == cfg.fail_at_step and cfg.fail_in_save
                checkpoint.save(cfg.ckpt_dir, step + 1, model, opt_, scheduler=sched, scaler=scaler,
                                extra={"history": history}, keep=cfg.keep,
                                before_commit=(lambda: _die(cfg, ctx, f"inside the save of step {step + 1}"))
                                if fail else None)
            prof.step()
    wall = time.perf_counter() - t_start
    history["val"][str(cfg.steps)] = evaluate(model, val_w, ctx)
    runtime.progress(cfg.steps, cfg.steps, desc=desc, val=history["val"][str(cfg.steps)])
    n_steps = cfg.steps - resumed_from
    tokens = n_steps * cfg.accum * cfg.micro_batch * cfg.seq_len  # per rank
    out.update(history=history, wall_s=wall, steps_run=n_steps, tokens_per_s_rank=tokens / wall if wall else 0.0,
               tokens_per_step_rank=cfg.accum * cfg.micro_batch * cfg.seq_len,
               times={k: v / max(1, n_steps) for k, v in times.items()})
    if cfg.sample_chars and ctx.rank == 0:
        out["text_after"] = tok.decode(lm.generate(model, tok.encode("And God said"), cfg.sample_chars, seed=1))
    out["params"] = {n: p.detach().cpu() for n, p in model.named_parameters()}
    return out
