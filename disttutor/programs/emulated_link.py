"""DDP's communication lessons on an emulated slow link: overlap, compression, fewer syncs, ring vs naive (chapters 8, 2).

Every collective runs for real on gloo; :mod:`disttutor.links` completes it no earlier than the
chosen link's ``alpha + bytes / beta`` (timers, no CPU), so a laptop shows what a 1 GbE or 10 GbE
network does to a training step. Parts (``--parts``):

* ``probe`` -- the link measured back: all-reduces of a few sizes on a slow probe link, the minimum
  time per size fitted to ``t = 2(n-1) alpha + 2(n-1)/n * bytes / beta`` (``probe`` rows);
* ``overlap`` -- a step's backward with DDP's bucketed overlap (:func:`~disttutor.links.ddp_hooks.link_hook`)
  and without it (:func:`~disttutor.links.ddp_hooks.deferred_hook`), against compute alone
  (``no_sync``) and communication alone, timed in interleaved rounds; on a deeper model (one 1 MiB
  bucket a layer) whose compute is ``overlap_share`` x its communication, plus instrumented steps
  (``timeline``: each bucket's hand-over, link start and due time, real all-reduce done);
* ``compression`` -- torch's fp32 / fp16 / PowerSGD hooks with their all-reduces on the link;
* ``nosync`` -- k micro-batches per optimiser step, syncing each vs ``no_sync`` for k-1 of them;
* ``ring`` -- chapter 2's from-scratch naive and ring all-reduces, their messages on the link.

The batch is sized from this machine: a backward takes about ``compute_share`` of the emulated
all-reduce of the gradients (measured first, agreed on by all ranks)::

    disttutor run emulated_link -n 2 -- --link 1GbE --parts overlap compression
"""
from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt
from disttutor.links.ddp_hooks import LinkHookState, deferred_hook, link_hook
from disttutor.links.emulated import EmulatedLink, emulated_all_reduce, now
from disttutor.links.p2p import EmulatedP2P, over_link
from disttutor.links.presets import PRESETS, custom, preset
from disttutor.rank import runtime
from disttutor.scratch.allreduce import naive_all_reduce, ring_all_reduce
from disttutor.workloads.models import MLP, seeded

PARTS = ("probe", "check", "overlap", "compression", "nosync", "ring")
# The probe link: slow enough that its times (>= 100 ms per call on 2 ranks) dwarf a timer's lateness
# (< 1 ms on a quiet machine, a few ms at load 30 on 2 cores) and the real loopback all-reduce of a
# few MB, so what is fitted is the emulation itself.
PROBE = custom(50e-3, 125e6, "probe: slow enough for timers to resolve")
PROBE_SIZES = (1 << 20, 2 << 20, 4 << 20, 8 << 20)
PROBE_REPEATS = 5


@dataclass(frozen=True)
class LinkConfig:
    link: str = opt("1GbE", f"link preset, of {', '.join(PRESETS)}")
    parts: tuple[str, ...] = opt(("probe", "overlap", "compression", "nosync"), f"experiments, of {', '.join(PARTS)}")
    width: int = opt(512, "MLP width (gradient bytes = depth * width^2 * 4, about)")
    depth: int = opt(4, "MLP layers")
    bucket_mb: float = opt(1.0, "DDP bucket_cap_mb for overlap (about one layer per bucket)")
    overlap_depth: int = opt(8, "MLP layers in the overlap part: one bucket a layer, so the last (unhideable) one is small")
    overlap_share: float = opt(2.0, "size the overlap part's batch so a step's compute takes this multiple of its emulated all-reduce")
    big_bucket_mb: float = opt(25.0, "bucket_cap_mb for compression and nosync (DDP's default: few rounds)")
    compute_share: float = opt(1.0, "size the batch so a step's compute takes this fraction of the emulated all-reduce")
    comm_bound: int = opt(4, "compression and nosync use batch / comm_bound: a communication-bound step")
    steps: int = opt(6, "timed steps per measurement (after 3 warm-up steps)")
    k: int = opt(4, "micro-batches per optimiser step (nosync)")
    sizes: tuple[int, ...] = opt((1 << 20,), "bytes per rank for the ring-vs-naive all-reduces")
    iters: int = opt(3, "timed calls per size (ring)")

    def __post_init__(self):
        preset(self.link)  # a one-line error for an unknown link
        bad = [p for p in self.parts if p not in PARTS]
        if bad or not self.parts:
            raise ValueError(f"parts must be among {', '.join(PARTS)}; got {list(self.parts)}")
        require_positive(self, "width", "depth", "overlap_depth", "steps", "k", "iters", "comm_bound")
        if not (self.bucket_mb > 0 and self.big_bucket_mb > 0 and self.compute_share > 0 and self.overlap_share > 0):
            raise ValueError("bucket_mb, big_bucket_mb, compute_share and overlap_share must be > 0, got "
                             f"{self.bucket_mb}, {self.big_bucket_mb}, {self.compute_share}, {self.overlap_share}")
        if not self.sizes or any(s < 64 for s in self.sizes):
            raise ValueError(f"sizes are bytes per rank, each >= 64; got {self.sizes}")


