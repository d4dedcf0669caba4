"""CommRecorder (chapter 8's byte counts) records torch 2.13's collective names and the deprecated ones, once each."""
from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from disttutor.data_parallel.perf import CommRecorder


def test_new_and_old_gather_names_are_recorded_once(tmp_path):
    # A one-rank gloo group in this process: the calls are real, the recorder only wraps them.
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        x = torch.arange(4, dtype=torch.float32)
        out = torch.empty(4)
        with CommRecorder() as rec, warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the old name warns: that is the point of it
            dist.all_reduce(x)
            dist.all_gather_single(out, x)
            dist.all_gather_into_tensor(out, x)   # calls distributed_c10d's all_gather_single: not counted twice
        assert [c[0] for c in rec.calls] == ["all_reduce", "all_gather_single", "all_gather_into_tensor"]
        assert all(c[1:] == (4, 16) for c in rec.calls)
        assert dist.all_gather_single.__name__ == "all_gather_single"   # unwrapped again on exit
    finally:
        dist.destroy_process_group()
