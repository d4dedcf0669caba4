"""The course's ZeRO-1 and FSDP behind Stanford CS336 assignment 2's adapter functions.

Copied over ``tests/adapters.py`` of a temporary copy of the assignment by :mod:`benchmarks.cs336.run`
(the assignment's own code is never committed here). ``CS336_IMPL=scratch`` (default) adapts
:mod:`disttutor.scratch`; ``CS336_IMPL=solutions`` the exercise solutions in ``solutions/``;
``CS336_IMPL=torch_fsdp2`` torch's own ``fully_shard`` (per child module, then the root) for the FSDP
tests, as the yardstick the course's FSDP is compared with.
"""
from __future__ import annotations

import importlib.util
import os

import torch

_IMPL = os.environ.get("CS336_IMPL", "scratch")


def _solution(name: str, cls: str):
    path = os.path.join(os.environ["DISTTUTOR_ROOT"], "solutions", name)
    spec = importlib.util.spec_from_file_location(name[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, cls)


class TorchFSDP2(torch.nn.Module):
    """torch's FSDP2 in the shape the tests expect: ``.module`` is the sharded model."""

    def __init__(self, module: torch.nn.Module, compute_dtype: torch.dtype | None = None):
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        super().__init__()
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32) if compute_dtype \
            else MixedPrecisionPolicy()
        for child in module.children():
            if any(True for _ in child.parameters()):
                fully_shard(child, mesh=mesh, mp_policy=policy)
        fully_shard(module, mesh=mesh, mp_policy=policy)
        self.module = module

    def forward(self, *args):
        return self.module(*args)

    def full_parameters(self) -> dict[str, torch.Tensor]:
        return {n: p.full_tensor().detach() for n, p in self.module.named_parameters()}


def _fsdp_class():
    if _IMPL == "torch_fsdp2":
        return TorchFSDP2
    if _IMPL == "solutions":
        return _solution("ex11_2_fsdp.py", "FSDP")
    from disttutor.scratch.fsdp import ScratchFSDP
    return ScratchFSDP


def get_sharded_optimizer(params, optimizer_cls, **kwargs) -> torch.optim.Optimizer:
    if _IMPL == "solutions":
        return _solution("ex11_1_zero1.py", "ZeroOne")(params, optimizer_cls, **kwargs)
    from disttutor.scratch.zero1 import ZeroOne
    return ZeroOne(params, optimizer_cls, **kwargs)


def get_fsdp(module: torch.nn.Module, compute_dtype: torch.dtype | None = None) -> torch.nn.Module:
    return _fsdp_class()(module, compute_dtype)


def fsdp_on_after_backward(fsdp_model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    # Nothing left to do: the course's FSDP reduce-scatters inside backward (synchronously).
    return None


def fsdp_gather_full_params(fsdp_model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return fsdp_model.full_parameters()


def _not_adapted(*args, **kwargs):
    raise NotImplementedError("not adapted: the course adapts only ZeRO-1 and FSDP (chapter 11)")


get_ddp = ddp_on_after_backward = _not_adapted
get_flashattention_autograd_function_pytorch = get_flashattention_autograd_function_triton = _not_adapted
