"""Plots of DataParallel's per-step traffic versus a ring all-reduce (chapter 3).

:func:`traffic_rows` turns the :class:`~disttutor.RunResult` of a
``disttutor.programs.dp_traffic`` launch into plain rows (measured bytes next
to the formula of :func:`disttutor.data_parallel.dataparallel.expected_bytes`);
:func:`plot_traffic` draws them. No widgets, no torch: tests call both.
"""
from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from disttutor.data_parallel.dataparallel import PATTERNS, expected_bytes

STYLE = {"dp-copy": ("tab:red", "o", "DataParallel, copies (no NCCL; the article's picture)"),
         "dp-chain": ("tab:orange", "s", "DataParallel, pipelined broadcast/reduce (NCCL's shape)"),
         "ddp-ring": ("tab:blue", "^", "DDP, ring all-reduce")}


def traffic_rows(res: Any) -> list[dict[str, Any]]:
    """One row per (N, pattern, rank) of a ``dp_traffic`` launch: measured and expected bytes per step."""
    rows, r0 = [], res.results[0]
    for n in sorted(int(k) for k in r0["runs"]):
        for pattern in PATTERNS:
            if pattern not in r0["runs"][str(n)]:
                continue
            for rank in range(n):
                m = res.results[rank]["runs"][str(n)][pattern]
                exp = expected_bytes(pattern, n, rank, r0["n_params"], r0["batch"], r0["d_in"], r0["d_out"])
                rows.append({"N": n, "pattern": pattern, "rank": rank, "sent": m["sent"], "recv": m["recv"],
                             "through": m["sent"] + m["recv"], "expected": exp["sent"] + exp["recv"],
                             "matches": (m["sent"], m["recv"]) == (exp["sent"], exp["recv"])})
    return rows


def plot_traffic(rows: list[dict[str, Any]], param_bytes: int | None = None):
    """Left: bytes through rank 0 per step versus N. Right: bytes through every rank at the largest N."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 2]})
    ns = sorted({r["N"] for r in rows})
    for pattern in PATTERNS:
        pts = sorted((r["N"], r["through"], r["expected"]) for r in rows if r["pattern"] == pattern and r["rank"] == 0)
        if not pts:
            continue
        color, marker, label = STYLE[pattern]
        ax.plot([p[0] for p in pts], [p[2] / 1e3 for p in pts], "--", color=color, lw=1, alpha=0.7)
        ax.plot([p[0] for p in pts], [p[1] / 1e3 for p in pts], marker, color=color, ms=8, label=label)
    if param_bytes:
        ax.axhline(4 * param_bytes / 1e3, color="gray", lw=0.8, ls=":")
        ax.annotate("4S: a ring's limit (2S out + 2S in)", (ns[0], 4 * param_bytes / 1e3), color="gray",
                    fontsize=8, xytext=(0, 3), textcoords="offset points")
    ax.set(xlabel="N (ranks standing in for devices)", ylabel="kB through rank 0 per step (sent + received)",
           title="Through the first device: measured (markers) vs formula (dashed)", xticks=ns)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="upper left")
    n = ns[-1]
    width = 0.8 / len(PATTERNS)
    for i, pattern in enumerate(PATTERNS):
        per = sorted((r["rank"], r["through"]) for r in rows if r["pattern"] == pattern and r["N"] == n)
        if per:
            bx.bar([k + (i - 1) * width for k, _ in per], [b / 1e3 for _, b in per], width,
                   color=STYLE[pattern][0], label=pattern)
    bx.set(xlabel="rank", ylabel="kB sent + received per step", title=f"Every rank, N = {n}",
           xticks=list(range(n)))
    bx.legend(fontsize=8)
    fig.tight_layout()
    return fig