def slowest(seconds: float) -> float:
    """A collective step is done when its last rank is: the max over ranks (a real all-reduce, off the link)."""
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def timed(fn, steps: int, warmup: int = 3) -> float:
    """Median seconds of ``fn()`` over ``steps`` calls, each the slowest rank's, after a barrier."""
    out = []
    for i in range(warmup + steps):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        if i >= warmup:
            out.append(slowest(time.perf_counter() - t0))
    return statistics.median(out)


def timed_rounds(fns: dict, steps: int, warmup: int = 3) -> dict:
    """Median seconds of each ``fns[name]()`` (slowest rank), timed in rounds -- one call of each per
    round -- so that a change of load on a shared machine falls on every one of them alike."""
    out: dict = {name: [] for name in fns}
    for i in range(warmup + steps):
        for name, fn in fns.items():
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            if i >= warmup:
                out[name].append(slowest(time.perf_counter() - t0))
    return {name: statistics.median(v) for name, v in out.items()}


def probe() -> list[dict]:
    link, n = EmulatedLink(PROBE), dist.get_world_size()
    rows = []
    for size in PROBE_SIZES:
        x = torch.ones(size // 4)
        # Minimum, not median: the emulated time is a floor the timer enforces; load only adds to it.
        best = min(timed(lambda: link.all_reduce(x).wait(), 1, warmup=0) for _ in range(PROBE_REPEATS))
        rows.append({"bytes": size, "time_s": best, "model_s": PROBE.all_reduce_time(size, n)})
    return rows


def step_fn(ddp, opt, x, y, micro: int = 1, no_sync_first: bool = False):
    """One optimiser step on ``micro`` micro-batches; with ``no_sync_first`` only the last one syncs."""
    def step():
        for i, (xm, ym) in enumerate(zip(x.chunk(micro), y.chunk(micro))):
            quiet = no_sync_first and i < micro - 1
            ctx = ddp.no_sync() if quiet else contextlib.nullcontext()
            with ctx:
                F.mse_loss(ddp(xm), ym).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def make(cfg: LinkConfig, bucket_mb: float | None = None, depth: int | None = None):
    """A fresh DDP replica of the same seeded model (a model takes one comm hook, once)."""
    depth = depth or cfg.depth
    model = seeded(MLP, 0, cfg.width, [cfg.width] * (depth - 1), cfg.width)
    ddp = DDP(model, bucket_cap_mb=bucket_mb or cfg.bucket_mb)
    return ddp, torch.optim.SGD(ddp.parameters(), lr=1e-3)


def size_batch(cfg: LinkConfig, link, depth: int | None = None, share: float | None = None) -> int:
    """The batch whose step (forward, backward, optimizer) takes ``share`` x the emulated all-reduce of the gradients."""
    ddp, opt = make(cfg, depth=depth)
    grad_bytes = sum(p.numel() * 4 for p in ddp.parameters())
    target = (share or cfg.compute_share) * link.all_reduce_time(grad_bytes, dist.get_world_size())
    batch = 64
    for _ in range(2):  # a step has a fixed part too: measure at the first guess and correct once
        x, y = torch.randn(batch, cfg.width), torch.randn(batch, cfg.width)
        with ddp.no_sync():   # compute alone: nothing is sent
            t = timed(step_fn(ddp, opt, x, y), 3)
        batch = int(min(max(batch * target / t, 16), 8192))
    return batch


def timeline(ddp, opt, x, y, link: EmulatedLink, sync: bool = True) -> dict:
    """One step, instrumented: when the forward ends, when each bucket is handed over, when the link
    starts and ends its transfer (``start``, ``due``), when the real gloo all-reduce is done, when the
    step ends; seconds from the step's start (this rank's clock)."""
    dist.barrier()
    link.log = []
    t0 = now()
    with (contextlib.nullcontext() if sync else ddp.no_sync()):
        loss = F.mse_loss(ddp(x), y)
        forward_end = now()
        loss.backward()        # returns once DDP has every bucket's future back (with sync)
    backward_end = now()
    opt.step()
    opt.zero_grad(set_to_none=True)
    end = now()
    events, link.log = link.log, None
    return {"forward_end": forward_end - t0, "backward_end": backward_end - t0, "step_end": end - t0,
            "buckets": [{k: (v - t0 if k != "bytes" else v) for k, v in e.items()} for e in events]}


def ddp_parts(cfg: LinkConfig, ctx, parts) -> dict:
    link = preset(cfg.link)
    batch = size_batch(cfg, link)
    g = torch.Generator().manual_seed(ctx.rank)
    rows = max(batch, max(batch // cfg.comm_bound, 4) * cfg.k)
    x, y = torch.randn(rows, cfg.width, generator=g), torch.randn(rows, cfg.width, generator=g)
    small = max(batch // cfg.comm_bound, 4)
    xs, ys = x[:small], y[:small]
    xk, yk = x[:small * cfg.k], y[:small * cfg.k]
    out = {"batch": batch, "small_batch": small, "caption": link.caption()}
    if "overlap" in parts:
        # A deeper model than the other parts: one 1 MiB bucket a layer, so the one bucket no
        # overlap can hide (the first layer's, ready when the backward ends) is 1/overlap_depth of it all.
        depth, ob = cfg.overlap_depth, size_batch(cfg, link, cfg.overlap_depth, cfg.overlap_share)
        xo, yo = torch.randn(ob, cfg.width, generator=g), torch.randn(ob, cfg.width, generator=g)
        out["overlap_batch"] = ob
        # [teach overlap]
        ddp, opt = make(cfg, depth=depth)
        overlap_state = LinkHookState(EmulatedLink(link))
        ddp.register_comm_hook(overlap_state, link_hook)       # each bucket sent as soon as it is ready
        late, opt_late = make(cfg, depth=depth)
        deferred_state = LinkHookState(EmulatedLink(link))
        late.register_comm_hook(deferred_state, deferred_hook)  # all buckets sent after the backward

        def compute_alone():
            with ddp.no_sync():                                # compute alone: backward, nothing sent
                step_fn(ddp, opt, xo, yo)()
        step_fn(ddp, opt, xo, yo)()                            # one step: DDP's buckets are known after it
        bufs = [torch.zeros(b // 4) for b in overlap_state.bucket_bytes]
        alone = EmulatedLink(link)
        median = timed_rounds({"compute": compute_alone, "overlap": step_fn(ddp, opt, xo, yo),
                               "deferred": step_fn(late, opt_late, xo, yo),
                               "comm": lambda: [f.wait() for f in [alone.all_reduce(b) for b in bufs]]}, cfg.steps)
        compute, overlap, deferred, comm = (median[k] for k in ("compute", "overlap", "deferred", "comm"))
        # [/teach overlap]
        # Three instrumented steps of each kind; the figure shows the median one (by step time).
        steps = {name: sorted((timeline(m, o_, xo, yo, lk, sync) for _ in range(3)), key=lambda t: t["step_end"])[1]
                 for name, (m, o_, lk, sync) in {"compute": (ddp, opt, overlap_state.link, False),
                                                 "overlap": (ddp, opt, overlap_state.link, True),
                                                 "deferred": (late, opt_late, deferred_state.link, True)}.items()}
        sizes = overlap_state.bucket_bytes
        out["overlap"] = {"compute_s": compute, "overlap_s": overlap, "deferred_s": deferred, "comm_s": comm,
                          "comm_model_s": sum(link.all_reduce_time(b, ctx.world_size) for b in sizes),
                          "bucket_bytes": sizes, "timeline": steps, "depth": depth,
                          "late": overlap_state.link.late + deferred_state.link.late,
                          "transfers": overlap_state.link.transfers + deferred_state.link.transfers}
    if "compression" in parts:
        rows = {}
        # [teach compression]
        hooks = {"fp32": (None, default_hooks.allreduce_hook), "fp16": (None, default_hooks.fp16_compress_hook),
                 "powersgd": (powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                                          start_powerSGD_iter=2), powerSGD_hook.powerSGD_hook)}
        for name, (state, hook) in hooks.items():
            ddp, opt = make(cfg, cfg.big_bucket_mb)
            ddp.register_comm_hook(state, hook)                 # torch's own hook, unchanged
            wire = EmulatedLink(link)
            with emulated_all_reduce(wire):                    # its dist.all_reduce calls cross the link
                step = timed(step_fn(ddp, opt, xs, ys), cfg.steps)
                sent, busy = wire.bytes, wire.busy_s
                step_fn(ddp, opt, xs, ys)()                    # one more step, to count what one step sends
            # [/teach compression]
            rows[name] = {"step_s": step, "bytes_per_step": wire.bytes - sent, "link_s_per_step": wire.busy_s - busy,
                          "transfers_late": wire.late, "transfers": wire.transfers}
        out["compression"] = rows
    if "nosync" in parts:
        ddp, opt = make(cfg, cfg.big_bucket_mb)
        state = LinkHookState(EmulatedLink(link))
        ddp.register_comm_hook(state, link_hook)
        # [teach nosync]
        every = timed(step_fn(ddp, opt, xk, yk, micro=cfg.k), cfg.steps)                     # k syncs
        once = timed(step_fn(ddp, opt, xk, yk, micro=cfg.k, no_sync_first=True), cfg.steps)  # 1 sync
        # [/teach nosync]
        out["nosync"] = {"k": cfg.k, "every_s": every, "once_s": once, "late": state.link.late}
    return out


def ring_part(cfg: LinkConfig, ctx) -> list[dict]:
    link = preset(cfg.link)
    rows = []
    for size in cfg.sizes:
        x = torch.randn(size // 4, generator=torch.Generator().manual_seed(ctx.rank))
        want = x.clone()
        dist.all_reduce(want)
        row = {"bytes": size, "world": ctx.world_size, "caption": link.caption()}
        for name, fn in (("naive", naive_all_reduce), ("ring", ring_all_reduce)):
            # [teach ring]
            p2p = EmulatedP2P(EmulatedLink(link))
            on_link = over_link(fn, p2p)        # the same function; its dist.send/recv cross the link
            got = on_link(x.clone())
            row[name + "_s"] = timed(lambda: on_link(x.clone()), cfg.iters, warmup=1)
            # [/teach ring]
            # fp32 sums in another order than gloo's: ~1e-6 relative; a wrong algorithm is off by a whole rank.
            row[name + "_ok"] = bool(torch.allclose(got, want, rtol=1e-5, atol=1e-5))
            row[name + "_late"] = p2p.link.late
        n, m = ctx.world_size, link.message_time
        row["naive_model_s"], row["ring_model_s"] = 2 * (n - 1) * m(size), 2 * (n - 1) * m(size // n)
        rows.append(row)
    return rows


def check_part(cfg: LinkConfig, ctx) -> dict:
    """Each way of putting DDP on the link against one process on the whole batch: largest gradient error."""
    link = preset(cfg.link)
    width, n = 64, ctx.world_size
    g = torch.Generator().manual_seed(7)
    gx, gy = torch.randn(8 * n, width, generator=g), torch.randn(8 * n, width, generator=g)
    ref = seeded(MLP, 1, width, [width, width], width)
    F.mse_loss(ref(gx), gy).backward()   # the mean over the global batch = the mean of the ranks' means
    want = [p.grad for p in ref.parameters()]
    scale = max(float(w.abs().max()) for w in want)
    ways = {"link_hook": (lambda: LinkHookState(EmulatedLink(link)), link_hook, False),
            "deferred_hook": (lambda: LinkHookState(EmulatedLink(link)), deferred_hook, False),
            "fp32_on_link": (lambda: None, default_hooks.allreduce_hook, True),
            "fp16_on_link": (lambda: None, default_hooks.fp16_compress_hook, True)}
    out = {}
    for name, (state, hook, patched) in ways.items():
        ddp = DDP(seeded(MLP, 1, width, [width, width], width), bucket_cap_mb=0.01)  # several buckets
        ddp.register_comm_hook(state(), hook)
        mine = slice(8 * ctx.rank, 8 * ctx.rank + 8)
        with (emulated_all_reduce(EmulatedLink(link)) if patched else contextlib.nullcontext()):
            F.mse_loss(ddp(gx[mine]), gy[mine]).backward()
        err = max(float((p.grad - w).abs().max()) for p, w in zip(ddp.parameters(), want))
        out[name] = err / scale  # relative to the largest gradient
    return out


def run(cfg: LinkConfig) -> None:
    with runtime.setup() as ctx:
        out: dict = {"link": cfg.link, "world": ctx.world_size}
        if "probe" in cfg.parts:
            out["probe"] = probe()
            out["probe_link"] = {"alpha": PROBE.alpha.value, "beta": PROBE.beta.value}
        if "check" in cfg.parts:
            out["check"] = check_part(cfg, ctx)
        if {"overlap", "compression", "nosync"} & set(cfg.parts):
            out.update(ddp_parts(cfg, ctx, cfg.parts))
        if "ring" in cfg.parts:
            out["ring"] = ring_part(cfg, ctx)
        runtime.report(**out)


main = cli(LinkConfig, run)


if __name__ == "__main__":
    main()
