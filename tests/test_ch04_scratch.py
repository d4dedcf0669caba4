"""Chapter 4: DDP from scratch -- the shared loop, bucket planning, wrappers vs the reference, the checkers."""
from __future__ import annotations

import pytest

import disttutor
from disttutor.checks.ddp import check_bucketed_ddp, check_naive_ddp
from disttutor.train import TrainConfig

SOL1, SOL2 = "solutions/ex4_1_naive_ddp.py", "solutions/ex4_2_bucketed_ddp.py"
# fp32 with a different summation order (per-rank partial sums + all-reduce vs one
# full-batch sum) differs by a few ulps per step; 1e-5 relative is ~100x that.
RTOL = 1e-5

STUB1 = '''
def sync_gradients(model):
    raise NotImplementedError("Exercise 4.1: all-reduce each p.grad, then divide by the world size")
'''
STUB2 = '''
class OverlappedDDP:
    def __init__(self, model, bucket_cap):
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self.grad_ready)

    def grad_ready(self, p):
        raise NotImplementedError("Exercise 4.2: launch each full bucket with dist.all_reduce(..., async_op=True)")

    def finish(self):
        raise NotImplementedError("Exercise 4.2: wait on every handle, divide, copy back")
'''


def test_train_config_validation():
    with pytest.raises(ValueError, match="batch"):
        TrainConfig(batch=300, samples=256)
    with pytest.raises(ValueError, match="evenly"):
        TrainConfig(batch=32).check_world(3)


def test_plan_buckets_reverse_order_and_cap():
    from disttutor.models import MLP
    from disttutor.scratch.buckets import plan_buckets

    m = MLP(16, [32, 32], 4)
    names = {id(p): n for n, p in m.named_parameters()}
    plan = [[names[id(p)] for p in b] for b in plan_buckets(list(m.parameters()), 600)]
    # last layer first; 2.weight (1024 elements) exceeds the cap and gets its own bucket
    assert plan == [["4.bias", "4.weight", "2.bias"], ["2.weight"], ["0.bias", "0.weight"]]
    assert len(plan_buckets(list(m.parameters()), 10**9)) == 1
    with pytest.raises(ValueError):
        plan_buckets(list(m.parameters()), 0)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("wrapper,nproc,batch", [("torch", 2, 32), ("naive", 3, 30), ("bucketed", 4, 32)])
def test_wrappers_match_single_process_reference(wrapper, nproc, batch, no_leftovers):
    res = disttutor.launch("ddp_scratch", nproc, {"wrappers": [wrapper], "reference": True, "trace": True,
                                                  "steps": 3, "batch": batch},
                           stream=False, timeout=150, collective_timeout=30)
    runs = [r["runs"][wrapper] for r in res.results]
    for r in runs:
        assert len(r["max_rel_err"]) == 3 and max(r["max_rel_err"]) < RTOL, (r["max_rel_err"], r["worst_param"])
    if wrapper in ("torch", "bucketed"):  # overlap: a bucket is launched before the first layer's grads exist
        trace = runs[0]["trace"]
        first_launch = next(i for i, e in enumerate(trace) if e[0] == "launch")
        assert ["grad", "0.weight"] in trace[first_launch:]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_solutions_pass_and_stubs_fail(no_leftovers):
    assert check_naive_ddp(SOL1).passed
    assert check_bucketed_ddp(SOL2, nproc=4).passed  # several ranks: 4 shards of 8 samples
    r1 = check_naive_ddp(STUB1)
    assert not r1.passed and "still a stub -- Exercise 4.1" in str(r1)
    r2 = check_bucketed_ddp(STUB2)
    assert not r2.passed and "still a stub -- Exercise 4.2" in str(r2)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_checkers_name_the_mistake(no_leftovers):
    no_mean = open(SOL1).read().replace("p.grad.div_(world)", "pass")
    r = check_naive_ddp(no_mean)
    assert not r.passed and "differs from the single-process reference" in str(r) and "step 0" in str(r)
    # Correct numbers but all-reduced after backward (inside finish): not overlapped.
    late = open(SOL2).read().replace("dist.all_reduce(flat, async_op=True)", "None").replace(
        "work.wait()", "dist.all_reduce(flat)")
    r = check_bucketed_ddp(late)
    assert not r.passed and "during backward" in str(r)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_mismatched_collectives_fail_instead_of_hanging(no_leftovers):
    # Rank 1 never all-reduces bucket 0: the ranks' collectives no longer pair up. The checker's
    # collective timeout (and gloo's size check) must turn that into a failed check, not a frozen cell.
    skew = open(SOL2).read().replace(
        "dist.all_reduce(flat, async_op=True)))",
        "dist.all_reduce(flat, async_op=True) if dist.get_rank() == 0 or self.next else None))").replace(
        "work.wait()", "work and work.wait()")
    assert skew != open(SOL2).read()
    r = check_bucketed_ddp(skew)
    assert not r.passed and r.problems
