"""Chapter 8's figures: precision ranges, fp32 vs autocast loss, collectives per step, hook bytes, loaders."""
from __future__ import annotations

import matplotlib.pyplot as plt
import torch


def plot_ranges(ax=None):
    """Smallest normal, smallest subnormal and largest value of fp16, bf16, fp32 (log2 scale), with fraction bits."""
    ax = ax or plt.subplots(figsize=(7, 2.6), layout="constrained")[1]
    for i, dt in enumerate((torch.float16, torch.bfloat16, torch.float32)):
        fi = torch.finfo(dt)
        lo, tiny, hi = torch.log2(torch.tensor(fi.smallest_normal * fi.eps)), torch.log2(torch.tensor(fi.tiny)), \
            torch.log2(torch.tensor(fi.max))
        ax.plot([lo, hi], [i, i], lw=6, alpha=0.35, color=f"C{i}")
        ax.plot([tiny, hi], [i, i], lw=6, color=f"C{i}", label=f"{str(dt)[6:]}: {-int(torch.log2(torch.tensor(fi.eps)))} fraction bits (+1 implicit)")
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
    """Items per second (all ranks) per epoch for every loader setting; processes vs cores in the labels."""
    ax = ax or plt.subplots(figsize=(10, 3.2))[1]
    n_ep, width = len(rows[0]["items_per_s"]), 0.8 / len(rows[0]["items_per_s"])
    for e in range(n_ep):
        ax.bar([i + (e - (n_ep - 1) / 2) * width for i in range(len(rows))],
               [nproc * r["items_per_s"][e] for r in rows], width, label=f"epoch {e + 1}")
    ax.set_xticks(range(len(rows)), [f"{r['label']}\n{nproc * (1 + r['workers'])} procs / {cores} cores"
                                     for r in rows], fontsize=7)
    ax.set_ylabel("items / s (all ranks)")
    ax.set_title("DataLoader settings, measured (one option changed at a time after the num_workers sweep)")
    ax.legend()
    return ax


def plot_buckets(rows: list[dict], axes=None):
    """bucket_cap_mb sweep: backward with DDP vs backward alone + all-reduces alone (left); buckets (right)."""
    if axes is None:
        # constrained layout makes room for the right panel's two-line y-label (it overlapped the left panel)
        axes = plt.subplots(1, 2, figsize=(11, 3.4), layout="constrained")[1]
    ax1, ax2 = axes
    xs = range(len(rows))
    labels = [f"{r['cap_mb']:g} MB\n{r['buckets']} bucket{'s' * (r['buckets'] != 1)}" for r in rows]
    ax1.bar([x - 0.2 for x in xs], [r["ddp_ms"] for r in rows], 0.4, label="backward under DDP (all-reduces in flight)")
    ax1.bar([x + 0.2 for x in xs], [r["bwd_ms"] for r in rows], 0.4, label="backward alone (no_sync)")
    ax1.bar([x + 0.2 for x in xs], [r["comm_ms"] for r in rows], 0.4, bottom=[r["bwd_ms"] for r in rows],
            label="+ the same all-reduces alone")
    ax1.set_xticks(list(xs), labels)
    ax1.set_ylabel("ms per step (median)")
    ax1.set_title("overlap = left bar shorter than right stack")
    top = max(max(r["ddp_ms"], r["bwd_ms"] + r["comm_ms"]) for r in rows)
    ax1.set_ylim(0, 1.5 * top)  # head room: the legend sits above the bars, not on them
    ax1.legend(fontsize=7, loc="upper center", ncol=1)
    ax2.bar(list(xs), [r["hidden_ms"] for r in rows], color=["C2" if r["hidden_ms"] > 0 else "C3" for r in rows])
    ax2.axhline(0, color="k", lw=0.8)
    ax2.set_xticks(list(xs), labels)
    ax2.set_ylabel("ms of communication hidden\n(negative: DDP cost extra)")
    ax2.set_title("hidden = backward + all-reduces - DDP backward")
    return axes
