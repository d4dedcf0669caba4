"""The measurements chapter 13's cost model is fitted to: four collectives, a matmul, a checkpoint.

For each collective of ``--ops`` and each size of ``--sizes`` (bytes ``S`` in nccl-tests' sense:
the all-reduced tensor, the *gathered* tensor, the *scattered* input, the message): warm-up calls,
then ``--iters`` timed calls, each right after a barrier; a call's time is its *slowest* rank's
(a collective is done when the last rank is), and the reported time is the median over calls.
``send_recv`` is rank 0 sending to rank 1 while the other ranks wait. Then every rank multiplies
``n x n`` float32 matrices *at the same time* (as ranks compute together in training) for each
``--matmul`` size: gamma is the slowest rank's FLOP/s. Then every rank times an SGD and an AdamW update of
``--update-elems`` parameters (memory-bound: seconds per element). Then a pipeline's hand-off: rank 0 sends
``--handoff-bytes`` to rank 1 and computes at once for ``--handoff-busy-ms`` (as a stage starts its next
micro-batch); rank 1 times the arrival, ``--handoff-iters`` times. Last, every rank saves a model with AdamW
state of about ``--checkpoint-mb`` MB with chapter 10's :mod:`disttutor.lm.checkpoint` (atomic, DCP)::

    disttutor run scale_bench -n 2 -- --sizes 4096 1048576 --iters 5
"""
from __future__ import annotations

import os
import shutil
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from disttutor.rank import runtime
from disttutor.contract.config import require_non_negative, require_positive
from disttutor.contract.options import cli, opt

OPS = ("all_reduce", "all_gather", "reduce_scatter", "send_recv")


@dataclass(frozen=True)
class ScaleBenchConfig:
    sizes: tuple[int, ...] = opt((4096, 65536, 1 << 20, 4 << 20), "bytes S of float32 data per call")
    ops: tuple[str, ...] = opt(OPS, f"collectives to time, of {', '.join(OPS)}")
    iters: int = opt(5, "timed calls per size and collective")
    warmup: int = opt(1, "untimed calls first (connections, allocator)")
    matmul: tuple[int, ...] = opt((128, 256, 512), "n of the n x n float32 matmuls timed for gamma")
    matmul_reps: int = opt(5, "matmuls per timed block")
    checkpoint_mb: float = opt(8.0, "size of the model + AdamW state saved once per rank (0: skip)")
    update_elems: int = opt(1 << 20, "float32 elements each optimizer's update is timed on (0: skip)")
    handoff_bytes: int = opt(0, "bytes of one hand-off sent while the sender computes (0: skip)")
    handoff_busy_ms: float = opt(10.0, "how long the sender computes right after the send")
    handoff_iters: int = opt(20, "hand-offs timed (their mean is reported)")

    def __post_init__(self):
        bad = [o for o in self.ops if o not in OPS]
        if bad or not self.ops:
            raise ValueError(f"unknown collective(s) {bad or self.ops}; choose from {', '.join(OPS)}")
        if not self.sizes or any(s < 64 for s in self.sizes) or any(s > 1 << 28 for s in self.sizes):
            raise ValueError(f"sizes are bytes per call, each between 64 and 268435456, got {self.sizes}")
        if not self.matmul or any(n < 8 or n > 4096 for n in self.matmul):
            raise ValueError(f"matmul sizes must be between 8 and 4096, got {self.matmul}")
        require_positive(self, "iters", "matmul_reps")
        require_non_negative(self, "warmup", "checkpoint_mb", "update_elems", "handoff_bytes")
        require_positive(self, "handoff_iters")
        if not self.handoff_busy_ms > 0:
            raise ValueError(f"handoff_busy_ms must be > 0, got {self.handoff_busy_ms}")


