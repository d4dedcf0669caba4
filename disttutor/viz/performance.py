"""Chapter 8's figures: precision ranges, fp32 vs autocast loss, collectives per step, hook bytes, loaders."""
from __future__ import annotations

import matplotlib.pyplot as plt
import torch


def plot_ranges(ax=None):
    """Smallest normal, smallest subnormal and largest value of fp16, bf16, fp32 (log2 scale), with mantissa bits."""
    ax = ax or plt.subplots(figsize=(7, 2.6))[1]
    for i, dt in enumerate((torch.float16, torch.bfloat16, torch.float32)):
        fi = torch.finfo(dt)
        lo, tiny, hi = torch.log2(torch.tensor(fi.smallest_normal * fi.eps)), torch.log2(torch.tensor(fi.tiny)), \
            torch.log2(torch.tensor(fi.max))
        ax.plot([lo, hi], [i, i], lw=6, alpha=0.35, color=f"C{i}")
        ax.plot([tiny, hi], [i, i], lw=6, color=f"C{i}", label=f"{str(dt)[6:]}: {-int(torch.log2(torch.tensor(fi.eps)))} mantissa bits")
    ax.axvline(torch.log2(torch.tensor(1e-8)).item(), color="k", ls=":", label="a gradient of 1e-8")
    ax.set_yticks(range(3), ["fp16", "bf16", "fp32"])
    ax.set_xlabel("log2 |x| (pale: subnormals)")
    ax.set_title("range: bf16 ~ fp32, fp16 much narrower; precision: bf16 < fp16 < fp32")
    ax.legend(fontsize=7, loc="lower right")
    return ax


def plot_losses(curves: dict[str, list[float]], ax=None, title: str = "loss per step (mean over ranks)"):
    ax = ax or plt.subplots(figsize=(6, 3))[1]
    for (name, ys), style in zip(curves.items(), ("-", "--", ":", "-.", (0, (1, 3)), (0, (5, 1)))):
        ax.plot(range(1, len(ys) + 1), ys, linestyle=style, label=name)
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("MSE loss")
    ax.set_title(title)
    ax.legend()
    return ax


def plot_collectives(rows: list[dict], ax=None):
    """All-reduces per optimiser step (full groups) vs k, with and without no_sync."""
    ax = ax or plt.subplots(figsize=(5, 3))[1]
    for mode, label in ((False, "all-reduce every micro-batch"), (True, "no_sync() until the last")):
        pts = [(r["k"], r["allreduces"][0]) for r in rows if r["no_sync"] == mode]
        ax.plot(*zip(*pts), marker="o", label=label)
    ax.set_xlabel("k (micro-batches per optimiser step)")
    ax.set_ylabel("all-reduces per step (counted)")
    ax.legend()
    return ax


def plot_bytes(rows: list[dict], ax=None):
    ax = ax or plt.subplots(figsize=(6, 3))[1]
    names = [r["hook"] for r in rows]
    ax.bar(names, [r["bytes_per_step"] / 1024 for r in rows])
    ax.set_ylabel("KiB handed to collectives\nper step per rank")
    ax.set_title("bytes per step, by communication hook (measured)")
    return ax


def plot_loading(rows: list[dict], nproc: int, cores: int, ax=None):
    """Items per second (summed over ranks, per epoch) vs num_workers; processes vs cores in the labels."""
    ax = ax or plt.subplots(figsize=(6, 3))[1]
    for e in range(len(rows[0]["items_per_s"])):
        ax.plot([r["workers"] for r in rows], [nproc * r["items_per_s"][e] for r in rows], marker="o",
                label=f"epoch {e + 1}")
    ax.set_xticks([r["workers"] for r in rows],
                  [f"{r['workers']}\n({nproc * (1 + r['workers'])} procs / {cores} cores)" for r in rows])
    ax.set_xlabel("num_workers per rank")
    ax.set_ylabel("items / s (all ranks)")
    ax.legend()
    return ax
