"""All-reduce timing: the built-in ``dist.all_reduce`` against the from-scratch ones (chapter 2).

For each message size (bytes of float32) and algorithm: warm-up calls, then
``iters`` timed calls. Each timed call starts right after a barrier, so all
ranks start together; each rank times its own call, the times of all ranks
are gathered (``all_gather``) and the call's time is the *slowest* rank's
(an all-reduce is done when the last rank has its result). The reported time
is the median over calls, which shrugs off a noisy neighbour. Algorithms are
interleaved call by call, so a burst of load hits them all alike.

Rank 0 reports ``rows``: ``{"algo", "bytes", "time_s", "times_s"}``. Before
timing, every algorithm is checked against ``dist.all_reduce`` on one random
tensor (``correct``) -- a fast wrong algorithm is worth nothing::

    python -m torch.distributed.run --nproc-per-node 4 -m disttutor.programs.allreduce_bench \
        --sizes 16777216 --algos builtin ring --iters 10
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from disttutor.rank import runtime
from disttutor.contract.config import require_non_negative, require_positive
from disttutor.contract.options import cli, opt
from disttutor.scratch.allreduce import ALGORITHMS


def builtin_all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(tensor)
    return tensor


FUNCS = {"builtin": builtin_all_reduce, **ALGORITHMS}


@dataclass(frozen=True)
class BenchConfig:
    sizes: tuple[int, ...] = opt((4096, 65536, 1 << 20), "bytes of float32 data per rank")
    algos: tuple[str, ...] = opt(("builtin", "naive", "tree", "ring"), f"algorithms to time, of {', '.join(FUNCS)}")
    iters: int = opt(5, "timed calls per size and algorithm")
    warmup: int = opt(1, "untimed calls first (connections, allocator)")
    verify: bool = opt(True, "check every algorithm against dist.all_reduce first")

    def __post_init__(self):
        bad = [a for a in self.algos if a not in FUNCS]
        if bad or not self.algos:
            raise ValueError(f"unknown algorithm(s) {bad or self.algos}; choose from {', '.join(FUNCS)}")
        if not self.sizes or any(s < 4 for s in self.sizes):
            raise ValueError(f"sizes are bytes of float32 data: each must be >= 4, got {self.sizes}")
        if any(s > 1 << 30 for s in self.sizes):
            raise ValueError("sizes above 1 GiB per rank would not fit a laptop's memory comfortably")
        require_positive(self, "iters")
        require_non_negative(self, "warmup")


def verify(device: torch.device, algos: tuple[str, ...]) -> dict[str, bool]:
    """Each algorithm against ``dist.all_reduce`` on the same random tensor (odd length: uneven chunks)."""
    g = torch.Generator().manual_seed(1234 + dist.get_rank())
    x = torch.randn(1003, generator=g).to(device)
    want = FUNCS["builtin"](x.clone())
    # float32 sums in a different order differ in the last bits: 1e-5 relative
    # is ~100 ulp, far below any real bug (which is off by a whole rank's value).
    return {a: bool(torch.allclose(FUNCS[a](x.clone()), want, rtol=1e-5, atol=1e-5)) for a in algos}


def timed(fn, x: torch.Tensor) -> float:
    dist.barrier()                 # everybody starts together
    t0 = time.perf_counter()
    fn(x)
    if x.is_cuda:
        torch.cuda.synchronize()   # GPU ops are asynchronous: wait before reading the clock
    return time.perf_counter() - t0


def run(cfg: BenchConfig) -> None:
    with runtime.setup() as ctx:
        n = ctx.world_size
        correct = verify(ctx.device, cfg.algos) if cfg.verify else {}
        rows, total, done = [], len(cfg.sizes) * (cfg.warmup + cfg.iters), 0
        for size in cfg.sizes:
            # Zeros stay zeros when summed: repeated calls never overflow to inf.
            x = torch.zeros(max(1, size // 4), device=ctx.device)
            own: dict[str, list[float]] = {a: [] for a in cfg.algos}
            for it in range(cfg.warmup + cfg.iters):
                for a in cfg.algos:    # interleaved: noise hits every algorithm alike
                    t = timed(FUNCS[a], x)
                    if it >= cfg.warmup:
                        own[a].append(t)
                done += 1
                runtime.progress(done, total, desc=f"all-reduce x{n}")
            for a in cfg.algos:
                mine = torch.tensor(own[a], dtype=torch.float64, device=ctx.device)
                every = [torch.empty_like(mine) for _ in range(n)]
                dist.all_gather(every, mine)                     # everybody's times...
                slowest = torch.stack(every).amax(0).tolist()    # ...a call ends with its slowest rank
                rows.append({"algo": a, "bytes": x.numel() * 4, "time_s": statistics.median(slowest),
                             "times_s": slowest})
        if ctx.rank == 0:
            runtime.report(rows=rows, correct=correct, world_size=n, backend=ctx.backend)
        else:
            runtime.report(correct=correct)


main = cli(BenchConfig, run)  # the command line is derived from BenchConfig's fields


if __name__ == "__main__":
    main()
