"""Checkpoints that let a training job continue *exactly*: atomic, rotated, loaded without pickle.

Introduced in chapter 10 (fault tolerance); chapter 11 reuses it for sharded models. One
checkpoint is a directory ``step_000012/`` holding

* the model and the optimiser's tensors, written with ``torch.distributed.checkpoint`` (DCP)
  from :func:`get_state_dict` -- the same call works for DDP, FSDP and tensor-parallel models,
  each rank writing its own shards in parallel;
* ``meta.json``: everything that is not a tensor (step, optimiser hyper-parameters, LR
  schedule, loss scaler, the caller's own values) as JSON;
* ``rng_rank{r}.pt``: each rank's random-number-generator state (dropout differs per rank).

**Atomic**: everything is written into ``step_000012.tmp/``; only when every rank has finished
does rank 0 rename it to ``step_000012/`` (a rename is atomic on one file system). A job killed
in the middle of a save leaves a ``.tmp`` directory that :func:`latest` never returns, so the
previous checkpoint is still the one a restart loads. **Rotation** keeps the newest ``keep``.

**No arbitrary unpickling**: non-tensor state is JSON; tensors are read with
``torch.load(weights_only=True)`` (DCP's reader does so for tensors); DCP's own ``.metadata``
file is a pickle, so :class:`SafeReader` reads it with an unpickler that only builds DCP's
metadata classes. Values stored as raw bytes by DCP (any non-tensor it is handed) would be
unpickled unrestricted by DCP, so :func:`save` refuses them.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import re
import shutil
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

_NAME = re.compile(r"step_(\d{6,})")
# What DCP's .metadata pickle is made of (listed from a real one): its metadata classes, tensor
# sizes/dtypes/layouts, the path of each shard. Anything else is refused.
_SAFE_MODULES = ("torch.distributed.checkpoint.",)
_SAFE_NAMES = {("torch", "Size"), ("torch", "device"), ("torch.serialization", "_get_layout"),
               ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("pathlib", "WindowsPath"),
               ("collections", "OrderedDict")} | {("torch", n) for n in
              ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module.startswith(_SAFE_MODULES) or (module, name) in _SAFE_NAMES or (module == "builtins" and name in
                                                                                   ("set", "frozenset", "slice")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"checkpoint metadata refers to {module}.{name}: refusing to load it")


class SafeReader(dcp.FileSystemReader):
    """DCP's file reader, but its ``.metadata`` pickle may only contain DCP's own metadata classes."""

    def read_metadata(self, *args: Any, **kwargs: Any):
        from torch.distributed.checkpoint.metadata import StorageMeta

        with open(os.path.join(self.path, ".metadata"), "rb") as f:
            metadata = _MetadataUnpickler(io.BytesIO(f.read())).load()
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def _rank_world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def path_for(directory: str, step: int) -> str:
    return os.path.join(directory, f"step_{int(step):06d}")


def list_checkpoints(directory: str) -> list[tuple[int, str]]:
    """Complete checkpoints ``(step, path)``, oldest first (``.tmp`` leftovers are not checkpoints)."""
    if not os.path.isdir(directory):
        return []
    found = [(int(m.group(1)), os.path.join(directory, n)) for n in os.listdir(directory)
             if (m := _NAME.fullmatch(n)) and os.path.isfile(os.path.join(directory, n, "meta.json"))]
    return sorted(found)


def latest(directory: str) -> str | None:
    found = list_checkpoints(directory)
    return found[-1][1] if found else None


def _rng_state() -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _only_tensors(tree: Any, where: str) -> None:
    if isinstance(tree, dict):
        for k, v in tree.items():
            _only_tensors(v, f"{where}.{k}")
    elif not isinstance(tree, torch.Tensor):
        raise TypeError(f"{where} is a {type(tree).__name__}: DCP would pickle it; put it in `extra` (JSON)")


def save(directory: str, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
         scheduler: Any = None, scaler: Any = None, extra: dict[str, Any] | None = None, keep: int = 2,
         before_commit: Callable[[], None] | None = None) -> str:
    """Save everything needed to continue after optimiser step ``step``; every rank calls it.

    ``before_commit`` runs on every rank after all files are written and before the rename
    (fault injection for the interrupted-save test). Returns the checkpoint's path.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    rank, world = _rank_world()
    final = path_for(directory, step)
    tmp = final + ".tmp"
    # [teach save]
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # a leftover of an earlier, interrupted save
        os.makedirs(tmp)
    _barrier()  # nobody writes before the directory exists
    msd, osd = get_state_dict(model, optimizer)
    tensors = {"model": msd, "optim": {"state": osd["state"]}}
    _only_tensors(tensors, "state")
    dcp.save(tensors, storage_writer=dcp.FileSystemWriter(tmp))  # collective: each rank writes its part
    torch.save(_rng_state(), os.path.join(tmp, f"rng_rank{rank}.pt"))
    if before_commit is not None:
        before_commit()
    _barrier()  # every rank's files are on disk before the checkpoint becomes visible
    if rank == 0:
        meta = {"step": int(step), "world_size": world, "param_groups": osd["param_groups"],
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "scaler": scaler.state_dict() if scaler is not None else None, "extra": extra or {}}
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump(meta, f)
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(final):  # the same step saved again (a rerun into the same directory)
            shutil.rmtree(final)
        os.replace(tmp, final)  # the commit: atomic on one file system
    # [/teach save]
        for _, old in list_checkpoints(directory)[:-keep]:  # rotation: only after the new one is complete
            shutil.rmtree(old, ignore_errors=True)
    _barrier()  # no rank races ahead (and maybe crashes) before the checkpoint is committed
    return final


