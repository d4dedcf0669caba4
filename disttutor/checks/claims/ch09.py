"""Chapter 9's named checks: what DETAIL mode names, every rank's stack, when a hang is reported, the straggler
in the profile, and question 9.1's reading."""
from __future__ import annotations

from typing import Any, Mapping

from disttutor.checks.claims.base import claim


def check_detail_script(detail: Any) -> str:
    """The mismatch script under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``: a rank's error names both operations (which
    rank raises first is a race: any rank's text counts)."""
    texts = [r.raw_error or r.error or "" for r in detail.ranks]
    claim(any("Detected mismatch between collectives" in t and "OpType=ALLREDUCE" in t and "OpType=BROADCAST" in t
              for t in texts), f"with DETAIL a rank should name ALLREDUCE and BROADCAST: {texts}")
    return "checked: with DETAIL, the error names ALLREDUCE on one rank and BROADCAST on the other"


def check_stacks(report: str, waiting: int, elsewhere: int) -> str:
    """Every rank's stack, read while the job hangs: rank ``waiting`` in the all-reduce, rank ``elsewhere`` in none."""
    lines = report.splitlines()
    claim(lines[waiting].startswith(f"rank {waiting}: waiting in all_reduce()"),
          f"rank {waiting} should wait in all_reduce: {report!r}")
    claim(lines[elsewhere].startswith(f"rank {elsewhere}: in no collective"),
          f"rank {elsewhere} should be in no collective: {report!r}")
    return f"checked: rank {waiting}'s stack is in all_reduce, rank {elsewhere}'s in no collective"


def check_timeout_bound(run: Any, timeout_s: float, waiting: int) -> str:
    """A hang is reported no sooner than the collective timeout: rank ``waiting`` raised a timeout naming
    ``timeout_s`` (gloo prints it in ms), and the whole launch lasted longer than ``timeout_s``."""
    rank = run.ranks[waiting]
    text = rank.raw_error or rank.error or ""
    claim(rank.status == "error" and rank.blame == "wait", f"rank {waiting} should time out waiting: "
                                                           f"{rank.status!r}, {rank.blame!r}, {text[:200]!r}")
    claim(f"{timeout_s * 1000:.0f}ms" in text, f"rank {waiting}'s error should name the {timeout_s:g} s timeout: "
                                               f"{text[:200]!r}")
    claim(run.wall_s > timeout_s, f"the launch ({run.wall_s:.2f} s) ended before the {timeout_s:g} s timeout")
    return (f"checked: rank {waiting} timed out after {timeout_s:g} s, and the launch ({run.wall_s:.1f} s) "
            f"lasted longer than the timeout")


def check_trace_handler() -> str:
    """The article's ``torch.profiler.tensorboard_trace_handler`` still exists in the installed torch."""
    import torch

    claim(callable(torch.profiler.tensorboard_trace_handler), "torch.profiler.tensorboard_trace_handler is gone")
    return f"checked: torch {torch.__version__} still has torch.profiler.tensorboard_trace_handler"


def check_reproduced(res: Any, mismatches: list[str], n_modes: int) -> str:
    """The reproduction job ran every group mode, and every mode's real text still matches its index entry."""
    claim(res.ok, f"the reproduction job did not finish cleanly: {res.summary()}")
    claim(not mismatches, f"{len(mismatches)} of {n_modes} modes no longer match the index: " + "; ".join(mismatches))
    return f"all {n_modes} failure modes reproduced, each printing the text its index entry names"


def check_detail_names_mismatch(repros: Mapping[str, Any]) -> str:
    """``TORCH_DISTRIBUTED_DEBUG=DETAIL`` names the mismatched operation (BROADCAST) and the differing shapes."""
    mis, shape = repros["mismatched_collective"].detail, repros["rank_dependent_shape"].detail
    claim("OpType=BROADCAST" in (mis or ""), f"DETAIL should name the other rank's BROADCAST: {mis!r}")
    claim("Tensor shapes" in (shape or ""), f"DETAIL should name the ranks' tensor shapes: {shape!r}")
    return "DETAIL mode names the mismatched operation (BROADCAST) and the ranks' differing tensor shapes"


