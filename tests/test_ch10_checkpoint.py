"""Chapter 10: disttutor.lm.checkpoint in one process -- exact resume, atomic commit, rotation, no pickle."""
import json
import os
import pickle

import pytest
import torch

from disttutor.lm import checkpoint as ck
from disttutor.lm import model as lm


def build(seed=0):
    torch.manual_seed(seed)
    m = lm.TinyLM(20, 16, 2, 1, max_len=16, dropout=0.2)  # dropout: the RNG state matters
    o = torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=True)
    s = torch.optim.lr_scheduler.LambdaLR(o, lambda i: min(1.0, (i + 1) / 4))
    return m, o, s


def steps(m, o, s, n, x):
    for _ in range(n):
        lm.window_loss(m, x).backward()
        o.step()
        o.zero_grad()
        s.step()


X = torch.randint(0, 20, (4, 9), generator=torch.Generator().manual_seed(1))


def test_resume_is_exact(tmp_path):
    m, o, s = build()
    steps(m, o, s, 3, X)
    path = ck.save(str(tmp_path), 3, m, o, scheduler=s, extra={"note": "x"})
    steps(m, o, s, 3, X)
    m2, o2, s2 = build(seed=99)       # other weights, other RNG: everything must come from the file
    meta = ck.load(path, m2, o2, scheduler=s2)
    steps(m2, o2, s2, 3, X)
    assert meta["step"] == 3 and meta["extra"] == {"note": "x"}
    for a, b in zip(m.parameters(), m2.parameters()):
        assert torch.equal(a, b)  # same ops, same order, same inputs, same RNG: bitwise equal


@pytest.mark.parametrize("forget", ["optimizer", "rng", "scheduler"])
def test_each_piece_of_state_matters(tmp_path, forget):
    """The reason a checkpoint holds all of it: leaving any one out changes the continued run."""
    m, o, s = build()
    steps(m, o, s, 3, X)
    path = ck.save(str(tmp_path), 3, m, o, scheduler=s)
    steps(m, o, s, 3, X)
    m2, o2, s2 = build(seed=99)
    if forget == "optimizer":
        o2 = torch.optim.AdamW(m2.parameters(), lr=1e-2, foreach=True)
        s2 = torch.optim.lr_scheduler.LambdaLR(o2, lambda i: min(1.0, (i + 1) / 4))
        m2.load_state_dict(m.state_dict())  # weights right, moments and step counts lost
        ck.load(path, m2, torch.optim.AdamW(m2.parameters()), scheduler=None)  # RNG restored only
        s2.last_epoch = 3
    else:
        ck.load(path, m2, o2, scheduler=None if forget == "scheduler" else s2, restore_rng=forget != "rng")
    steps(m2, o2, s2, 3, X)
    assert any(not torch.equal(a, b) for a, b in zip(m.parameters(), m2.parameters()))


def test_interrupted_save_leaves_previous_checkpoint(tmp_path):
    m, o, s = build()
    ck.save(str(tmp_path), 2, m, o, scheduler=s)

    def crash():
        raise KeyboardInterrupt("killed in the middle of the save")

    with pytest.raises(KeyboardInterrupt):
        ck.save(str(tmp_path), 4, m, o, scheduler=s, before_commit=crash)
    assert os.path.isdir(tmp_path / "step_000004.tmp")           # half a checkpoint is on disk ...
    assert ck.latest(str(tmp_path)).endswith("step_000002")     # ... and never chosen
    ck.load(ck.latest(str(tmp_path)), *build(seed=5)[:2])       # the previous one still loads
    ck.save(str(tmp_path), 4, m, o, scheduler=s)                # a later save cleans the leftover up
    assert not os.path.exists(tmp_path / "step_000004.tmp")


def test_rotation_keeps_the_newest(tmp_path):
    m, o, s = build()
    for step in (1, 2, 3, 4):
        ck.save(str(tmp_path), step, m, o, keep=2)
    assert [st for st, _ in ck.list_checkpoints(str(tmp_path))] == [3, 4]
    with pytest.raises(ValueError, match="keep"):
        ck.save(str(tmp_path), 5, m, o, keep=0)


def test_loading_never_unpickles_arbitrary_objects(tmp_path):
    m, o, s = build()
    path = ck.save(str(tmp_path), 1, m, o)
    assert json.load(open(os.path.join(path, "meta.json")))["step"] == 1  # non-tensor state is JSON

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    with open(os.path.join(path, ".metadata"), "wb") as f:  # a tampered DCP metadata pickle
        pickle.dump(Evil(), f)
    with pytest.raises(Exception, match="refusing|posix.system|os.system"):
        ck.load(path, *build()[:2])
    with pytest.raises(TypeError, match="pickle"):
        ck._only_tensors({"a": {"b": "not a tensor"}}, "state")


def test_world_size_mismatch_is_clear(tmp_path):
    m, o, s = build()
    path = ck.save(str(tmp_path), 1, m, o)
    meta = json.load(open(os.path.join(path, "meta.json")))
    meta["world_size"] = 4
    json.dump(meta, open(os.path.join(path, "meta.json"), "w"))
    with pytest.raises(ValueError, match="written by 4 ranks"):
        ck.load(path, *build()[:2])
