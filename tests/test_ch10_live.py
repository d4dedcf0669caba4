"""Chapter 10's live loss plot and its profiler time split, as plain Python (no browser, no ranks):
the callback's bookkeeping and throttling with a fake clock and a fake display, and the split's
interval arithmetic on a hand-made trace."""
import pytest

from disttutor.lm import timesplit as lm_profile
from disttutor.lm.loop import LMConfig
from disttutor.viz.lm import LiveLoss


class FakeHandle:
    def __init__(self, shown):
        self.shown = shown

    def update(self, obj):
        self.shown.append(obj)


class FakeDisplay:
    def __init__(self):
        self.shown, self.calls = [], 0

    def __call__(self, obj, display_id=False):
        assert display_id is True  # one output, updated in place: the cell does not grow
        self.calls += 1
        self.shown.append(obj)
        return FakeHandle(self.shown)


def rec(step, **metrics):
    return {"step": step, "total": 6, "desc": "training (attempt 1)", "metrics": metrics}


def test_live_loss_collects_like_the_static_plot_and_throttles():
    now = [0.0]
    disp = FakeDisplay()
    live = LiveLoss(every_s=2.0, display=disp, clock=lambda: now[0])
    live(rec(0, val=4.3))          # validation before any step: x = 0
    for s in range(1, 7):          # train loss of step s-1 arrives as step s
        now[0] += 0.5
        live(rec(s, loss=4.0 - 0.1 * s))
    live(rec(6, val=3.5))
    assert live.train == {s - 1: pytest.approx(4.0 - 0.1 * s) for s in range(1, 7)}
    assert live.val == {0: 4.3, 6: 3.5}
    # 8 records over 3 s with every_s=2: drawn at t=0 and t=2 only, in ONE display output.
    assert live.draws == 2 and disp.calls == 1 and len(disp.shown) == 2
    assert disp.shown[0].data[:8] == b"\x89PNG\r\n\x1a\n"
    fig = live.figure()
    train_line, val_line = fig.axes[0].lines[:2]
    assert list(train_line.get_xdata()) == list(range(6)) and list(val_line.get_xdata()) == [0, 6]
    with live:  # leaving the block replaces the picture by one line of text
        pass
    assert "6 train and 2 validation points" in disp.shown[-1].data and live.draws == 2


def test_a_restarted_attempt_overwrites_the_steps_it_repeats():
    live = LiveLoss(every_s=0, display=None)
    for s in (1, 2, 3):
        live(rec(s, loss=float(s)))
    for s in (3, 4):  # attempt 2 resumed from step 2
        live(rec(s, loss=10.0 * s))
    assert live.train == {0: 1.0, 1: 2.0, 2: 30.0, 3: 40.0}
    fig = live.figure()
    assert list(fig.axes[0].lines[0].get_ydata()) == [1.0, 2.0, 30.0, 40.0]


def test_headless_live_loss_collects_but_shows_nothing():
    live = LiveLoss(every_s=0)  # no IPython kernel under pytest: nothing to display on
    assert live.display is None
    live(rec(1, loss=4.0))
    live.close()
    assert live.train == {0: 4.0} and live.draws == 0


def test_bad_every_s_is_a_clear_error():
    with pytest.raises(ValueError, match="every_s"):
        LiveLoss(every_s=-1)


def X(name, ts, dur, cat="user_annotation"):
    return {"name": name, "ph": "X", "ts": ts, "dur": dur, "cat": cat}


def test_split_partitions_the_window_with_communication_first():
    # One profiled step of 100 us: data 0-10, forward 10-40 (a 5 us broadcast inside), backward
    # 40-90 (all-reduce 70-95, spilling 5 us past backward), nothing 90-100 but the all-reduce tail.
    events = [X("ProfilerStep#4", 0, 100), X("data", 0, 10), X("forward", 10, 30), X("backward", 40, 50),
              X("gloo:broadcast", 12, 5), X("gloo:all_reduce", 70, 25), X("aten::mm", 45, 5, "cpu_op")]
    s = lm_profile.split(events)
    assert s["steps"] == 1 and s["window_ms"] == pytest.approx(0.1)
    assert s["communication_ms"] == pytest.approx(0.030)   # 5 + 25
    assert s["data_ms"] == pytest.approx(0.010)
    assert s["compute_ms"] == pytest.approx(0.055)         # 30 + 50 - 5 - 20 (under the collectives)
    assert s["other_ms"] == pytest.approx(0.005)           # 95-100 (90-95 is the all-reduce's tail)
    assert s["comm_outside_regions_ms"] == pytest.approx(0.005)
    total = sum(s[f"{p}_ms"] for p in lm_profile.PARTS)
    assert total == pytest.approx(s["window_ms"], abs=1e-12)


def test_split_needs_profiler_steps():
    with pytest.raises(ValueError, match="ProfilerStep"):
        lm_profile.split([X("forward", 0, 1)])


def test_profile_window_is_validated():
    with pytest.raises(ValueError, match="profiled steps"):
        LMConfig(steps=10, profile_steps=4, profile_from=8)
    with pytest.raises(ValueError, match="profiled steps"):
        LMConfig(steps=10, profile_steps=2, profile_from=0)
