"""Pipeline parallelism in one file: a model cut into PipelineStages, trained with Schedule1F1B.

    torchrun --nproc-per-node 2 pipeline.py                 # CPU (gloo) or one GPU per rank (NCCL)
    torchrun --nproc-per-node 4 pipeline.py                 # 4 stages: one per rank

Only torch. Every rank also trains the whole model in one process on the whole batch and compares
its stage's weights with it; rank 0 prints "pipeline: OK ..." when all stages match.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

STEPS, MICROBATCHES, BATCH, WIDTH = 4, 4, 32, 64   # m micro-batches of BATCH / m rows each


def build_model() -> nn.Sequential:
    torch.manual_seed(0)                   # the same weights on every rank (and in the reference)
    return nn.Sequential(nn.Linear(16, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                         nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 4))


def split(model: nn.Sequential, n: int) -> list[nn.Sequential]:
    """n consecutive pieces of the Sequential (as equal as the layer count allows)."""
    layers = list(model)
    cuts = [round(i * len(layers) / n) for i in range(n + 1)]
    return [nn.Sequential(*layers[cuts[i]:cuts[i + 1]]) for i in range(n)]


def loss_fn(output, target):
    return nn.functional.mse_loss(output, target)   # a mean per micro-batch; the schedule divides by m


def main():
    # [teach setup]
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():          # one GPU per process: NCCL
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:                                  # CPU ranks: gloo
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        raise SystemExit("pipeline.py needs at least 2 ranks (one stage each): torchrun --nproc-per-node 2 ...")
    # [/teach setup]

    # [teach pipeline]
    # Every rank builds the whole model and keeps only its piece: stage `rank` of `world`.
    piece = split(build_model(), world)[rank].to(device)
    stage = PipelineStage(piece, stage_index=rank, num_stages=world, device=device)
    schedule = Schedule1F1B(stage, n_microbatches=MICROBATCHES, loss_fn=loss_fn)
    opt = torch.optim.SGD(piece.parameters(), lr=0.05)

    g = torch.Generator().manual_seed(1)   # one mini-batch, known to every rank
    x, y = torch.randn(BATCH, 16, generator=g), torch.randn(BATCH, 4, generator=g)
    for step in range(STEPS):
        opt.zero_grad()
        if rank == 0:                      # the first stage feeds the data (split into micro-batches) ...
            schedule.step(x.to(device))
        elif rank == world - 1:            # ... the last one gets the targets and the losses
            losses = []
            schedule.step(target=y.to(device), losses=losses)
            print(f"step {step + 1}: loss {torch.stack(losses).mean().item():.4f}", flush=True)
        else:                              # the middle ones only talk to their neighbours
            schedule.step()
        opt.step()                         # ONE optimizer step per mini-batch, after all micro-batches
    # [/teach pipeline]

    # Check: the same steps in one process on the whole batch give the same weights.
    reference = build_model()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    for _ in range(STEPS):
        ref_opt.zero_grad()
        loss_fn(reference(x), y).backward()
        ref_opt.step()
    mine = split(reference, world)[rank]
    # float32: m micro-batch gradients summed round differently from one full-batch gradient (~1e-8);
    # a real bug (a lost micro-batch, a missing 1/m) moves weights by ~1e-2.
    diff = max((a.detach().cpu() - b).abs().max().item() for a, b in zip(piece.parameters(), mine.parameters()))
    worst = torch.tensor(diff, device=device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    if rank == 0:
        verdict = "OK" if worst.item() < 1e-5 else f"FAILED (max weight difference {worst.item():g})"
        print(f"pipeline: {verdict}: {world} stages, {STEPS} steps of {MICROBATCHES} micro-batches (1F1B), "
              f"{backend} on {device.type}")
    dist.barrier()                         # nobody tears down while a neighbour still sends
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # gloo's threads may still run while Python's exit-time destructors free their objects (torch
    # 2.13 on CPU): a rank whose work is done can then abort with SIGABRT, and torchrun reports the
    # job as failed (seen once, after "OK"). Skip interpreter finalisation: flush and leave.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
