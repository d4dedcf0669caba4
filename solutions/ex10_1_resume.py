"""Exercise 10.1 -- a solution: restore everything the training loop depends on, then say where to go on."""


def resume(ckpt_dir, model, optimizer, scheduler):
    import os

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from disttutor.lm import checkpoint

    path = checkpoint.latest(ckpt_dir)  # the newest COMPLETE checkpoint: a half-written .tmp is never chosen
    if path is None:
        return 0  # nothing saved yet: a fresh start
    meta = checkpoint.read_meta(path)  # JSON: step, optimiser hyper-parameters, scheduler state
    # 1. weights and optimiser moments: get_state_dict gives tensors of the right shapes, DCP fills them
    msd, osd = get_state_dict(model, optimizer)
    tensors = {"model": msd, "optim": {"state": osd["state"]}}
    dcp.load(tensors, storage_reader=checkpoint.SafeReader(path))
    groups = [{**g, "betas": tuple(g["betas"])} for g in meta["param_groups"]]
    set_state_dict(model, optimizer, model_state_dict=tensors["model"],
                   optim_state_dict={"state": tensors["optim"]["state"], "param_groups": groups})
    # 2. the learning-rate schedule (where in the warm-up/decay we were)
    scheduler.load_state_dict(meta["scheduler"])
    # 3. LAST: this rank's random-number state (dropout) -- after everything that might draw numbers
    rank = dist.get_rank() if dist.is_initialized() else 0
    rng = torch.load(os.path.join(path, f"rng_rank{rank}.pt"), weights_only=True)
    torch.set_rng_state(rng["cpu"])
    # 4. the step: the loop continues with the first step NOT in the checkpoint
    return meta["step"]
