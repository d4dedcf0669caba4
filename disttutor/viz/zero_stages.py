"""Chapter 11's idealised picture of ZeRO's stages: which bytes of the model states each rank holds.

Introduced in chapter 11. The model states of fp32 AdamW laid out as one strip of bytes -- weights
(4 bytes a parameter), gradients (4 a trainable parameter), AdamW's two moments (8 a trainable
parameter) -- drawn once per rank and per stage, with the bytes the rank stores filled in and the
bytes it does not store left as an outline. The shards are the ideal ones (equal slices, no
padding, no whole-tensor owners): the measured bytes of the chapter's run sit next to it.
Kernel side; matplotlib only inside the drawing function.
"""
from __future__ import annotations

PARTS = ("weights", "gradients", "AdamW state")
BYTES_PER = {"weights": 4, "gradients": 4, "AdamW state": 8}  # fp32 AdamW (chapter 1's calculator)
COLORS = {"weights": "#4C72B0", "gradients": "#DD8452", "AdamW state": "#55A868"}
# ZeRO stage -> the first part it shards: stage 1 the optimizer state, stage 2 also the gradients, stage 3 the weights.
STAGES = (("DDP", 0), ("ZeRO-1", 1), ("ZeRO-2", 2), ("ZeRO-3 = FSDP", 3))
SHARDED_FROM = {"AdamW state": 1, "gradients": 2, "weights": 3}


def part_bytes(n_params: int, n_trainable: int) -> dict[str, int]:
    """Bytes of each part of the model states, whole (frozen parameters have weights only)."""
    return {"weights": BYTES_PER["weights"] * n_params, "gradients": BYTES_PER["gradients"] * n_trainable,
            "AdamW state": BYTES_PER["AdamW state"] * n_trainable}


def held(n_params: int, n_trainable: int, world: int, stage: int, rank: int) -> dict[str, tuple[float, float]]:
    """Per part, the byte range ``(start, stop)`` within that part that ``rank`` stores at ``stage``."""
    out = {}
    for part, size in part_bytes(n_params, n_trainable).items():
        if stage >= SHARDED_FROM[part]:
            out[part] = (size * rank / world, size * (rank + 1) / world)   # this rank's 1/n slice
        else:
            out[part] = (0.0, float(size))                                  # the whole part
    return out


def held_total(n_params: int, n_trainable: int, world: int, stage: int) -> float:
    """Bytes of model states one rank holds at ``stage`` (every rank the same: ideal shards)."""
    return sum(b - a for a, b in held(n_params, n_trainable, world, stage, 0).values())


def zero_stages_figure(n_params: int, n_trainable: int, world: int):
    """One strip of the model states' bytes per (stage, rank); filled = stored by that rank."""
    import matplotlib.pyplot as plt

    sizes = part_bytes(n_params, n_trainable)
    offset, x = {}, 0
    for part in PARTS:
        offset[part], x = x, x + sizes[part]
    total = x
    rows = [(name, stage, rank) for name, stage in STAGES for rank in range(world)]
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(rows) + 1.5))
    for y, (name, stage, rank) in enumerate(reversed(rows)):
        for part, (a, b) in held(n_params, n_trainable, world, stage, rank).items():
            ax.barh(y, sizes[part] / 1024, left=offset[part] / 1024, height=0.7, color="white",
                    edgecolor=COLORS[part], linewidth=0.8)                      # the whole part: not stored
            ax.barh(y, (b - a) / 1024, left=(offset[part] + a) / 1024, height=0.7, color=COLORS[part])
        ax.text(total / 1024 * 1.01, y, f"{held_total(n_params, n_trainable, world, stage) / 1024:.0f} KiB",
                va="center", fontsize=9)
    ax.set_yticks(range(len(rows)), [f"{name}, rank {rank}" for name, _, rank in reversed(rows)], fontsize=9)
    for k in range(1, len(STAGES)):
        ax.axhline(k * world - 0.5, color="#999999", linewidth=0.6)
    ax.set_xlim(0, total / 1024 * 1.12)
    ax.set_xlabel(f"bytes of the model states (KiB): {n_params:,} parameters, {n_trainable:,} trainable, fp32 AdamW")
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[p]) for p in PARTS]
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="#555555"))
    fig.legend(handles, [f"{p} (stored)" for p in PARTS] + ["not stored on this rank"], fontsize=8, ncol=4,
               loc="lower center", frameon=False)
    ax.set_title(f"What each of {world} ranks stores, stage by stage (idealised: equal shards); right: bytes a rank",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig
