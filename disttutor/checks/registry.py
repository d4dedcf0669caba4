"""One list of every exercise in the course (each chapter adds its own entries).

Tests iterate :data:`EXERCISES`: every solution passes its checker, every
untouched stub (taken from the chapter's notebook source) fails with a message
naming its exercise. The grader (``disttutor grade``) reads the learner's code
for ``stub`` out of a notebook and runs ``checker`` on it. :func:`hint` gives
the hints one at a time, a nudge first, the solution file last (each call one step further).
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Callable


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIFFICULTIES = ("warm-up", "core", "stretch")


@dataclass(frozen=True)
class Exercise:
    id: str                    # "2.1": chapter.number, as the stub's NotImplementedError names it
    chapter: int
    title: str
    stub: str                  # the function/class the learner writes in the notebook
    checker: str               # "module:function" called as function(learner_obj) -> CheckResult
    solution: str              # path relative to the repository root
    hints: tuple[str, ...] = ()  # progressive: a first nudge, then a stronger one
    # "fix the bug" exercises start from a broken program, not a NotImplementedError stub: the path
    # of that program (its checker says "still the broken program" while the learner's code equals it)
    broken: str = ""
    difficulty: str = ""       # "warm-up", "core" or "stretch": shown above the stub
    minutes: int = 0           # the time a learner should plan for it, shown above the stub
    # the course's own implementations of the answer (modules): the learner's code may not call them
    # (disttutor.checks.guard refuses it, naming the module), and a graded check runs where they are absent
    references: tuple[str, ...] = ()

    def __post_init__(self):
        if f"{self.chapter}." != self.id[:len(str(self.chapter)) + 1] or ":" not in self.checker:
            raise ValueError(f"exercise {self.id!r}: id must start with its chapter and checker be 'module:function'")
        if len(self.hints) < 2:
            raise ValueError(f"exercise {self.id}: give at least two progressive hints")
        # Both are shown above the stub (disttutor.course.shape.card) and planned with in TEACHING.md.
        if self.difficulty not in DIFFICULTIES:
            raise ValueError(f"exercise {self.id}: difficulty must be one of {', '.join(DIFFICULTIES)}, "
                             f"got {self.difficulty!r}")
        if isinstance(self.minutes, bool) or not isinstance(self.minutes, int) or self.minutes <= 0:
            raise ValueError(f"exercise {self.id}: minutes must be a positive whole number, got {self.minutes!r}")

    def check_function(self) -> Callable[..., Any]:
        module, func = self.checker.split(":")
        return getattr(importlib.import_module(module), func)


EXERCISES: tuple[Exercise, ...] = (
    Exercise("1.1", 1, "per-device memory under DDP and ZeRO-1/2/3", "zero_memory",
             "disttutor.checks.memory:check_zero_memory", "solutions/ex1_1_zero_memory.py", (
                 "Plain DP keeps everything whole on every device. Each ZeRO stage divides one more kind of "
                 "state by `world`.",
                 "Stage 1 divides optimizer states by `world`; stage 2 adds gradients; stage 3 adds weights. "
                 "Each part is `n_params * bytes_per_param[part]`."),
             difficulty="warm-up", minutes=15),
    Exercise("2.1", 2, "ring all-reduce from send/recv", "ring_all_reduce",
             "disttutor.checks.allreduce:check_ring_allreduce", "solutions/ex2_1_ring_allreduce.py", (
                 "n chunks (tensor_split); n-1 reduce-scatter steps, then n-1 all-gather steps; send to "
                 "rank+1, receive from rank-1.",
                 "Post the send and the receive together (dist.isend + dist.irecv, then wait both): two "
                 "blocking sends facing each other wait forever. In reduce-scatter step k rank r sends "
                 "chunk (r-k) % n and adds what it receives into chunk (r-k-1) % n."),
             difficulty="core", minutes=40, references=("disttutor.scratch.allreduce",)),
    Exercise("3.1", 3, "bytes through rank 0 versus the ring", "predict_sent",
             "disttutor.checks.traffic:check_predict_sent", "solutions/ex3_1_predict_sent.py", (
                 "Device 0 sends each other device the parameters plus its input and output-gradient shards; "
                 "the ring sends gradient chunks only.",
                 "dp-copy: (n-1) * (params + x_shard + y_shard) bytes, x_shard = batch/n * d_in * elem. "
                 "ddp-ring: add the real tensor_split chunks rank 0 sends."),
             difficulty="core", minutes=25),
    Exercise("4.1", 4, "naive DDP: all-reduce every gradient", "sync_gradients",
             "disttutor.checks.ddp:check_naive_ddp", "solutions/ex4_1_naive_ddp.py", (
                 "After backward every rank holds the gradient of its own shard: make it the average over ranks.",
                 "dist.all_reduce(p.grad) sums; divide by dist.get_world_size(). Skip parameters whose "
                 "p.grad is None (frozen, or unused in this step)."),
             difficulty="warm-up", minutes=15,
             references=("disttutor.scratch.ddp", "disttutor.scratch.accumulate")),
    Exercise("4.2", 4, "bucketed, overlapped DDP", "OverlappedDDP",
             "disttutor.checks.ddp:check_bucketed_ddp", "solutions/ex4_2_bucketed_ddp.py", (
                 "Only parameters that require grad get hooks and buckets; launch a bucket once all its "
                 "gradients arrived, in bucket order.",
                 "register_post_accumulate_grad_hook fires once per tensor per backward (also for a tied "
                 "weight used twice). Launch torch.cat of the bucket's grads with async_op=True; in finish() "
                 "wait, divide, copy back; a bucket whose parameters got no gradient must still be launched."),
             difficulty="stretch", minutes=60,
             references=("disttutor.scratch.ddp", "disttutor.scratch.accumulate")),
    Exercise("5.1", 5, "torchrun command for a 2-node job", "node_command",
             "disttutor.checks.cluster:check_node_command", "solutions/ex5_1_node_command.py", (
                 "Every node runs the same torchrun command; with c10d the nodes meet at the head's host:port "
                 "and number themselves.",
                 "--nnodes, --nproc-per-node, --rdzv-backend=c10d, --rdzv-endpoint=HEAD:PORT, one --rdzv-id "
                 "shared by all nodes, then -m disttutor.programs.whoami."),
             difficulty="warm-up", minutes=15),
    Exercise("6.1", 6, "one pipeline stage over send/recv", "stage_forward_backward",
             "disttutor.checks.model_parallel:check_stage", "solutions/ex6_1_stage_forward_backward.py", (
                 "Forward: receive from rank-1 (except rank 0), run the stage, send to rank+1 (except the "
                 "last); backward: the reverse.",
                 "Make the received activation a leaf (requires_grad_) and send its .grad back; "
                 "others call out.backward(grad); the last computes mse_loss."),
             difficulty="core", minutes=35),
    Exercise("7.1", 7, "the 1F1B order of one rank", "one_f_one_b",
             "disttutor.checks.pipeline:check_one_f_one_b", "solutions/ex7_1_one_f_one_b.py", (
                 "Rank r first fills the pipe with forwards, then alternates one backward, one forward, then "
                 "drains the remaining backwards.",
                 "Warm-up: min(m, p - r) forwards. Then repeat: B of the oldest micro-batch, then F of the "
                 "next one if any are left."),
             difficulty="core", minutes=25),
    Exercise("7.2", 7, "the bubble of a measured pipeline run", "bubble_fraction",
             "disttutor.checks.pipeline:check_bubble_fraction", "solutions/ex7_2_bubble_fraction.py", (
                 "One window for all ranks, earliest start to latest end; the bubble is the idle part of "
                 "p x window.",
                 "busy = sum of (end - start) over every event of every rank; "
                 "bubble = 1 - busy / (p * (t_last - t_first))."),
             difficulty="warm-up", minutes=15),
    Exercise("8.1", 8, "no_sync() for the from-scratch bucketed DDP", "NoSyncDDP",
             "disttutor.checks.perf:check_no_sync", "solutions/ex8_1_no_sync.py",
             ("A flag set by no_sync() and restored when it exits (contextlib.contextmanager, try/finally).",
              "Override _grad_ready: while the flag says 'no sync', return without calling super()._grad_ready(p). "
              "Post-accumulate hooks fire after .grad has been summed, so the last backward sees the whole sum."),
             difficulty="core", minutes=20, references=("disttutor.scratch.accumulate",)),
    Exercise("8.2", 8, "a gradient-compression communication hook", "fp16_compress_hook",
             "disttutor.checks.perf:check_compress_hook", "solutions/ex8_2_compress_hook.py",
             ("Cast bucket.buffer() to fp16, divide it by the world size (before summing: no overflow), then "
              "dist.all_reduce(t, async_op=True).get_future().",
              "fut.then(fn) runs fn(fut) when the all-reduce is done: copy fut.value()[0] back into "
              "bucket.buffer() and return the buffer."),
             difficulty="core", minutes=25),
    Exercise("9.1", 9, "find the straggler from the profiler's traces", "find_straggler",
             "disttutor.checks.profiling:check_straggler", "solutions/ex9_1_find_straggler.py",
             ("The rank with the LONGEST backward waited there for the others inside DDP's all-reduce: it is "
              "not the straggler.",
              "Sum the durations of the 'forward' user_annotation events of each rank; the largest is the "
              "straggler (its own work took longest before any communication)."),
             difficulty="warm-up", minutes=15),
    Exercise("9.2", 9, "fix the bug: gradient accumulation under DDP", "accumulate_step",
             "disttutor.checks.fixbug:check_accumulation", "solutions/ex9_2_accumulate_step.py", (
                 "Two silent bugs. Several backward() calls sum their gradients: is that the mean loss's? "
                 "How often does DDP all-reduce?",
                 "Divide each micro-batch's loss by len(micro_batches). Run all but the last micro-batch inside "
                 "`with ddp_model.no_sync():` (contextlib.nullcontext() for the last one): gradients accumulate "
                 "locally, and the last backward all-reduces their sum once."),
             broken="disttutor/checks/broken/ex9_2_accumulate_step.py",
             difficulty="core", minutes=20),
    Exercise("9.3", 9, "fix the bug: set_epoch and a global loss log", "train_epochs",
             "disttutor.checks.fixbug:check_epochs", "solutions/ex9_3_train_epochs.py", (
                 "Two silent bugs: is epoch 1's order new? Whose loss does loss.item() return on rank 1?",
                 "sampler.set_epoch(epoch) at the start of each epoch; log a detached copy of the loss after "
                 "dist.all_reduce (SUM) divided by dist.get_world_size() -- called on EVERY rank, since a "
                 "collective only rank 0 calls waits forever."),
             broken="disttutor/checks/broken/ex9_3_train_epochs.py",
             difficulty="core", minutes=20),
    Exercise("10.1", 10, "resume a training job from its checkpoint", "resume",
             "disttutor.checks.resume:check_resume", "solutions/ex10_1_resume.py",
             ("Restore everything the next step reads: weights, AdamW's moments, the scheduler, this rank's RNG "
              "state; return the step number.",
              "checkpoint.latest(dir) -> path or None; checkpoint.read_meta(path) is JSON; get_state_dict(model, "
              "optimizer) gives tensors for dcp.load(..., storage_reader=checkpoint.SafeReader(path)) to fill; then "
              "set_state_dict, scheduler.load_state_dict, and LAST torch.set_rng_state(torch.load(rng file, "
              "weights_only=True)['cpu']); return meta['step']."),
             difficulty="stretch", minutes=45),
    Exercise("11.1", 11, "ZeRO-1: shard the optimiser state", "ZeroOne",
             "disttutor.checks.sharding:check_zero1", "solutions/ex11_1_zero1.py", (
                 "Give every trainable parameter one owner rank (the same rule on every rank); build "
                 "`self.optim` on this rank's parameters only.",
                 "step(): self.optim.step(), then for EVERY trainable parameter, in the same order on every "
                 "rank, dist.broadcast(p, src=owner). Skip frozen parameters; list a tied one once."),
             difficulty="core", minutes=40, references=("disttutor.scratch.zero1",)),
    Exercise("11.2", 11, "FSDP: sharded parameters, all-gather, reduce-scatter", "FSDP",
             "disttutor.checks.sharding:check_fsdp", "solutions/ex11_2_fsdp.py", (
                 "free(params): after sharding, each full copy must stop being trainable AND stop taking "
                 "memory.",
                 "free: p.requires_grad_(False); p.data = p.data.new_empty(0). gather(shard, dtype): an output of "
                 "world * shard.numel() elements in dtype, then dist.all_gather_single(out, shard.to(dtype)) "
                 "(older code: all_gather_into_tensor).",
                 "reduce_scatter(grad_full): piece = grad_full.new_empty(grad_full.numel() // world); "
                 "dist.reduce_scatter_single(piece, grad_full.contiguous()) sums over ranks (older code: "
                 "reduce_scatter_tensor); return piece.float() / world -- the AVERAGE, in fp32 for the fp32 master "
                 "shard (SGD is checked first: it notices a sum, AdamW would not)."),
             difficulty="core", minutes=30, references=("disttutor.scratch.fsdp",)),
    Exercise("12.1", 12, "the row-parallel linear's backward", "RowParallelLinear",
             "disttutor.checks.tensor_parallel:check_row_parallel", "solutions/ex12_1_row_parallel.py", (
                 "grad_y is equal on every rank (the forward all-reduced y): must backward communicate? "
                 "Each gradient has its tensor's shape.",
                 "grad_x_shard = grad_y @ w_shard; grad_w_shard = grad_y.T @ x_shard; grad_bias = "
                 "grad_y.sum(0) -- the bias is whole and added once, so its gradient is not divided."),
             difficulty="warm-up", minutes=10),
    Exercise("12.2", 12, "the online-softmax merge of ring attention", "merge",
             "disttutor.checks.tensor_parallel:check_merge", "solutions/ex12_2_online_softmax_merge.py", (
                 "Each output is normalised by its block's e^lse; merged, the denominator is "
                 "e^lse_a + e^lse_b: weigh by share.",
                 "lse = torch.logaddexp(lse_a, lse_b); out = exp(lse_a - lse)[..., None] * out_a + "
                 "exp(lse_b - lse)[..., None] * out_b. Where lse is -inf (both blocks empty) use 0 instead of "
                 "lse in the exponents, or -inf - -inf gives nan."),
             difficulty="core", minutes=20),
)


def exercise(exercise_id: str) -> Exercise:
    for e in EXERCISES:
        if e.id == exercise_id:
            return e
    raise ValueError(f"no exercise {exercise_id!r}; exercises are {', '.join(e.id for e in EXERCISES)}")


_SHOWN: dict[str, int] = {}  # exercise id -> the last hint level shown in this kernel


def hint(exercise_id: str, level: int | None = None) -> str:
    """The next hint of an exercise: a nudge first, then a stronger one, then where the solution is.

    Each call without ``level`` goes one step further than the last hint shown for that exercise
    (in this kernel); ``level`` (1, 2, ...) asks for one directly, and later calls go on from it.
    """
    e = exercise(exercise_id)
    if level is None:
        level = min(_SHOWN.get(e.id, 0) + 1, len(e.hints) + 1)
    elif isinstance(level, bool) or not isinstance(level, int) or level < 1:
        raise ValueError(f"hint levels start at 1, got {level!r}")
    _SHOWN[e.id] = max(_SHOWN.get(e.id, 0), level)
    if level <= len(e.hints):
        return f"Exercise {e.id}, hint {level}/{len(e.hints)}: {e.hints[level - 1]}"
    if not os.path.exists(os.path.join(ROOT, e.solution)):  # a classroom copy (disttutor export) has no solutions/
        return f"Exercise {e.id}: no more hints -- this copy of the course has no solutions: ask your teacher."
    return f"Exercise {e.id}: no more hints -- the solution is {e.solution} (in the course's root)."