def check_mismatch_plain_and_detail(repros: Mapping[str, Any]) -> str:
    """Without DETAIL the mismatched collective only times out, naming no operation; with DETAIL both the
    mismatched operation and the rank-dependent shapes are named (:func:`check_detail_names_mismatch`)."""
    plain = repros["mismatched_collective"].symptom
    claim("Timed out waiting" in plain and "OpType" not in plain,
          f"without DETAIL the mismatch only times out: {plain!r}")
    check_detail_names_mismatch(repros)
    return "checked: plain, the mismatch only times out; DETAIL names the other's BROADCAST and the differing shapes"


def check_straggler_profile(tot: Mapping[int, Mapping[str, float]], slow_rank: int, sleep_ms: float,
                            steps: int) -> str:
    """The straggler's forward is longer by its sleeps; the fast rank waits for it inside backward."""
    fast = next(r for r in tot if r != slow_rank)
    # 0.9: time.sleep never ends early; the margin only absorbs the profiler's rounding of span edges
    extra = steps * sleep_ms * 0.9
    claim(tot[slow_rank]["forward"] > tot[fast]["forward"] + extra,
          f"rank {slow_rank}'s forward should exceed rank {fast}'s by > {extra:.0f} ms ({steps} steps x "
          f"{sleep_ms:g} ms of sleep): {tot[slow_rank]['forward']:.1f} vs {tot[fast]['forward']:.1f} ms")
    claim(tot[fast]["backward"] > tot[slow_rank]["backward"],
          f"the fast rank {fast} should wait inside backward: backward {tot[fast]['backward']:.1f} ms vs "
          f"the straggler's {tot[slow_rank]['backward']:.1f} ms")
    return f"checked: rank {slow_rank}'s forward exceeds rank {fast}'s by its sleeps; rank {fast} waits inside backward"


def crash_outcome(run: Any, crashed: int, timeout_s: float) -> tuple[str, str]:
    """Question 9.1 read from the run's own reports, not from the wall clock: ``(letter, sentence)``.

    "c" if a surviving rank finished with a sum other than every rank's; "a" if the survivors timed out
    waiting (their own error says so) or the launch hit its timeout; "b" if they failed because the peer
    died (gloo's connection closed) or torchrun's agent stopped them when the dead rank's process exited.
    The wall time is printed beside the verdict, never used for it (a loaded machine stretches it).
    """
    dead = run.ranks[crashed]
    claim(dead.status == "error" and dead.blame in (None, "self"),
          f"rank {crashed} should have died on its own: status {dead.status!r}, {dead.error!r}")
    others = [r for r in run.ranks if r.rank != crashed]
    wrong = [r.rank for r in others if r.status == "ok" and r.results.get("after") != [r.results.get("expected")] * 3]
    waited = [r.rank for r in others if r.status == "error" and r.blame == "wait"]
    if wrong:
        letter = "c"
    elif waited or run.outcome == "timeout":
        letter = "a"
    else:
        letter = "b"
    how = ", ".join(f"rank {r.rank}: {r.label}" for r in others)
    # Short lines, no full stop: the page prints at most three sentences a cell, 25 words a line.
    # run.wall_s is the whole launch, start-up included (3.0 s idle, 25.7 s on a loaded 2-core build): never
    # "X s of the timeout", which reads as time spent waiting and on a busy machine exceeds the timeout under "b"
    return letter, (f"Rank {crashed} {dead.error or dead.status};\nthe others: {how};\nthe whole launch, start-up "
                    f"included, took {run.wall_s:.1f} s (collective timeout {timeout_s:g} s)")


#: What question 9.1's outcome means, by letter (appended to :func:`crash_outcome`'s sentence).
CRASH_WHY = {
    "b": ":\nwhen a process dies, torchrun sees it exit and stops the job (gloo's peers also see the connection close);"
         "\na *living* rank that skips a collective is what waits for the timeout",
    "a": ":\nthe living ranks waited for the whole collective timeout; nothing noticed the dead peer sooner",
    "c": ":\na rank finished with a sum that lacks the dead rank's part; check every result, not only the exit",
}
