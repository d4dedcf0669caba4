"""Exercise 4.3 (chapter 4): a single-process training script turned into DDP.

The diagnosis is tested without ranks first: the facts a right run gives (the reference's weights and
metric, DistributedSampler's shares, one save by rank 0) pass, and each realistic slip, written into
those facts, comes back with the message that names it. Then on real gloo ranks, the slips only ranks
can show: no set_epoch, no DistributedSampler, hand-made uneven shards (different step counts: ended
by the collective timeout, named), an un-reduced metric, the wrapper's state_dict, no barrier, no DDP."""
from __future__ import annotations

import os

import pytest
import torch

from disttutor.checks.ddp_script import (BATCH, EPOCHS, METRIC_RTOL, N_EVAL, N_TRAIN, RTOL, check_ddp_script,
                                         diagnose, expected_orders, make_model, reference)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOLUTION = open(os.path.join(ROOT, "solutions", "ex4_3_ddp_script.py")).read()


def right_facts(world: int) -> list[dict]:
    """What every rank of a right run reports: computed from the checker's own reference."""
    ref, losses = reference(world)
    params = torch.cat([p.detach().reshape(-1) for p in ref.parameters()])
    shares = [list(range(r, N_EVAL, world)) for r in range(world)]
    out = [float(l.double().mean()) for l in losses]
    keys = list(make_model(0).state_dict())
    return [{"train": expected_orders(world, r), "eval": [shares[r]] * EPOCHS, "saves": ["OrderedDict"] * (r == 0),
             "existed": True, "params": params.clone(), "out": list(out), "out_type": "list", "keys": keys,
             "load": ""} for r in range(world)]


def test_right_facts_pass_and_the_tolerances_separate_the_slips():
    for world in (2, 3):
        facts = right_facts(world)
        assert diagnose(facts, world) is None
    # the mean of means on 3 ranks (shards of 7, 7, 6) is far outside METRIC_RTOL in every epoch
    _, losses = reference(3)
    for l in losses:
        whole = float(l.double().mean())
        mom = sum(float(l[list(range(r, N_EVAL, 3))].double().mean()) for r in range(3)) / 3
        assert abs(mom - whole) > 10 * METRIC_RTOL * abs(whole), (mom, whole)


def test_each_slip_in_the_facts_is_named():
    world = 2
    f = right_facts(world)
    f[0]["train"] = [expected_orders(world, 0)[0]] * EPOCHS  # set_epoch forgotten: epoch 0's order again
    assert "the same samples in the same order as epoch 0" in diagnose(f, world)
    assert "sampler.set_epoch(epoch)" in diagnose(f, world)

    f = right_facts(world)  # drop_last forgotten: 51 = 5 batches of 10 and one of 1
    share = [torch.randperm(N_TRAIN, generator=torch.Generator().manual_seed(e)).tolist()[0::2] for e in range(EPOCHS)]
    f[0]["train"] = share
    assert "trained on 51 samples in epoch 0: 5 full batches of 10 and a last one of 1" in diagnose(f, world)

    f = right_facts(world)  # the whole dataset on every rank
    f[1]["train"] = [list(range(N_TRAIN - 1))] * EPOCHS
    assert f"rank 1 read {N_TRAIN - 1} of the {N_TRAIN} training samples in epoch 0" in diagnose(f, world)

    world = 3
    f = right_facts(world)  # eval with DistributedSampler(shuffle=False): 20 padded to 21
    f[2]["eval"] = [[2, 5, 8, 11, 14, 17, 0]] * EPOCHS
    assert "eval sample(s) [0] were evaluated 2 times" in diagnose(f, world)

    f = right_facts(world)  # the mean of the ranks' means
    _, losses = reference(world)
    for r in range(world):
        f[r]["out"] = [sum(float(l[list(range(q, N_EVAL, 3))].double().mean()) for q in range(3)) / 3 for l in losses]
    assert "the mean of the ranks' means (shards of 7, 7, 6)" in diagnose(f, world)

    f = right_facts(world)  # every rank saved; then the wrapper's keys; then a missing barrier
    f[1]["saves"] = ["OrderedDict"]
    assert "was called by rank(s) 0, 1: exactly once, on rank 0 only" in diagnose(f, world)
    f = right_facts(world)
    f[0]["keys"] = ["module." + k for k in f[0]["keys"]]
    assert "that is the DDP wrapper's state_dict" in diagnose(f, world)
    f = right_facts(world)
    f[2]["existed"] = False
    assert "did not exist yet when train_ddp returned on rank(s) 2: rank 0 was still saving" in diagnose(f, world)

    f = right_facts(world)  # weights off the reference (momentum, a wrong lr ...)
    for r in range(world):
        f[r]["params"] = f[r]["params"] * (1 + 100 * RTOL)
    assert "differ from one process trained on the same global batches" in diagnose(f, world)
    f = right_facts(world)
    f[0]["out"] = None
    f[0]["out_type"] = "dict"
    assert f"rank 0 returned dict: return a list of {EPOCHS} numbers" in diagnose(f, world)


def wrong(old: str, new: str) -> str:
    assert old in SOLUTION, old
    return SOLUTION.replace(old, new)


# Each slip on real ranks: (source, world sizes, the words its message must hold).
SLIPS = {
    "no set_epoch": (wrong("        sampler.set_epoch(epoch)", "        pass"), (2,),
                     ["with 2 ranks, rank 0, epoch 1: the same samples in the same order as epoch 0"]),
    "no DistributedSampler": (
        wrong("sampler=sampler, drop_last=True", "shuffle=True, drop_last=True"), (2,),
        [f"read {N_TRAIN // BATCH * BATCH} of the {N_TRAIN} training samples in epoch 0: every rank trains on the whole"]),
    "hand-made shards without drop_last": (
        wrong("DataLoader(train_set, batch_size=batch_size, sampler=sampler, drop_last=True)",
              "DataLoader(Subset(train_set, range(rank, len(train_set), world)), batch_size=batch_size, shuffle=True)"),
        (2,), ["with 2 ranks, epoch 0: the ranks took different numbers of steps (rank 0: 6, rank 1: 5)"]),
    "metric not all-reduced": (wrong("        dist.all_reduce(total)", "        pass"), (2,),
                               ["epoch 0: the ranks returned different metrics (", "each the mean over its own eval samples only"]),
    "the wrapper's state_dict": (wrong("ddp.module.state_dict()", "ddp.state_dict()"), (2,),
                                 ["the checkpoint's keys start with 'module.'"]),
    "no barrier": (wrong("    dist.barrier()", "    pass"), (2,),
                   ["with 2 ranks, the checkpoint did not exist yet when train_ddp returned on rank(s) 1"]),
    "no DDP": (wrong("ddp = DDP(model)", "ddp = model").replace("ddp.module.state_dict()", "ddp.state_dict()"), (2,),
               ["the ranks' trained weights differ: nothing averaged their gradients"]),
}


@pytest.mark.slow
@pytest.mark.timeout(600)  # 7 jobs of ~5 s idle; the hang ends at the 10 s collective timeout; slow on 2 cores
def test_realistic_slips_on_real_ranks(no_leftovers):
    for name, (src, worlds, words) in SLIPS.items():
        res = check_ddp_script(src, nprocs=worlds, timeout=240)
        text = str(res)
        assert not res.passed, name
        for w in words:
            assert w in text, (name, text)
        assert "Traceback" not in text and len(res.problems) == 1, (name, text)
