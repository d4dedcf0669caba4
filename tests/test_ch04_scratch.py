"""Chapter 4: DDP from scratch -- the shared loop, bucket planning, wrappers vs the reference, the checkers."""
from __future__ import annotations

import pytest

import disttutor
from disttutor.checks.ddp import check_bucketed_ddp, check_naive_ddp
from disttutor.data_parallel.train import TrainConfig

SOL1, SOL2 = "solutions/ex4_1_naive_ddp.py", "solutions/ex4_2_bucketed_ddp.py"
from disttutor.checks.tolerances import DATA_PARALLEL_RTOL as RTOL  # why 1e-5: see there

# The untouched stubs and the solutions of 4.1 / 4.2 are tested from the registry, on the chapter's
# own stub cells: tests/test_exercises.py.


def test_train_config_validation():
    with pytest.raises(ValueError, match="batch"):
        TrainConfig(batch=300, samples=256)
    with pytest.raises(ValueError, match="evenly"):
        TrainConfig(batch=32).check_world(3)


def test_plan_buckets_reverse_order_and_cap():
    from disttutor.workloads.models import MLP
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
@pytest.mark.timeout(480)  # five checker launches, ~20-60 s each on a loaded 2-core machine
def test_checkers_name_the_mistake(no_leftovers):
    no_mean = open(SOL1).read().replace("p.grad.div_(world)", "pass")
    r = check_naive_ddp(no_mean)
    assert not r.passed and "differs from the single-process reference" in str(r) and "step 0" in str(r)
    # Crashes on a parameter without a gradient (frozen, or unused in this step): named.
    no_skip = open(SOL1).read().replace("if p.grad is None:", "if False:")
    r = check_naive_ddp(no_skip)
    assert not r.passed and "frozen (requires_grad=False): scale, block.lin.bias" in str(r), r
    assert "unused in this step (grad is None): aux.weight, aux.bias" in str(r) and "skip them" in str(r)
    # Correct numbers but all-reduced after backward (inside finish): not overlapped.
    late = open(SOL2).read().replace("dist.all_reduce(flat, async_op=True)", "None").replace(
        "work.wait()", "dist.all_reduce(flat)")
    r = check_bucketed_ddp(late)
    assert not r.passed and "during backward" in str(r)
    # Hooks on every parameter, frozen ones included: torch refuses; the checker says which are frozen.
    hook_all = open(SOL2).read().replace("[p for p in model.parameters() if p.requires_grad]", "list(model.parameters())")
    r = check_bucketed_ddp(hook_all)
    assert not r.passed and "cannot register a hook" in str(r) and "scale, block.lin.bias" in str(r), r
    # Waits for every bucket to fill in backward: the one holding the unused parameter never does.
    strict = open(SOL2).read().replace("while self.next < len(self.buckets):\n", "while False:\n").replace(
        "    def finish(self) -> None:\n",
        "    def finish(self) -> None:\n        if self.next != len(self.buckets):\n"
        "            raise RuntimeError(f'only {self.next} of {len(self.buckets)} buckets were launched')\n")
    assert strict != open(SOL2).read()
    r = check_bucketed_ddp(strict)
    assert not r.passed and "only 3 of 5 buckets were launched" in str(r) and "launch it in finish()" in str(r), r


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
