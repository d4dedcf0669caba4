"""The emulated link (disttutor.links): its timing model, measured back, and that it changes no result.

One 2-rank launch of ``emulated_link`` (parts ``probe``, ``check``, ``overlap`` with few steps,
``ring``) is shared by the multi-process tests; the chapters (2 and 8, under nbval) run the timed
experiments at full length themselves.
"""
from __future__ import annotations

import os
import time

import pytest
import torch

import disttutor
from disttutor.links.emulated import EmulatedLink, now
from disttutor.links.fit import summary as link_summary
from disttutor.links.fit import fit_probe, summary
from disttutor.links.presets import PRESETS, custom, preset
from disttutor.programs.emulated_link import PROBE, LinkConfig

SLOW = 400  # seconds: one launch, ~20 s idle, a few minutes at load ~10 on the shared 2 cores


def test_presets_carry_sources_and_the_model():
    for link in PRESETS.values():
        for c in (link.alpha, link.beta):
            assert c.tag in ("reported", "derived", "assumed") and len(c.source) > 20, (link.name, c)
        assert link.caption().startswith(f"emulated link: {link.name} (alpha=")
    ten = preset("10GbE")
    assert ten.beta.value == 10e9 / 8 and ten.beta.tag == "derived" and ten.alpha.tag == "reported"
    # a ring all-reduce: 2(n-1) messages of N/n bytes
    n, N = 4, 8 << 20
    assert ten.all_reduce_time(N, n) == pytest.approx(6 * ten.alpha.value + 6 / 4 * N / ten.beta.value)
    assert ten.all_reduce_time(N, 1) == 0.0
    with pytest.raises(ValueError, match="unknown link 'wifi'; choose from 1GbE"):
        preset("wifi")
    with pytest.raises(ValueError, match="beta > 0"):
        custom(1e-3, 0, "bad")
    with pytest.raises(ValueError, match="parts must be among"):
        LinkConfig(parts=("teleport",))
    with pytest.raises(ValueError, match="unknown link"):
        LinkConfig(link="wifi")


def test_transfers_queue_on_one_link():
    link = EmulatedLink(custom(0.0, 1.0, "test"))
    assert link.reserve(0.1, 1, at=0.0) == pytest.approx(0.1)
    assert link.reserve(0.1, 1, at=0.05) == pytest.approx(0.2)  # the link was busy: it waits its turn
    assert link.reserve(0.1, 1, at=1.0) == pytest.approx(1.1)   # idle link: starts at once
    assert link.transfers == 3 and link.busy_s == pytest.approx(0.3)


def test_a_transfer_waits_without_the_cpu_and_compute_overlaps_it():
    link = EmulatedLink(custom(0.0, 1.0, "test"))
    real = torch.futures.Future()
    real.set_result([torch.ones(2)])                 # the real collective: done at once
    wall0, cpu0 = time.perf_counter(), time.process_time()
    fut = link.complete_at(real, now() + 0.3)
    x = torch.randn(256, 256)
    while not fut.done():                            # compute while the link "transfers"
        x = torch.tanh(x @ x.T / 256)
    wall = time.perf_counter() - wall0
    assert torch.equal(fut.value()[0], torch.ones(2))   # the real result, handed on
    assert wall >= 0.3                               # a floor: never before the due time
    # The matrix work ran during the transfer (the loop spun until the future completed), so this
    # process used CPU for about the whole wait: the timer itself did not stop the compute.
    assert time.process_time() - cpu0 > 0.0
    idle0, idle_cpu0 = time.perf_counter(), time.process_time()
    link.complete_at(real, now() + 0.3).wait()       # nothing else to do: just wait
    # Sleeping threads use no CPU: 0.3 s of waiting costs far below 0.1 s of CPU on any machine
    # (a spinning wait would cost ~0.3 s).
    assert time.perf_counter() - idle0 >= 0.3 and time.process_time() - idle_cpu0 < 0.1


def test_fit_recovers_a_line():
    rows = [{"bytes": b, "time_s": 2 * 0.01 + b / 125e6} for b in (1 << 20, 4 << 20)]   # 2 ranks
    alpha, beta = fit_probe(rows, 2)
    assert alpha == pytest.approx(0.01) and beta == pytest.approx(125e6)


def quiet() -> bool:
    return os.getloadavg()[0] < 0.5 * disttutor.cores()


@pytest.fixture(scope="module")
def run():
    before = quiet()
    res = disttutor.launch("emulated_link", 2, {"parts": ("probe", "check", "overlap", "ring"),
                                                "sizes": (1 << 18, 1 << 20), "steps": 3},
                           stream=False, timeout=SLOW)
    out = res.results[0]
    out["quiet"] = before and quiet()   # quiet before and after the launch: only then are timings asserted
    return out


