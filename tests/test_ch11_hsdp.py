"""Exercise 11.3 (HSDP with FSDP2 on a 2-D mesh): realistic wrong answers are rejected, each with a message
that says what is wrong; a hang ends within the collective timeout.

(The solution passing and the untouched stub failing are tests/test_exercises.py's job.) Each wrong
answer is a small edit of the solution, what a learner who got *one* thing wrong would hand in. One
check launches 4 gloo ranks (~10 s idle); timeouts are generous for a loaded 2-core machine.
"""
from __future__ import annotations

import os

import pytest

from disttutor.checks.hsdp import COLLECTIVE_TIMEOUT_S, HSDPCheck, check_hsdp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 300
SOLUTION = "solutions/ex11_3_hsdp.py"
MESH = 'init_device_mesh(device_type, (replicas, shards), mesh_dim_names=("replicate", "shard"))'
BLOCKS = "    for block in model.blocks:\n        fully_shard(block, mesh=mesh)"
ROOT_UNIT = "    fully_shard(model, mesh=mesh) "


def mutated(*edits: tuple[str, str]) -> str:
    src = open(os.path.join(ROOT, SOLUTION)).read()
    for old, new in edits:
        assert old in src, old  # the solution changed: update the wrong answer with it
        src = src.replace(old, new)
    return src


def test_check_config_rejects_bad_values():
    with pytest.raises(ValueError, match="--source FILE is required"):
        HSDPCheck()
    with pytest.raises(ValueError, match="steps must be >= 2"):
        HSDPCheck(source="x.py", name="hsdp_train", steps=1)


WRONG = {
    # plain FSDP: one 1-D mesh of every rank
    "fsdp_over_all_ranks": ((MESH, "init_device_mesh(device_type, (replicas * shards,))"),),
    # the sizes in the wrong order: invisible on 2 x 2, the 1 x 4 mesh shows it
    "sizes_swapped": ((MESH, MESH.replace("(replicas, shards)", "(shards, replicas)")),),
    # the names in the wrong order: fully_shard would shard over what is called "replicate"
    "names_swapped": ((MESH, MESH.replace('("replicate", "shard")', '("shard", "replicate")')),),
    # the mesh typed for the 4 ranks of the first run: (2, 2) whatever the arguments
    "hard_coded": ((MESH, MESH.replace("(replicas, shards)", "(2, 2)")),),
    # one unit: only the root is wrapped
    "only_root": ((BLOCKS, "    pass"),),
    # every block wrapped, the root forgotten
    "no_root": ((ROOT_UNIT, "    pass "),),
    # only the shard dim passed to fully_shard: sharded, never averaged over the replicas
    "shard_dim_only": (("fully_shard(block, mesh=mesh)", 'fully_shard(block, mesh=mesh["shard"])'),
                       ("fully_shard(model, mesh=mesh)", 'fully_shard(model, mesh=mesh["shard"])')),
    # the optimizer built before fully_shard replaced the parameters
    "optimizer_first": (("    mesh = init_device_mesh", "    opt = torch.optim.SGD(model.parameters(), lr=lr)\n"
                                                       "    mesh = init_device_mesh"),
                        ("    opt = torch.optim.SGD(model.parameters(), lr=lr)   #", "    #")),
}
EXPECTED = {
    "fsdp_over_all_ranks": "1-D mesh of all 4 ranks: that is FSDP over 4 ranks, not HSDP",
    "sizes_swapped": "replicas=1, shards=4, the mesh has shape (4, 1): the sizes are swapped",
    "names_swapped": "the mesh's dims are named ('shard', 'replicate')",
    "hard_coded": "replicas=1, shards=4, the mesh has shape (2, 2): build the shape from the arguments",
    "only_root": "only the root is wrapped: the whole model is one unit",
    "no_root": "the model itself is not an FSDP unit: emb.weight, pos.weight, norm.weight, norm.bias stay plain",
    "shard_dim_only": "1-D mesh of 2 ranks: the replicas never average their gradients",
    "optimizer_first": "the parameters never moved -- build the optimizer after fully_shard",
}


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("wrong", list(WRONG))
def test_wrong_answer_is_caught_with_its_message(wrong, no_leftovers):
    res = check_hsdp(mutated(*WRONG[wrong]))
    assert not res.passed
    assert EXPECTED[wrong] in str(res), str(res)
    assert str(res).count("\n") == 1, str(res)  # one line: every rank gave the same verdict, merged


@pytest.mark.timeout(TIMEOUT)
def test_a_rank_that_skips_training_ends_within_the_collective_timeout(no_leftovers):
    import time

    t0 = time.time()
    res = check_hsdp(mutated(("    for x, y in batches:", "    for x, y in batches[:1] if dist.get_rank() == 0 "
                                                          "else batches:")))
    assert not res.passed
    assert time.time() - t0 < TIMEOUT - 60  # ended by the collective timeout, not the job's limit
    assert COLLECTIVE_TIMEOUT_S < 60
