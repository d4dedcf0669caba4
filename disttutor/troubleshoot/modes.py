"""Chapter 9's troubleshooting guide: ONE table of failure modes, and what reproduces them.

Each :class:`FailureMode` has the symptom a learner sees (a regex over the real
output of its reproduction, so :func:`lookup` finds the entry from a pasted
error, and a test keeps it true when torch changes its wording), the cause, the
tool that diagnoses it and the fix. ``where`` says what reproduces it:
``"group"`` (:mod:`disttutor.programs.troubleshoot`, one torchrun job),
``"local"`` (:mod:`disttutor.troubleshoot.repro_local`, one plain subprocess) or a chapter
that shows it at length. :func:`reproduce` runs them: one launch, one subprocess.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class FailureMode:
    key: str
    title: str
    where: str      # "group", "local" or "chapter N" (shown there, not re-run here)
    symptom: str    # regex matched against the reproduction's symptom text (case-insensitive)
    cause: str
    tool: str
    fix: str

    def __post_init__(self):
        if not (self.where in ("group", "local") or self.where.startswith("chapter ")):
            raise ValueError(f"{self.key}: where must be 'group', 'local' or 'chapter N', got {self.where!r}")
        re.compile(self.symptom)


F = FailureMode
MODES: tuple[FailureMode, ...] = (
    F("port_in_use", "Port already in use", "local", r"EADDRINUSE|address already in use",
      "MASTER_PORT is taken (another job, or a leftover rank of an earlier one)",
      "`ss -ltnp | grep PORT`; `disttutor.doctor`", "let the OS pick a port: "
      "torchrun --standalone"),
    F("missing_env", "Missing rendezvous environment", "local", r"environment variable \w+ expected, but not set",
      "the script calls init_process_group() but was started with plain `python`, not torchrun",
      "`env | grep -E 'RANK|WORLD_SIZE|MASTER'`", "start it with torchrun, which sets "
      "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT"),
    F("backend_not_built", "Backend not built (NCCL / MPI)", "local", r"doesn't have (NCCL|MPI) built in",
      "this torch build has no NCCL (a CPU wheel) or no MPI (only source builds have it)",
      "`torch.distributed.is_nccl_available()`, `is_mpi_available()`", "gloo on CPU; NCCL needs a CUDA build"),
    F("skipped_collective", "A rank skipped a collective (hang)", "group", r"Timed out waiting \d+ms",
      "one rank never calls the collective the others wait in (an `if rank == 0:` around it, an early "
      "return, an exception swallowed)", "disttutor.troubleshoot.diagnose: every rank's Python stack and its collective",
      "every rank calls every collective, in the same order"),
    F("mismatched_collective", "Different collectives on different ranks", "group",
      r"Timed out waiting|Detected mismatch between collectives",
      "ranks call different collectives (all_reduce here, broadcast there): a hang or a silently wrong result",
      "TORCH_DISTRIBUTED_DEBUG=DETAIL names the mismatch (op type) and the ranks",
      "the same collective on every rank (DETAIL names the mismatch)"),
    F("rank_dependent_shape", "Rank-dependent tensor shapes in a collective", "group",
      r"Timed out waiting|x = \[",
      "a tensor sized by rank-local data (its number of samples): gloo waits for bytes never sent, or "
      "reduces the wrong elements", "TORCH_DISTRIBUTED_DEBUG=DETAIL: 'Tensor shapes: 3vs 4'",
      "agree on one size (all_reduce MAX), pad to it"),
    F("uneven_inputs", "Uneven inputs across ranks", "group", r"Timed out waiting",
      "one rank has more batches: its extra backward all-reduces alone", "the rank that timed out is the "
      "one with data left; disttutor.troubleshoot.diagnose", "DistributedSampler (equal shards), or "
      "`with Join([model]):` (torch.distributed.algorithms)"),
    F("set_epoch", "Forgetting sampler.set_epoch", "local", r"the same order every epoch",
      "DistributedSampler shuffles with seed + epoch; without set_epoch every epoch repeats epoch 0's order",
      "print the first indices of two epochs", "sampler.set_epoch(epoch) at the start of each epoch"),
    F("sampler_padding", "Sampler padding duplicates samples", "local", r"counted twice",
      "DistributedSampler pads to a multiple of the world size by repeating samples: metrics count them twice",
      "compare len(dataset) with world_size * len(sampler)", "count each index once, or "
      "drop_last=True"),
    F("unused_parameters", "Unused parameters under DDP", "group",
      r"Expected to have finished reduction in the prior iteration",
      "a parameter got no gradient (an unused head, a branch not taken): DDP's reducer never finishes "
      "that bucket's reduction, and the next iteration's forward raises the error above",
      "the error text; TORCH_DISTRIBUTED_DEBUG=INFO or DETAIL (set before init) names the parameters",
      "find_unused_parameters=True (a graph walk per step), or remove the parameter"),
    F("different_models", "Ranks build different models", "group",
      r"appears not to match sizes|Timed out waiting|DDP expects same model",
      "a rank-local config or code path builds another architecture", "DDP compares the models when it is "
      "built: a different number of parameter tensors gives an error naming the ranks, but different sizes "
      "(this reproduction, on gloo) can make that comparison itself time out, naming no rank; then print "
      "each rank's parameter shapes (all_gather_object) to find the odd one",
      "the same model code and config on every rank"),
    F("different_seeds", "Different seeds per rank", "group", r"the replicas differ",
      "torch.manual_seed(rank) before building the model: each replica starts elsewhere (without DDP's "
      "broadcast nothing fixes it)", "compare a parameter checksum across ranks (all_gather)",
      "one seed for the model everywhere; per-rank seeds only for data"),
    F("no_sampler", "Same data on every rank", "group", r"samples seen by every rank: [1-9]",
      "no DistributedSampler: every rank trains on the whole dataset, N copies of one rank's work",
      "log the first sample indices of each rank", "DistributedSampler(dataset) in the DataLoader"),
    F("module_prefix", "`module.` prefixes in checkpoints", "group", r"Error\(s\) in loading state_dict",
      "a DDP model's state_dict keys start with 'module.'; a plain model expects them without",
      "print list(state_dict)[:3]", "save model.module.state_dict() (on rank 0 only)"),
    F("accumulation_without_no_sync", "Gradient accumulation without no_sync", "group",
      r"-> [2-9]\d* gradient all-reduce\(s\) per step",
      "every backward all-reduces, also the micro-batches whose gradients are only accumulated",
      "count all-reduces with a comm hook (chapter 8) or the profiler", "`with model.no_sync():` for all "
      "but the last micro-batch"),
    F("rank_local_loss", "A rank-local loss printed as global", "group", r"prints loss [\d.]+ as 'the' loss",
      "each rank's loss is the mean over its own shard only; rank 0's print is not the global loss",
      "print the loss on every rank: they differ", "all_reduce(loss) / world_size before printing (detached)"),
    F("syncbn_cpu", "SyncBatchNorm on CPU", "group", r"SyncBatchNorm expected input tensor to be on GPU",
      "SyncBatchNorm only runs on GPU-like devices", "the error text", "BatchNorm (or GroupNorm) on "
      "CPU; SyncBatchNorm only on GPUs"),
    F("dataloader_oversubscription", "DataLoader worker oversubscription", "group",
      r"= \d+ busy processes on \d+ CPU cores",
      "ranks x (1 + num_workers) processes (x threads each) on fewer cores: they time-slice, all slow",
      "`top`, os.cpu_count(), torch.get_num_threads()", "num_workers <= cores / ranks - 1; "
      "OMP_NUM_THREADS=1 per CPU rank"),
    F("spawn_without_main_guard", "mp.spawn without a __main__ guard", "local",
      r"start a new process before the\s+current process has finished",
      "a spawned child re-imports the script; unguarded, it calls mp.spawn again",
      "the error text", "`if __name__ == \"__main__\":` around mp.spawn; better: torchrun"),
    F("spawn_from_notebook", "mp.spawn from a notebook", "local", r"Can't get attribute '\w+' on <module '__main__'",
      "a notebook's functions live in an unnamed __main__ that a spawned child cannot import",
      "the error text", "a .py file started by torchrun"),
    F("double_spawn", "Double spawning under a launcher", "chapter 5", r"$^",
      "mp.spawn inside a script torchrun already started: nproc x gpus processes whose ranks clash",
      "count processes (`ps`); print RANK/WORLD_SIZE in each", "one launcher: torchrun starts a process "
      "per device; the script never spawns"),
)
del F

BY_KEY = {m.key: m for m in MODES}


def lookup(error_text: str) -> list[FailureMode]:
    """The entries whose symptom matches a pasted error (the troubleshooting index, searchable)."""
    return [m for m in MODES if m.where in ("group", "local")
            and re.search(m.symptom, error_text, re.IGNORECASE)]


# gloo prefixes its errors with its source file (a path on the machine that built torch), and
# CollectiveFingerPrint(...) spells out every TensorOptions field: neither says what differs between ranks.
_SOURCE = re.compile(r"\[[^\]]*\.(?:cc|cpp|h|hpp):\d+\] ")
_NOISE = re.compile(r",? ?TensorDeviceTypes=TensorOptions\([^()]*(\([^()]*\)[^()]*)*\)")


def abridge(error_text: str) -> str:
    """An error as a reader needs it: without gloo's source path and TensorOptions' fields, one clause a line."""
    text = _NOISE.sub("", _SOURCE.sub("", " ".join(error_text.split())))
    text = re.sub(r"\. (Rank \d+ is running)", r".\n\1", text)
    text = re.sub(r", but (Rank \d+ is running)", r",\nbut \1", text)
    return text.replace(").Collectives differ", ").\nCollectives differ")


def first_error(run) -> str:
    """The error of the first rank that raised one itself (a peer's "connection closed" follows it), abridged."""
    own = [r for r in run.ranks if r.status == "error" and r.blame != "peer"]
    r = (own or [r for r in run.ranks if r.status == "error"])[0]
    return abridge(r.raw_error or r.error or "")


def _first_words(text: str, n: int) -> str:
    words = text.split()
    return " ".join(words[:n]) + (" …" if len(words) > n else "")


def table_markdown(repros: dict[str, "Repro"], words: int = 8) -> str:
    """One row a mode: its title, the first ``words`` words of what its reproduction printed, the fix."""
    rows = ["| failure | what you see (this run) | fix |", "|---|---|---|"]
    for m in MODES:
        r = repros.get(m.key)
        seen = f"`{_first_words(r.symptom, words)}`" if r else f"({m.where})"
        rows.append(f"| {m.title} | {seen.replace('|', '/')} | {m.fix.replace('|', '/')} |")
    return "\n".join(rows)


def index_markdown() -> str:
    """The index at the top of the chapter: symptom -> section, from this one table."""
    rows = ["| # | failure | what you see (regex over the real text) | reproduced |", "|---|---|---|---|"]
    for i, m in enumerate(MODES, 1):
        sym = m.symptom.replace("|", "\\|") if m.where in ("group", "local") else "(see the chapter)"
        rows.append(f"| {i} | [{m.title}](#{m.key}) | `{sym}` | {m.where} |")
    return "\n".join(rows)


@dataclass
class Repro:
    key: str
    symptom: str      # the text a learner sees (rank 0's, or the rank that failed first)
    fixed: str
    detail: str | None
    wall_s: float     # the symptom + fixed (+ DETAIL) attempts, slowest rank


def _pick(per_rank: list[dict]) -> dict:
    """The rank whose text says the most: an error beats 'finished', and among errors a rank's own
    timeout beats what its peer saw after it gave up (the rank that timed out first tears its group down,
    so a peer still waiting may read 'Connection closed by peer' instead: which one does is a race)."""
    errs = [r for r in per_rank if re.match(r"^\w+(Error|Exception)", r["symptom"])]
    own = [r for r in errs if re.search(r"Timed out waiting", r["symptom"])]
    return (own or errs or per_rank)[0]


def reproduce_group(keys: list[str], nproc: int = 2, wait: int = 3, stream: bool = False):
    """All ``keys`` in one torchrun job; returns ``({key: Repro}, RunResult)``."""
    from disttutor.launcher.launch import launch

    res = launch("troubleshoot", nproc, {"modes": tuple(keys), "wait": wait}, stream=stream, check=False,
                 timeout=300, collective_timeout=60)
    out = {}
    for k in keys:
        per = [r.results.get("modes", {}).get(k) for r in res.ranks]
        per = [p for p in per if p]
        if not per:
            continue
        p = _pick(per)
        out[k] = Repro(k, p["symptom"], p["fixed"], p.get("detail"), max(q["wall_s"] for q in per))
    return out, res


def reproduce_local(keys: list[str], timeout: float = 300.0) -> dict[str, Repro]:
    """All ``keys`` in one plain python subprocess (no torchrun)."""
    from disttutor.troubleshoot.repro_local import TAG

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "disttutor.troubleshoot.repro_local", "--modes", *keys], capture_output=True,
                       text=True, timeout=timeout, env=env)
    out = {}
    for line in p.stdout.splitlines():
        if line.startswith(TAG):
            r = json.loads(line[len(TAG):])
            out[r["mode"]] = Repro(r["mode"], r["symptom"], r["fixed"], None, r["wall_s"])
    if p.returncode != 0 and len(out) < len(keys):
        raise RuntimeError(f"repro_local stopped: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
    return out


def reproduce_all(nproc: int = 2) -> tuple[dict[str, Repro], float]:
    """Every reproducible mode: one subprocess, one launch. Returns the results and the wall time."""
    t0 = time.perf_counter()
    out = reproduce_local([m.key for m in MODES if m.where == "local"])
    group, _ = reproduce_group([m.key for m in MODES if m.where == "group"], nproc)
    out.update(group)
    return out, time.perf_counter() - t0


def mismatches(repros: dict[str, Repro]) -> list[str]:
    """Entries whose real output no longer matches their symptom regex (the test's check)."""
    bad = []
    for m in MODES:
        if m.where not in ("group", "local"):
            continue
        r = repros.get(m.key)
        if r is None:
            bad.append(f"{m.key}: not reproduced")
        elif not re.search(m.symptom, r.symptom, re.IGNORECASE):
            bad.append(f"{m.key}: {r.symptom!r} does not match {m.symptom!r}")
    return bad
