"""Chapter 13's named checks: the published runs' layouts against the GPU counts and batch their papers report."""
from __future__ import annotations

from typing import Sequence

from disttutor.checks.claims.base import claim


def check_llama_layouts(runs: Sequence, gpus: Sequence[int], tokens_per_batch: int, as_printed: int) -> str:
    """Every Llama 3 row's layout (TP x CP x PP x DP) multiplies to its reported GPU count, every row holds
    ``tokens_per_batch`` tokens a step, and the long-context row's printed DP (giving ``as_printed`` GPUs)
    falls short of its reported count: its DP is the one derived from the count, 8."""
    got = [r.layout.n for r in runs]
    claim(got == list(gpus), f"the layouts multiply to {got} GPUs, the paper reports {list(gpus)}")
    tokens = [r.seq * r.global_batch for r in runs]
    claim(all(t == tokens_per_batch for t in tokens),
          f"tokens per batch {tokens}, the paper reports {tokens_per_batch:,} in every row")
    last = runs[-1]
    claim(as_printed != last.layout.n,
          f"the printed layout gives {as_printed:,} GPUs, the reported {last.layout.n:,}: nothing to derive")
    claim(last.layout.dp * as_printed // 4 == last.layout.n,
          f"the long-context row's DP {last.layout.dp} does not turn the printed layout's {as_printed:,} GPUs "
          f"into the reported {last.layout.n:,}")
    return (f"layouts multiply to the reported GPU counts {list(gpus)}; "
            f"the 131K row as printed (DP 4) gives {as_printed:,}")


def check_local_model(before: Sequence[dict], after: Sequence[dict], quiet: bool, load: str, tol: float = 0.25) -> str:
    """With the measured terms every local run's predicted/measured ratio is within ``tol`` of 1 -- asserted
    when the machine was ``quiet`` (other processes' load stretches every measured time, and no model of this
    machine predicts that), reported otherwise; a run outside ``tol`` always names the term it may lack.
    ``before``: the first model's rows, whose span the line reports. ``load`` says what the machine was doing."""
    was = {r["run"]: r["predicted/measured"] for r in before}
    now = {r["run"]: r["predicted/measured"] for r in after}
    within = [k for k, v in now.items() if 1 - tol <= v <= 1 + tol]
    span = (f"predicted/measured {min(was.values()):.2f}-{max(was.values()):.2f} -> "
            f"{min(now.values()):.2f}-{max(now.values()):.2f}, {len(within)} of {len(now)} within {tol:.0%}")
    unnamed = [r["run"] for r in after if r["run"] not in within and not r.get("missing term (if not)")]
    claim(not unnamed, f"{unnamed}: outside {tol:.0%} with no missing term named")
    if not quiet:
        return f"{span}, on a busy machine ({load}): reported, not checked"
    outside = {k: v for k, v in now.items() if k not in within}
    claim(not outside, f"on a quiet machine ({load}) these runs are outside {tol:.0%}: {outside}")
    return f"checked: {span} ({load})"