@pytest.mark.timeout(SLOW + 60)
def test_alpha_and_beta_measured_back_within_ten_percent(run):
    for r in run["probe"]:
        # The emulated time is a floor the timers enforce (a timer never fires early): always.
        assert r["time_s"] >= 0.99 * r["model_s"], r   # 1 %: the two clocks' reads around a call
    s = summary(run)
    # Within 10 % (issue 23). Why this holds under load: the probe link is slow (2 alpha = 100 ms,
    # then 8-67 ms for 1-8 MB), each size keeps the *minimum* of 5 calls (load only makes a call
    # later, never earlier), and a timer's lateness (< 1 ms idle, a few ms at load 30 on 2 cores)
    # is then a few % of alpha at most; lateness common to all sizes moves alpha, not beta (the slope).
    assert s["emulated_alpha_err"] < 0.10, (s, run["probe"])
    assert s["emulated_beta_err"] < 0.10, (s, run["probe"])
    assert run["probe_link"] == {"alpha": PROBE.alpha.value, "beta": PROBE.beta.value}


@pytest.mark.timeout(SLOW + 60)
def test_hooks_on_the_link_give_ddp_gradients(run):
    c = run["check"]
    # The real gloo all-reduce runs under every hook: fp32 sums of 2 ranks' means in another order
    # than one process's mean, ~1e-7 of the largest gradient; a hook that forgot to average or
    # dropped a bucket is off by ~100 %.
    for way in ("link_hook", "deferred_hook", "fp32_on_link"):
        assert c[way] < 1e-5, (way, c)
    # fp16 keeps 11 significant bits: each rank's averaged gradient and their sum are each rounded
    # by <= 2^-11 (4.9e-4) of their size, so <= ~1e-3 of the largest gradient; 2e-3 leaves room.
    assert c["fp16_on_link"] < 2e-3, c
    assert c["fp16_on_link"] > c["fp32_on_link"]       # the rounding is really there: the bytes were halved


@pytest.mark.timeout(SLOW + 60)
def test_scratch_all_reduces_on_the_link_stay_exact_and_pay_the_model(run):
    for row in run["ring"]:
        assert row["naive_ok"] and row["ring_ok"], row
        for algo in ("naive", "ring"):
            # a floor again: each message waits its alpha + bytes / beta on both ends
            assert row[f"{algo}_s"] >= 0.99 * row[f"{algo}_model_s"], row


@pytest.mark.timeout(SLOW + 60)
def test_overlap_part_books_each_bucket_at_hand_over_and_one_link(run):
    o, cfg = run["overlap"], LinkConfig()
    link = preset(cfg.link)
    # one bucket per layer: each layer's 1 MiB weight (+ its bias) fills a 1 MiB bucket
    assert o["depth"] == cfg.overlap_depth and len(o["bucket_bytes"]) == cfg.overlap_depth, o["bucket_bytes"]
    for name in ("overlap", "deferred"):
        t = o["timeline"][name]
        assert [b["bytes"] for b in t["buckets"]] == o["bucket_bytes"], name
        for prev, b in zip([None] + t["buckets"][:-1], t["buckets"]):
            # booked when handed over (never before), for the link's ring all-reduce time
            assert b["start"] >= b["launched"] - 1e-9 and "real_done" in b, (name, b)
            assert b["due"] - b["start"] == pytest.approx(link.all_reduce_time(b["bytes"], run["world"])), (name, b)
            if prev is not None:   # one link: a transfer starts when the one before it has ended, or later
                assert b["start"] >= prev["due"] - 1e-9, (name, prev, b)
        # DDP's backward returns only once every bucket's future is done, and a future is never done
        # before its due time: 1 ms for the two clock reads and the timer's wake-up rounding.
        assert t["backward_end"] >= max(b["due"] for b in t["buckets"]) - 1e-3, (name, t)
    assert not o["timeline"]["compute"]["buckets"]   # no_sync: nothing on the link
    # A step cannot beat its communication: the link carries the buckets one after another (1 %:
    # the two clock reads around a step).
    assert min(o["overlap_s"], o["deferred_s"]) >= 0.99 * o["comm_model_s"], o
    hidden = link_summary(run)["overlap_hidden"]
    if run["quiet"]:
        # Sized so compute ~ 2x communication, the link finishes inside the backward but for the last
        # bucket(s) and the real all-reduces' CPU work beside the backward: 0.5-0.7 hidden was measured
        # at load 5-10 on 2 cores (6 steps); on a quiet machine 0.5 leaves room for the noise of 3 steps.
        assert o["overlap_s"] < o["deferred_s"] and hidden > 0.5, (hidden, o)
    else:
        print(f"machine busy: overlap hid {hidden:.0%} of the communication (timing not asserted)")