def make_call(op: str, nbytes: int, ctx):
    """``(fn, S)``: a zero-argument function doing one call of ``op``, and its size S in bytes."""
    n = ctx.world_size
    numel = max(n, nbytes // 4 // n * n)               # divisible by n: equal shards
    full = torch.zeros(numel, device=ctx.device)      # zeros stay zeros: repeated sums never overflow
    part = torch.zeros(numel // n, device=ctx.device)
    if op == "all_reduce":
        return (lambda: dist.all_reduce(full)), numel * 4
    if op == "all_gather":
        return (lambda: dist.all_gather_single(full, part)), numel * 4
    if op == "reduce_scatter":
        return (lambda: dist.reduce_scatter_single(part, full)), numel * 4
    if ctx.rank == 0:                                   # send/recv: ranks 0 and 1 talk, the others wait
        return (lambda: dist.send(full, 1)), numel * 4
    if ctx.rank == 1:
        return (lambda: dist.recv(full, 0)), numel * 4
    return (lambda: None), numel * 4


def sync(ctx) -> None:
    """On a GPU, kernels and NCCL calls return before they finish: a timer stops when they have."""
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()


def slowest(own: list[float], ctx) -> list[float]:
    mine = torch.tensor(own, dtype=torch.float64, device=ctx.device)
    every = [torch.empty_like(mine) for _ in range(ctx.world_size)]
    dist.all_gather(every, mine)
    return torch.stack(every).amax(0).tolist()


def time_collectives(cfg: ScaleBenchConfig, ctx) -> list[dict]:
    rows, total, done = [], len(cfg.ops) * len(cfg.sizes), 0
    for size in cfg.sizes:
        calls = {op: make_call(op, size, ctx) for op in cfg.ops}
        own: dict[str, list[float]] = {op: [] for op in cfg.ops}
        for it in range(cfg.warmup + cfg.iters):
            for op, (fn, _) in calls.items():  # interleaved: a burst of load hits every collective alike
                dist.barrier()
                t0 = time.perf_counter()
                fn()
                sync(ctx)
                if it >= cfg.warmup:
                    own[op].append(time.perf_counter() - t0)
        for op, (_, nbytes) in calls.items():
            times = slowest(own[op], ctx)
            rows.append({"op": op, "bytes": nbytes, "time_s": statistics.median(times), "times_s": times})
            done += 1
            runtime.progress(done, total, desc=f"collectives x{ctx.world_size}")
    return rows


def time_matmuls(cfg: ScaleBenchConfig, ctx) -> list[dict]:
    rows = []
    g = torch.Generator().manual_seed(ctx.rank)
    for n in cfg.matmul:
        a, b = (torch.randn(n, n, generator=g).to(ctx.device) for _ in range(2))
        torch.mm(a, b)                                  # warm-up (allocator, library dispatch)
        dist.barrier()                                  # every rank computes at the same time
        t0 = time.perf_counter()
        for _ in range(cfg.matmul_reps):
            torch.mm(a, b)
        sync(ctx)
        own = (time.perf_counter() - t0) / cfg.matmul_reps
        t = max(slowest([own], ctx))
        rows.append({"n": n, "flops": 2.0 * n**3, "time_s": t})
    return rows


UPDATES = {"sgd": lambda ps: torch.optim.SGD(ps, lr=1e-3), "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3)}


def time_updates(cfg: ScaleBenchConfig, ctx) -> dict:
    """Seconds per parameter element of one optimizer update (SGD, AdamW as the course's programs build
    them), every rank at once: element-wise work that reads and writes memory and has no FLOP count to
    describe it. The slowest rank's median over ``--iters`` steps, divided by the elements."""
    out = {}
    for name, make in UPDATES.items():
        p = torch.nn.Parameter(torch.zeros(cfg.update_elems, device=ctx.device))
        p.grad = torch.full_like(p, 1e-3)
        opt_ = make([p])
        opt_.step()                                     # warm-up; AdamW creates its moments lazily
        own = []
        for _ in range(cfg.iters):
            dist.barrier()
            t0 = time.perf_counter()
            opt_.step()
            sync(ctx)
            own.append(time.perf_counter() - t0)
        out[name] = statistics.median(slowest(own, ctx)) / cfg.update_elems
    return out


def time_handoff(cfg: ScaleBenchConfig, ctx) -> dict:
    """Rank 0 sends, then computes at once; rank 1 times from the shared barrier to the data's arrival. When
    every core runs a rank, the sender's communication thread waits for a core its compute holds."""
    x = torch.zeros(max(1, cfg.handoff_bytes // 4), device=ctx.device)
    a, b = torch.randn(256, 256, device=ctx.device), torch.randn(256, 256, device=ctx.device)
    own = []
    for it in range(1 + cfg.handoff_iters):           # the first is a warm-up
        dist.barrier()
        t0 = time.perf_counter()
        if ctx.rank == 0:
            work = dist.isend(x, 1)
            while time.perf_counter() - t0 < cfg.handoff_busy_ms / 1e3:
                torch.mm(a, b)                          # the next micro-batch's compute
            work.wait()
        elif ctx.rank == 1:
            dist.recv(x, 0)
            sync(ctx)
        if it:
            own.append(time.perf_counter() - t0)
    every = [torch.zeros(cfg.handoff_iters, dtype=torch.float64) for _ in range(ctx.world_size)]
    dist.all_gather(every, torch.tensor(own, dtype=torch.float64))
    arrivals = every[1].tolist()
    return {"bytes": x.numel() * 4, "busy_ms": cfg.handoff_busy_ms, "times_s": arrivals,
            "mean_s": statistics.fmean(arrivals)}


def time_checkpoint(cfg: ScaleBenchConfig, ctx) -> dict:
    """One save of a model + AdamW state with chapter 10's checkpoint code (every rank writes its part)."""
    from disttutor.lm import checkpoint

    width = 512
    # On disk: fp32 weights + AdamW's two moments = 12 bytes per parameter (gradients are not saved).
    layers = max(1, round(cfg.checkpoint_mb * 1e6 / 12 / (width * width)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).to(ctx.device)
    opt_ = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, width, device=ctx.device)).sum().backward()
    opt_.step()                                         # AdamW creates its moments lazily
    directory = os.path.join(runtime.run_dir() or ".", "scale_ckpt")
    dist.barrier()
    t0 = time.perf_counter()
    path = checkpoint.save(directory, 1, model, opt_)   # atomic: .tmp, barrier, rename (chapter 10)
    seconds = max(slowest([time.perf_counter() - t0], ctx))
    nbytes = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)
    dist.barrier()
    if ctx.rank == 0:
        shutil.rmtree(directory, ignore_errors=True)
    params = sum(p.numel() for p in model.parameters())
    return {"seconds": seconds, "bytes_on_disk": nbytes, "params": params, "ranks": ctx.world_size}


def run(cfg: ScaleBenchConfig) -> None:
    with runtime.setup() as ctx:
        if ("send_recv" in cfg.ops or cfg.handoff_bytes) and ctx.world_size < 2:
            raise ValueError("send_recv and the hand-off need at least 2 ranks")
        torch.set_num_threads(1)  # one core per rank, as every rank of the course runs
        rows = time_collectives(cfg, ctx)
        mm = time_matmuls(cfg, ctx)
        ckpt = time_checkpoint(cfg, ctx) if cfg.checkpoint_mb > 0 else None
        updates = time_updates(cfg, ctx) if cfg.update_elems > 0 else None
        handoff = time_handoff(cfg, ctx) if cfg.handoff_bytes > 0 else None
        if ctx.rank == 0:
            runtime.report(rows=rows, matmul=mm, checkpoint=ckpt, update_s_per_elem=updates, handoff=handoff,
                           world_size=ctx.world_size, backend=ctx.backend)
        else:
            runtime.report(world_size=ctx.world_size)


main = cli(ScaleBenchConfig, run)  # the command line is derived from ScaleBenchConfig's fields


if __name__ == "__main__":
    main()
