"""FSDP2 in one file: fully_shard per block, then the root; a few AdamW steps; a sharded checkpoint saved and reloaded.

Plain PyTorch (no disttutor import), chapter 11. Runs unchanged on CPU ranks (gloo) and on GPUs (NCCL):

    torchrun --nproc-per-node 2 fsdp2.py
"""
import os
import sys
import shutil
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, h):
        return h + self.down(torch.nn.functional.gelu(self.up(self.norm(h))))


class LM(nn.Module):
    def __init__(self, vocab=64, dim=64, n_blocks=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(n_blocks))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        h = self.emb(tokens)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def build(device, mesh, seed):
    torch.manual_seed(seed)  # the same initial weights on every rank
    model = LM().to(device)
    # On GPUs, MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) halves the
    # all-gathers and runs the matmuls in bf16; on CPU ranks fp32 (the default) is faster.
    policy = MixedPrecisionPolicy()
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)  # one unit per block: gathered, used, freed
    fully_shard(model, mesh=mesh, mp_policy=policy)  # the root: embedding and head
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def main():
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    device = torch.device("cuda" if backend == "nccl" else "cpu")
    mesh = init_device_mesh(device.type, (world,))
    model, opt = build(device, mesh, seed=0)

    g = torch.Generator().manual_seed(rank)  # each rank its own data
    for step in range(3):
        tokens = torch.randint(0, 64, (8, 16), generator=g).to(device)
        loss = nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()  # reduce-scatters each unit's gradient as soon as it is ready
        opt.step()
        opt.zero_grad()
        if rank == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    w = model.blocks[0].up.weight
    if rank == 0:
        print(f"blocks.0.up.weight: global {tuple(w.shape)}, this rank holds {tuple(w.to_local().shape)}, "
              f"placements {w.placements}")

    # A sharded checkpoint: every rank writes its own shards (one file each) plus DCP's .metadata.
    directory = [tempfile.mkdtemp(prefix="fsdp2_ckpt_") if rank == 0 else None]
    dist.broadcast_object_list(directory)  # one directory, chosen by rank 0 (shared disk assumed)
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=directory[0])

    fresh, fresh_opt = build(device, mesh, seed=1)  # other weights: the load must overwrite them
    model_sd, optim_sd = get_state_dict(fresh, fresh_opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=directory[0])
    set_state_dict(fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    same = all(torch.equal(a.to_local(), b.to_local()) for a, b in zip(model.parameters(), fresh.parameters()))
    same = torch.tensor([float(same)], device=device)
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    dist.barrier()
    if rank == 0:
        verdict = "OK" if same.item() == 1 else "FAILED (the reloaded shards differ)"
        print(f"fsdp2: {verdict}: {len(model.blocks)} blocks + the root sharded over {world} ranks, "
              f"3 steps, checkpoint saved and reloaded into a fresh model ({backend} on {device.type})")
        shutil.rmtree(directory[0], ignore_errors=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # gloo's threads may still run while Python's exit-time destructors free their objects (torch
    # 2.13 on CPU): a rank whose work is done can then abort with SIGABRT, and torchrun reports the
    # job as failed (seen once, after "OK"). Skip interpreter finalisation: flush and leave.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
