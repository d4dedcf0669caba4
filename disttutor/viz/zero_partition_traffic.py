"""ZeRO-1/2/3 drawn: what each data-parallel rank holds, and the bytes each rank sends per step.

Introduced in chapter 1 (why distributed training). An idealised picture, no measurement: the
model states come from chapter 1's calculator (:func:`disttutor.sharding.memory.per_device`), the
traffic from the counts of the collectives each strategy runs once per optimizer step. With ``S``
the bytes of the gradients (= of the weights the ranks compute with) and ``n`` ranks:

* DDP: one ring all-reduce of the gradients, a reduce-scatter plus an all-gather: ``2 (n-1)/n S``;
* ZeRO-1 and ZeRO-2: reduce-scatter the gradients, update one shard, all-gather the new weights:
  the same ``2 (n-1)/n S``;
* ZeRO-3 (FSDP): all-gather the weights for the forward, again for the backward, reduce-scatter
  the gradients: ``3 (n-1)/n S``, 1.5x DDP;
* tensor parallel (Megatron): two all-reduces of the activations ``b s h e`` per layer in the
  forward and two in the backward: ``4 L 2 (n-1)/n b s h e``;
* pipeline: the busiest (middle) stage sends its output activations ``b s h e`` forward and the
  gradient of its input back: ``2 b s h e`` (one of the two on a 2-stage pipeline), whatever the model's size.

``b`` is the batch a rank sees, ``s`` the sequence, ``h`` the hidden size, ``e`` bytes per
activation (2 in mixed precision, 4 in fp32), ``L`` the layers a rank holds. Latency (α) is left
out: these are bytes, and the time is about bytes / B. Kernel side; no torch.
"""
from __future__ import annotations

from typing import Any

from disttutor.sharding import memory as mem
from disttutor.viz import memory as vmem

STATES = ("weights", "gradients", "optimizer")
ZERO = {"DDP": 0, "ZeRO-1": 1, "ZeRO-2": 2, "ZeRO-3": 3}
COLORS = vmem.COLORS
SENT_LABEL = "GiB each rank sends per step"


def sent_bytes(cfg: mem.TrainingSetup) -> float:
    """Bytes the busiest rank sends in one optimizer step of ``cfg`` (the module's formulas)."""
    bpp = mem.bytes_per_param(cfg.precision, cfg.optimizer)
    elem = 4 if cfg.precision == "fp32" else 2  # activation bytes, as the calculator counts them
    local = cfg.params * bpp["gradients"] / (cfg.tp * cfg.pp)  # S: the gradients this rank's replica has
    act = (cfg.batch // cfg.dp) * cfg.seq * cfg.hidden * elem  # b s h e: one layer's output
    sent = 0.0
    if cfg.dp > 1:
        sent += (3 if cfg.zero == 3 else 2) * (cfg.dp - 1) / cfg.dp * local
    if cfg.tp > 1:
        sent += 4 * (cfg.layers // cfg.pp) * 2 * (cfg.tp - 1) / cfg.tp * act
    if cfg.pp > 1:
        sent += (2 if cfg.pp > 2 else 1) * act
    return sent


def traffic_rows(preset: str, batch: int, seq: int, precision: str, optimizer: str, n: int) -> list[dict[str, Any]]:
    """The calculator's strategies (same names, same order) with GiB sent per rank per step."""
    cfg = vmem.setup(preset, batch, seq, precision, optimizer)
    return [{"strategy": name, "sent": sent_bytes(s) / mem.GIB} for name, s in mem.strategies(cfg, n).items()]


def held_bytes(cfg: mem.TrainingSetup, stage: int, n: int) -> dict[str, float]:
    """Bytes of each model state one of ``n`` data-parallel ranks holds at ZeRO ``stage`` (0: DDP)."""
    per = mem.per_device(_dp(cfg, stage, n))
    return {k: per[k] for k in STATES}


def _dp(cfg: mem.TrainingSetup, stage: int, n: int) -> mem.TrainingSetup:
    base = {k: getattr(cfg, k) for k in ("layers", "hidden", "heads", "vocab", "seq", "batch", "precision",
                                         "optimizer")}
    return mem.TrainingSetup(**base, dp=n, zero=stage)


def zero_schematic(preset: str, batch: int, seq: int, precision: str, optimizer: str, n: int):
    """Top: one panel per strategy (DDP, ZeRO-1/2/3), a column per rank: the outline is a full copy of
    the model states, the filled part what the rank holds (rank r keeps shard r of a sharded state).
    Bottom: the GiB each rank sends per step, for every strategy of the calculator. Returns the figure."""
    import matplotlib.pyplot as plt

    cfg = vmem.setup(preset, batch, seq, precision, optimizer)
    full = held_bytes(cfg, 0, n)
    fig = plt.figure(figsize=(11, 6.4))
    grid = fig.add_gridspec(2, len(ZERO), height_ratios=[3, 2], hspace=0.5, top=0.84, wspace=0.08)
    full_height = sum(full.values()) / mem.GIB
    axes = []
    for j, (name, stage) in enumerate(ZERO.items()):
        ax = fig.add_subplot(grid[0, j], sharey=axes[0] if axes else None)
        axes.append(ax)
        held = held_bytes(cfg, stage, n)
        for r in range(n):
            bottom = 0.0
            for part in STATES:
                size = full[part] / mem.GIB
                ax.bar(r, size, bottom=bottom, width=0.8, fill=False, edgecolor=COLORS[part], lw=0.8)
                if held[part] == full[part]:
                    ax.bar(r, size, bottom=bottom, width=0.8, color=COLORS[part])
                else:  # sharded: rank r keeps slice r of this state
                    ax.bar(r, size / n, bottom=bottom + r * size / n, width=0.8, color=COLORS[part])
                bottom += size
        tot = sum(held.values()) / mem.GIB
        sent = sent_bytes(_dp(cfg, stage, n)) / mem.GIB
        ax.set_title(f"{name}: holds {tot:.1f} GiB\nsends {sent:.1f} GiB per step", fontsize=9)
        ax.set_xticks(range(n))
        ax.set_xlabel("rank", fontsize=9)
        if j:
            ax.tick_params(labelleft=False)
    axes[0].set_ylabel("GiB of model states per rank\n(outline: a full copy)", fontsize=9)
    axes[0].set_ylim(0, full_height * 1.05)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[p]) for p in STATES]
    fig.legend(handles, list(STATES), fontsize=8, loc="upper center", ncol=3, bbox_to_anchor=(0.5, 0.955),
               frameon=False)
    bx = fig.add_subplot(grid[1, :])
    rows = [r for r in traffic_rows(preset, batch, seq, precision, optimizer, n) if r["strategy"] != "1 device"]
    names = [r["strategy"] for r in rows]
    vals = [r["sent"] for r in rows]
    bx.barh(names, vals, color=["#8172B3" if "pipeline" in s else "#64B5CD" if "tensor" in s else "#4C72B0"
                                for s in names])
    for i, v in enumerate(vals):
        bx.text(v, i, f" {v:.1f}", va="center", fontsize=8)
    bx.invert_yaxis()
    bx.set_xlim(0, max(vals) * 1.12)
    bx.set_xlabel(SENT_LABEL + " (each receives as much)", fontsize=9)
    bx.tick_params(axis="y", labelsize=8)
    fig.suptitle(f"{vmem.title(cfg, n)}: who holds what, who sends what", fontsize=10)
    return fig
