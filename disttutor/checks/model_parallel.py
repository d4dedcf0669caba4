"""Checker for Exercise 6.1 (chapter 6): one pipeline stage's forward and backward over send/recv.

The learner writes ``stage_forward_backward(stage, x, y, act_shape, out_shape)``: on rank r
of W it receives its input from rank r-1 (rank 0 uses ``x``), runs ``stage``, sends the
output to rank r+1, and in the backward direction receives the output's gradient from r+1
(the last rank computes ``mse_loss(out, y)`` itself), backpropagates and sends its input's
gradient to r-1. It returns the loss on the last rank, ``None`` elsewhere.

Rank side (``python -m disttutor.checks.model_parallel --source F --name ...``): 3 ranks
(first, middle and last stage) train chapter 6's model split in 3 for a few SGD steps with
the learner's function, and after every step each rank compares its layers with the same
layers of the unsplit model trained in one process (:func:`programs.model_parallel.reference`'s
recipe). A wrong or missing message makes a rank wait: the short collective timeout turns
that into a failed check naming the rank.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from disttutor.contract.options import cli, opt
from disttutor.checks.adapter import JOB_TIMEOUT_S, CheckResult, LearnerCode, function_name, run_check
from disttutor.checks.tolerances import SPLIT_MODEL_RTOL

NPROC = 3  # first, middle and last stage: the middle one both receives and sends in each direction


@dataclass(frozen=True)
class StageCheckConfig(LearnerCode):
    steps: int = opt(2, "SGD steps compared with the single-process model")

    def __post_init__(self):
        super().__post_init__()
        if self.steps < 1:
            raise ValueError("--steps must be >= 1")


def _where(rank: int, world: int) -> str:
    return "the first stage" if rank == 0 else "the last stage" if rank == world - 1 else "a middle stage"


def _train_and_compare(fn: Callable, cfg: StageCheckConfig, rank: int, world: int, device) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from disttutor.workloads.data import regression
    from disttutor.programs.model_parallel import MPConfig, full_model, stage_of

    mp = MPConfig(steps=cfg.steps, warmup=0, batch=16, width=8, d_out=2, layers_per_stage=1)
    stage = stage_of(full_model(mp, world), rank, world, mp.layers_per_stage).to(device)
    opt = torch.optim.SGD(stage.parameters(), lr=mp.lr)
    ref = full_model(mp, world).to(device)  # the whole model, trained here in one process
    ref_opt = torch.optim.SGD(ref.parameters(), lr=mp.lr)
    ref_stage = stage_of(ref, rank, world, mp.layers_per_stage)  # shares ref's parameters: our slice of it
    x, y = (t.to(device) for t in regression(n=mp.batch, d_in=mp.width, d_out=mp.d_out, seed=mp.seed).tensors)
    act_shape = (mp.batch, mp.width)
    out_shape = act_shape if rank < world - 1 else (mp.batch, mp.d_out)
    where = _where(rank, world)
    for step in range(cfg.steps):
        opt.zero_grad(set_to_none=True)
        loss = fn(stage, x, y, act_shape, out_shape)
        ref_opt.zero_grad(set_to_none=True)
        ref_loss = F.mse_loss(ref(x), y)
        ref_loss.backward()
        ref_opt.step()
        missing = [n for n, p in stage.named_parameters() if p.grad is None]
        if missing:
            return {"passed": False, "problem": (
                f"{where}, step {step}: parameter {missing[0]!r} has no gradient after your function returned "
                "-- did this stage call backward (out.backward(grad from the next rank), or loss.backward() "
                "on the last one)?")}
        opt.step()
        if rank == world - 1:
            if not isinstance(loss, (float, int)) and not (isinstance(loss, torch.Tensor) and loss.numel() == 1):
                return {"passed": False, "problem": f"{where}: return the loss (a float) on the last rank, got {loss!r}"}
            if abs(float(loss) - ref_loss.item()) > SPLIT_MODEL_RTOL * max(1.0, abs(ref_loss.item())):
                return {"passed": False, "problem": (
                    f"{where}, step {step}: loss {float(loss):.6g}, the single-process model has "
                    f"{ref_loss.item():.6g} -- did the forward activations arrive from the previous rank?")}
        for (name, p), q in zip(stage.named_parameters(), ref_stage.parameters()):
            err = (p.detach() - q.detach()).abs().max().item() / max(q.abs().max().item(), 1e-12)
            if not err <= SPLIT_MODEL_RTOL:  # also catches NaN
                return {"passed": False, "problem": (
                    f"{where}, after step {step}: parameter {name!r} differs from the single-process model by "
                    f"{err:.3g} (relative; allowed {SPLIT_MODEL_RTOL:g}) -- was the gradient received from the "
                    "next rank the one of this stage's output, and was this stage's input gradient sent back?")}
    return {"passed": True, "steps": cfg.steps}


def run(cfg: StageCheckConfig) -> None:
    from disttutor.rank import runtime
    from disttutor.checks.adapter import load_exercise

    with runtime.setup() as ctx:
        runtime.report(**_train_and_compare(load_exercise(cfg.source, cfg.name), cfg, ctx.rank, ctx.world_size,
                                            ctx.device))


def check_stage(fn: Callable | str, steps: int = 2, timeout: float = JOB_TIMEOUT_S) -> CheckResult:
    """Exercise 6.1: does ``fn`` train the 3-stage model exactly like one process?"""
    return run_check("6.1", "disttutor.checks.model_parallel", fn, function_name(fn, "stage_forward_backward"),
                     NPROC, args={"steps": steps}, timeout=timeout, collective_timeout=10.0, hint=(
                         "a rank is waiting for a message that is never sent: every recv needs a send on the "
                         "neighbour, in the same order (forward activations, then gradients back)"))


main = cli(StageCheckConfig, run)

if __name__ == "__main__":
    main()
