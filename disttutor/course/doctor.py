"""``disttutor doctor``: is this machine ready for the course? (chapter 0)

Reports the torch version, CPU cores, GPUs, which distributed backends this
torch build contains, and proves the whole chain works with a real 2-rank
all-reduce launched through :func:`disttutor.launch`.
"""
from __future__ import annotations

import os
from disttutor.contract.machine import usable_cores
import platform
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DoctorReport:
    facts: dict[str, Any]
    checks: dict[str, bool] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(self.checks.values())

    def __str__(self) -> str:
        rows = list(self.facts.items()) + [(f"check: {k}", "ok" if v else "FAILED") for k, v in self.checks.items()]
        w = max(len(k) for k, _ in rows)
        lines = [f"{k.ljust(w)}  {v}" for k, v in rows]
        lines += [f"problem: {p}" for p in self.problems]
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def backends() -> dict[str, bool]:
    """Which process-group backends this torch build contains (detected live)."""
    import torch.distributed as dist

    return {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(), "mpi": dist.is_mpi_available(),
            "ucc": getattr(dist, "is_ucc_available", lambda: False)()}


def doctor(nproc: int = 2, run: bool = True, timeout: float = 60.0) -> DoctorReport:
    import torch

    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": torch.__version__,
        "cpu cores": f"{usable_cores()} usable of {os.cpu_count()}",
        "gpus": n_gpu,
        "backends built": ", ".join(k for k, v in backends().items() if v) or "none",
    }
    if n_gpu:
        facts["gpu 0"] = torch.cuda.get_device_name(0)
    rep = DoctorReport(facts)
    rep.checks["torch.distributed available"] = torch.distributed.is_available()
    rep.checks["gloo built"] = backends()["gloo"]
    if run:
        from disttutor.launcher.launch import launch
        from disttutor.launcher.results import LaunchError

        try:
            res = launch("hello", nproc, timeout=timeout, stream=False)
            want = nproc * (nproc + 1) / 2
            good = all(r["after"] == [want] * 3 for r in res.results)
            got = (f"every rank got {want:g}" if good else
                   f"ranks got {[r['after'] for r in res.results]}, expected {want:g}")  # what was measured
            rep.facts["all-reduce test"] = f"{nproc} ranks, backend {res.results[0]['backend']}, {got}"
            rep.checks[f"{nproc}-rank all-reduce"] = good
        except LaunchError as e:
            rep.checks[f"{nproc}-rank all-reduce"] = False
            rep.problems.append(str(e))
    return rep