def read_meta(path: str) -> dict[str, Any]:
    with open(os.path.join(path, "meta.json")) as f:
        return json.load(f)


def load(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, scheduler: Any = None,
         scaler: Any = None, restore_rng: bool = True) -> dict[str, Any]:
    """Restore model, optimiser, schedule, scaler and this rank's RNG from ``path``; returns ``meta.json``.

    Call it on a freshly built model/optimiser (the same ones :func:`save` was given).
    """
    rank, world = _rank_world()
    meta = read_meta(path)
    if meta["world_size"] != world:
        raise ValueError(f"checkpoint {os.path.basename(path)} was written by {meta['world_size']} ranks, this job "
                         f"has {world}: the per-rank RNG states do not map onto it")
    try:  # read the metadata once ourselves: DCP would bury a refusal in a multi-rank traceback
        SafeReader(path).read_metadata()
    except (pickle.UnpicklingError, OSError, EOFError) as e:
        raise ValueError(f"checkpoint {os.path.basename(path)} cannot be loaded safely: {e}") from None
    # get_state_dict on a fresh optimiser builds its state tensors (zeros): DCP loads *into* them.
    msd, osd = get_state_dict(model, optimizer)
    tensors = {"model": msd, "optim": {"state": osd["state"]}}
    dcp.load(tensors, storage_reader=SafeReader(path))
    groups = [{**g, "betas": tuple(g["betas"])} if "betas" in g else g for g in meta["param_groups"]]
    set_state_dict(model, optimizer, model_state_dict=tensors["model"],
                   optim_state_dict={"state": tensors["optim"]["state"], "param_groups": groups})
    if scheduler is not None and meta["scheduler"] is not None:
        scheduler.load_state_dict(meta["scheduler"])
    if scaler is not None and meta["scaler"]:
        scaler.load_state_dict(meta["scaler"])
    if restore_rng:
        rng = torch.load(os.path.join(path, f"rng_rank{rank}.pt"), weights_only=True)
        torch.set_rng_state(rng["cpu"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state(rng["cuda"])
    return meta
