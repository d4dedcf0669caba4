"""Chapter 9's troubleshooting lab: many failure modes, one job, each bounded by seconds.

Each mode of :mod:`disttutor.troubleshoot.repro_group` runs on a fresh process group with a
short timeout: first the mistake (its error text or misbehaviour is the
*symptom*), then the fix (the *fixed* run). Modes whose diagnosis tool is
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` run a third time under it. Each rank reports
``{mode: {"symptom", "fixed", "detail", "wall_s"}}``::

    disttutor run troubleshoot -n 2 -- --modes skipped_collective unused_parameters
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass

import torch.distributed as dist

from disttutor.rank import runtime
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, opt
from disttutor.troubleshoot.repro_group import MODES, new_group
from disttutor.contract.errors import readable_error

# Modes whose diagnosis is TORCH_DISTRIBUTED_DEBUG=DETAIL (it fingerprints every collective).
# Not DDP modes: a DDP built on a group created after set_debug_level(DETAIL) mid-run segfaults in
# DDP's logger (torch 2.13, seen here); set the variable before init_process_group for DDP.
DETAIL_MODES = ("mismatched_collective", "rank_dependent_shape")
# CollectiveFingerPrint(...) spells out every TensorOptions field; keep what differs between ranks.
_NOISE = re.compile(r",? ?TensorDeviceTypes=TensorOptions\([^()]*(\([^()]*\)[^()]*)*\)")


@dataclass(frozen=True)
class TroubleshootConfig:
    modes: tuple[str, ...] = opt(tuple(MODES), "failure modes to reproduce, in this order")
    wait: int = opt(3, "seconds a collective of a reproduction may wait (its group's timeout)")

    def __post_init__(self):
        require_positive(self, "wait")
        unknown = [m for m in self.modes if m not in MODES]
        if unknown:
            raise ValueError(f"unknown mode(s) {unknown}; modes are {', '.join(MODES)}")


def _attempt(name: str, wait: float, fixed: bool) -> str:
    """Run one mode on a fresh group; an exception is the symptom (one readable line)."""
    # The barrier runs on the default group (long timeout): a rank that waited out the previous
    # reproduction's timeout arrives seconds late, and the next group's connect must not time out.
    dist.barrier()
    try:
        return MODES[name](new_group(wait), dist.get_rank(), dist.get_world_size(), fixed)
    except Exception as exc:  # the failure IS the lesson: keep its text, go on with the next mode
        text = _NOISE.sub("", f"{type(exc).__name__}: {exc}")
        # one line: load_state_dict puts the missing/unexpected keys on the lines below its header
        return readable_error(" ".join(text.split()), width=400) or ""


def run(cfg: TroubleshootConfig) -> None:
    with runtime.setup() as ctx:
        out = {}
        for i, name in enumerate(cfg.modes):
            t0 = time.perf_counter()
            rec = {"symptom": _attempt(name, cfg.wait, False)}
            rec["symptom_s"] = round(time.perf_counter() - t0, 2)
            rec["fixed"] = _attempt(name, cfg.wait, True)
            rec["detail"] = None
            if name in DETAIL_MODES:
                dist.set_debug_level(dist.DebugLevel.DETAIL)  # read when a group is created: the next one
                try:
                    rec["detail"] = _attempt(name, cfg.wait, False)
                finally:
                    dist.set_debug_level(dist.DebugLevel.OFF)
            rec["wall_s"] = round(time.perf_counter() - t0, 2)
            out[name] = rec
            runtime.report(modes=out)
            runtime.progress(i + 1, len(cfg.modes), desc=name)
            runtime.rank_print(f"{name}: {rec['symptom'][:160]}")


main = cli(TroubleshootConfig, run)


if __name__ == "__main__":
    main()
