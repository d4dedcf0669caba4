"""Chapter 10 on real ranks: training lowers validation loss; a rank SIGKILLed mid-training (or in the
middle of a save) is brought back by torchrun's elastic restart and the resumed run ends bitwise equal
to the uninterrupted one; a rank lost for good ends the job with a clear message. Tiny configs."""
import os

import pytest
import torch

import disttutor
from disttutor.lm.loop import LMConfig
from disttutor.programs.lm_train import FINAL_PARAMS
from disttutor.launcher.results import LaunchError

TINY = LMConfig(steps=8, seq_len=32, micro_batch=4, accum=2, d_model=32, heads=2, layers=1, warmup=2,
                eval_every=4, eval_windows=8, sample_chars=20)
KW = dict(stream=False, timeout=240)


def params(res):
    return torch.load(os.path.join(res.run_dir, FINAL_PARAMS), weights_only=True)


def max_diff(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def reference():
    return disttutor.launch("lm_train", 2, TINY, **KW)


@pytest.mark.timeout(300)
def test_training_lowers_validation_loss(reference):
    r = reference.results[0]
    assert r["history"]["val"]["8"] < r["history"]["val"]["0"] - 0.1  # 8 steps at lr 3e-3: clearly lower
    assert r["ddp_state_dict_key"].startswith("module.")  # why the article's torch.save(ddp.state_dict()) misloads
    assert r["tokens_per_s_rank"] > 0 and len(r["history"]["loss"]) == 8 and r["text_before"] != r["text_after"]
    assert reference.results[1]["history"]["loss"] == r["history"]["loss"]  # every rank reports the global mean


@pytest.mark.timeout(400)
@pytest.mark.parametrize("in_save,resumed", [(False, 4), (True, 2)])
def test_killed_rank_resumes_exactly(reference, tmp_path, in_save, resumed, no_leftovers):
    """Killed at step 5 (last checkpoint: 4), or inside the save of step 4 (its .tmp is ignored: 2)."""
    cfg = LMConfig(**{**TINY.__dict__, "ckpt_dir": str(tmp_path), "ckpt_every": 2,
                      "fail_at_step": 4 if in_save else 5, "fail_in_save": in_save})
    res = disttutor.launch("lm_train", 2, cfg, max_restarts=1, **KW)
    r = res.results[0]
    assert r["attempt"] == 1 and r["resumed_from"] == resumed
    # Same ops in the same order on the same data with the same RNG states (2 ranks: the all-reduce
    # sum a+b does not depend on DDP's bucket order): bitwise equal, so the tolerance is zero.
    assert max_diff(params(res), params(reference)) == 0.0
    assert r["history"]["loss"] == reference.results[0]["history"]["loss"]


@pytest.mark.timeout(300)
def test_rank_lost_for_good_ends_clearly(tmp_path, no_leftovers):
    cfg = LMConfig(**{**TINY.__dict__, "ckpt_dir": str(tmp_path), "ckpt_every": 2, "fail_at_step": 0,
                      "fail_always": True, "sample_chars": 0})
    with pytest.raises(LaunchError) as e:
        disttutor.launch("lm_train", 2, cfg, max_restarts=1, **KW)
    msg = str(e.value)
    assert "rank 1" in msg and len(msg.splitlines()) < 12, msg


def test_bad_config_is_a_clear_error():
    with pytest.raises(ValueError, match="ckpt_dir and ckpt_every"):
        LMConfig(fail_at_step=3)
    with pytest.raises(ValueError, match="max_restarts"):
        disttutor.launch("lm_train", 2, TINY, max_restarts=-1)
