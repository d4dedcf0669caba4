"""A hang, drawn: every rank's collectives by sequence number, one rank missing (chapter 9's schematic).

Introduced in chapter 9. Collectives match by their *sequence number*: the k-th collective a rank calls
in a group pairs with the k-th call of every other rank. When ``skip_rank`` never makes call ``seq``,
every other rank sits in that call until the collective timeout, ``timeout_s`` after it entered, and
raises there; the rank that went elsewhere raises nothing, and torchrun stops it when a peer fails. A
stack dump taken ``dump_after_s`` after the start (``dump_after_s < timeout_s``) finds every rank alive.

Idealised: every rank starts at 0 and enters the collective at once; start-up and teardown are not
drawn. A plain function from the stuck job's parameters to a matplotlib figure.
"""
from __future__ import annotations

COLORS = {"wait": "tab:red", "elsewhere": "0.6", "timeout": "black", "dump": "tab:purple"}


def hang_spans(world: int, skip_rank: int, timeout_s: float, op: str = "all_reduce",
               seq: int = 0) -> list[tuple[int, str, str, float, float]]:
    """``(rank, kind, label, start_s, end_s)``: the waiting ranks sit in ``op`` #``seq`` from 0 to the
    timeout; ``skip_rank`` is elsewhere until torchrun stops it at the same instant."""
    if world < 2 or not 0 <= skip_rank < world:
        raise ValueError(f"need world >= 2 and 0 <= skip_rank < world, got world={world}, skip_rank={skip_rank}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s}")
    out = []
    for r in range(world):
        if r == skip_rank:
            out.append((r, "elsewhere", f"never calls {op} #{seq}: elsewhere in its own code", 0.0, timeout_s))
        else:
            out.append((r, "wait", f"in {op} #{seq}, waiting for rank {skip_rank}", 0.0, timeout_s))
    return out


def plot_hang(world: int, skip_rank: int, timeout_s: float, dump_after_s: float | None = None,
              op: str = "all_reduce", seq: int = 0):
    """One row per rank on a time axis in seconds: who waits in collective ``op`` #``seq``, who is elsewhere,
    when the timeout fires (``timeout_s``) and when the stacks are dumped (``dump_after_s``). Returns the figure."""
    import matplotlib.pyplot as plt

    if dump_after_s is not None and not 0 <= dump_after_s < timeout_s:
        raise ValueError(f"dump_after_s must be in [0, timeout_s), got {dump_after_s} (timeout {timeout_s})")
    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.55 * world))
    for r, kind, label, s, e in hang_spans(world, skip_rank, timeout_s, op, seq):
        ax.broken_barh([(s, e - s)], (r - 0.35, 0.7), color=COLORS[kind], alpha=0.35,
                       hatch="//" if kind == "wait" else None, edgecolor=COLORS[kind])
        ax.text(s + 0.02 * timeout_s, r, label, va="center", fontsize=9)
        end = ("raises: timed out after the collective timeout" if kind == "wait"
               else "raises nothing; stopped by torchrun")
        ax.plot([e], [r], marker="X" if kind == "wait" else "s", color=COLORS["timeout"], markersize=9)
        ax.text(e + 0.03 * timeout_s, r, end, va="center", fontsize=8)
    ax.axvline(timeout_s, color=COLORS["timeout"], linestyle="-", linewidth=1)
    ax.text(timeout_s + 0.02 * timeout_s, -0.75, f"collective timeout: {timeout_s:g} s", ha="left", fontsize=8)
    if dump_after_s is not None:
        ax.axvline(dump_after_s, color=COLORS["dump"], linestyle="--", linewidth=1.2)
        ax.text(dump_after_s + 0.02 * timeout_s, -0.75, f"stacks dumped: {dump_after_s:g} s", ha="left", fontsize=8,
                color=COLORS["dump"])
    ax.set_yticks(range(world), [f"rank {r}" for r in range(world)])
    ax.set_ylim(world - 0.5, -1.0)
    ax.set_xlim(0, 1.75 * timeout_s)
    ax.set_xlabel("seconds since the ranks started (idealised: start-up and teardown not drawn)")
    ax.set_title(f"{world} ranks, rank {skip_rank} skips {op} #{seq}: every other rank waits in it until the timeout",
                 fontsize=10)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return fig
