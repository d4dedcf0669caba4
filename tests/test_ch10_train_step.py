"""Exercise 10.2's checker rejects realistic wrong training steps, saying which slip it was.
(The solution passing and the stub failing are in tests/test_exercises.py.) Each case runs the
course's loop on 2 gloo ranks twice (the course's step, then the wrong one): ~15 s under load."""
import os

import pytest

from disttutor.checks.lm_step import check_train_step

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOLUTION = open(os.path.join(ROOT, "solutions", "ex10_2_train_step.py")).read()
SYNC = "with contextlib.nullcontext() if last else ddp_model.no_sync():"
ZERO = "    optimizer.zero_grad(set_to_none=True)  # this step's gradients only\n"
UNSCALE = "    scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones\n"
CLIP = "    torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), clip)\n"
STEP = "    scaler.step(optimizer)\n    scaler.update()\n"
SCHED = "    scheduler.step()  # after the optimizer: this step used this step's learning rate\n"


def wrong(old, new):
    assert old in SOLUTION, old
    return SOLUTION.replace(old, new)


CASES = [
    # every micro-batch's backward all-reduces: right weights (to rounding), 4x the traffic
    pytest.param(wrong(SYNC, "with contextlib.nullcontext():"),
                 "all-reduced 4 times for one step of 4 micro-batches (the course's loop: 1)", id="no-no_sync"),
    # the last backward inside no_sync() too: nothing is ever all-reduced, the ranks drift apart
    pytest.param(wrong(SYNC, "with ddp_model.no_sync():"), "no gradient all-reduce ran", id="no_sync-everywhere"),
    # the loss not divided by the number of micro-batches (AdamW would hide it; the gradients do not)
    pytest.param(wrong("loss_fn(ddp_model, batch) / n", "loss_fn(ddp_model, batch)"), "4x too large", id="no-divide"),
    # clipping the scaled gradients: they end up clip / 1024 long
    pytest.param(wrong(UNSCALE + CLIP, CLIP + UNSCALE), "clipped while still multiplied by the loss scale",
                 id="clip-before-unscale"),
    # the schedule moved first: step 0 already runs at step 1's learning rate
    pytest.param(wrong(STEP + SCHED, SCHED + STEP), "scheduler.step() ran before the optimizer's step",
                 id="scheduler-first"),
    # no zero_grad: step 1's gradients still hold step 0's (divided by the loss scale by unscale_)
    pytest.param(wrong(ZERO, ""), "this step's plus 0.000977 x step 0's", id="no-zero_grad"),
    # zero_grad after the backward passes: the scaler finds no gradients at all
    pytest.param(wrong(ZERO, "").replace(UNSCALE, "    optimizer.zero_grad()\n" + UNSCALE),
                 "zero_grad() belongs before the first micro-batch", id="zero_grad-late", marks=pytest.mark.slow),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("src,words", CASES)
def test_rejects_wrong_train_step(src, words, no_leftovers):
    res = check_train_step(src)
    assert not res.passed
    assert words in str(res), str(res)
    assert len(str(res).splitlines()) <= 2, str(res)  # one line: both ranks say the same, merged


def test_calling_the_answer_key_is_refused():
    src = ("def train_step(ddp_model, optimizer, scheduler, scaler, micro_batches, loss_fn, clip):\n"
           "    from disttutor.lm.step import train_step as course\n"
           "    return course(ddp_model, optimizer, scheduler, scaler, micro_batches, loss_fn, clip)\n")
    res = check_train_step(src)  # found in the source: no ranks started
    assert not res.passed and "answer key" in str(res), str(res)
