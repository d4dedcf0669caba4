"""Exercise 10.1's checker rejects realistic wrong resume logic, saying what was not restored.
(The solution passing and the stub failing are in tests/test_exercises.py.)"""
import os

import pytest

from disttutor.checks.resume import check_resume

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOLUTION = open(os.path.join(ROOT, "solutions", "ex10_1_resume.py")).read()


def wrong(old, new):
    assert old in SOLUTION, old
    return SOLUTION.replace(old, new)


CASES = [
    # resumes the weights only (model.load_state_dict-style): AdamW restarts with empty moments
    pytest.param(wrong('optim_state_dict={"state": tensors["optim"]["state"], "param_groups": groups})',
                       'optim_state_dict={"state": {}, "param_groups": groups})'), "optimiser's state", id="optimizer"),
    # forgets the RNG: dropout draws different masks from the first resumed step on
    pytest.param(wrong('    torch.set_rng_state(rng["cpu"])\n', ""), "random-number state", id="rng"),
    # off by one: "the checkpoint is at step 4, so continue with step 5"
    pytest.param(wrong('return meta["step"]\n', 'return meta["step"] + 1\n'), "no checkpoint of step", id="step",
                 marks=pytest.mark.slow),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("src,words", CASES)
def test_rejects_wrong_resume(src, words, no_leftovers):
    res = check_resume(src, fail_at_step=5)
    assert not res.passed
    assert words in str(res), str(res)
    assert len(str(res).splitlines()) <= 3, str(res)  # one readable line, not one per rank


def test_calling_the_answer_key_is_refused():
    src = 'def resume(ckpt_dir, model, optimizer, scheduler):\n    from disttutor.lm import checkpoint\n' \
          '    p = checkpoint.latest(ckpt_dir)\n    return checkpoint.load(p, model, optimizer, scheduler=scheduler)["step"] if p else 0\n'
    res = check_resume(src, fail_at_step=3)
    assert not res.passed and "answer key" in str(res), str(res)
