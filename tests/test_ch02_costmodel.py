"""Chapter 2's α–β cost model of the naive, tree and ring all-reduce (``disttutor.viz.alphabeta``), its widget
and its live entry for the web edition. No ranks: the message counts are read from the scratch all-reduces
themselves, run against a recording stand-in for ``torch.distributed``. ~2 s."""
from __future__ import annotations

import json
import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

import disttutor.scratch.allreduce as scratch  # noqa: E402
from disttutor.checks.claims.ch02 import check_cost_model  # noqa: E402
from disttutor.launcher.results import format_table  # noqa: E402
from disttutor.links.presets import PRESETS  # noqa: E402
from disttutor.viz import alphabeta as ab  # noqa: E402
from disttutor.viz import web  # noqa: E402

NS = (2, 3, 4, 5, 7, 8, 16, 64, 1000, 1024)


def test_the_formulas_are_the_derived_ones():
    """t = steps·α + wire·N/B equals the chapter's closed forms, and the ring equals the link presets' model."""
    alpha, bw, size = 20e-6, 0.125e9, 4 << 20
    for n in NS:
        lg = math.ceil(math.log2(n))
        # float arithmetic in a different order: equal to rounding
        assert ab.time_s("naive", n, size, alpha, bw) == pytest.approx(2 * (n - 1) * (alpha + size / bw), rel=1e-12)
        assert ab.time_s("tree", n, size, alpha, bw) == pytest.approx(2 * lg * (alpha + size / bw), rel=1e-12)
        assert ab.time_s("ring", n, size, alpha, bw) == pytest.approx(
            2 * (n - 1) * alpha + 2 * (n - 1) / n * size / bw, rel=1e-12)
        link = PRESETS["1GbE"]
        assert ab.time_s("ring", n, size, link.alpha.value, link.beta.value) == pytest.approx(
            link.all_reduce_time(size, n), rel=1e-12)
        for a in ab.ALGOS:  # the bandwidth term is the busiest rank's bytes: twice for naive and tree, once for ring
            assert ab.wire(a, n) == ab.sent(a, n) * (1 if a == "ring" else 2)
    assert check_cost_model(ab.SENT).startswith("2 ranks: every algorithm sends one tensor")
    with pytest.raises(ValueError, match="n >= 2"):
        ab.steps("ring", 1)
    with pytest.raises(ValueError, match="unknown algorithm"):
        ab.sent("star", 4)
    with pytest.raises(ValueError, match="B > 0"):
        ab.time_s("ring", 4, 1, 1e-6, 0)


class _Recorder:
    """A stand-in for torch.distributed that records who sends how many elements (no real messages)."""

    def __init__(self, rank, n):
        self.rank, self.n, self.sent, self.received = rank, n, [], []

    def get_rank(self):
        return self.rank

    def get_world_size(self):
        return self.n

    def send(self, t, dst):
        self.sent.append(t.numel())

    def recv(self, t, src):
        self.received.append(t.numel())

    def isend(self, t, dst):
        self.send(t, dst)
        return self

    def irecv(self, t, src):
        self.recv(t, src)
        return self

    def wait(self):
        pass


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 12])
def test_sent_counts_what_the_scratch_all_reduces_send(monkeypatch, n):
    """The busiest rank's bytes sent (in tensors) and its messages in sequence, counted from the chapter's
    own naive, tree and ring code run rank by rank."""
    numel = 2 * 3 * 4 * 5 * 7 * 11  # divisible by every n above: the ring's chunks are equal
    for algo, fn in scratch.ALGORITHMS.items():
        recs = []
        for r in range(n):
            rec = _Recorder(r, n)
            monkeypatch.setattr(scratch, "dist", rec)
            fn(torch.zeros(numel))
            recs.append(rec)
        busiest = max(sum(rec.sent) for rec in recs) / numel
        assert busiest == pytest.approx(ab.sent(algo, n), rel=1e-12), (algo, n)
        if algo != "ring":  # naive and tree: the root receives everything, then sends: its messages in sequence
            assert len(recs[0].sent) + len(recs[0].received) == ab.steps(algo, n) == 2 * round(ab.sent(algo, n))
        else:  # every ring rank sends one chunk and receives one per step, at the same time
            assert all(len(rec.sent) == len(rec.received) == ab.steps(algo, n) for rec in recs)


def test_the_crossover_is_where_ring_and_tree_take_the_same_time():
    for n in (4, 8, 64, 1024):
        x = ab.crossover(n, 20e-6, 0.125e9)
        assert x > 0
        # the same time at N*, to rounding; ring slower below, faster above
        assert ab.time_s("ring", n, x, 20e-6, 0.125e9) == pytest.approx(ab.time_s("tree", n, x, 20e-6, 0.125e9))
        assert ab.time_s("ring", n, x / 2, 20e-6, 0.125e9) > ab.time_s("tree", n, x / 2, 20e-6, 0.125e9)
        assert ab.time_s("ring", n, 2 * x, 20e-6, 0.125e9) < ab.time_s("tree", n, 2 * x, 20e-6, 0.125e9)
    assert ab.crossover(2, 20e-6, 0.125e9) is None and ab.crossover(3, 20e-6, 0.125e9) is None
    assert "ring never slower than tree" in ab.title(2, 20, 0.125)


def test_the_widget_and_the_web_entry_show_the_same_numbers():
    """The ipywidgets widget redraws its rows on a move; the page's data (web.run, labels as the saved widget
    state writes them) carries the figure's title, line-end notes and the printed table."""
    box = ab.cost_widget()
    assert [r["algorithm"] for r in box.rows] == list(ab.ALGOS) and box.rows[0]["steps"] == 14  # 8 ranks
    box.children[0].children[0].value = 64
    assert box.rows[2]["sent_xN"] == round(126 / 64, 3)
    for n, alpha_us, gb_s in ((8, 20, 0.125), (64, 1, 450), (2, 100, 12.5), (1024, 5, 1.25)):
        rows, fig = ab.model_view(n, alpha_us, gb_s)
        ax = fig.axes[0]
        d = json.loads(web.run("costmodel", json.dumps({"labels": {"n": str(n), "alpha_us": str(alpha_us),
                                                                   "gb_s": str(gb_s)}})))
        assert d["kind"] == "loglog" and d["title"] == ax.get_title() and d["table"] == format_table(rows)
        assert d["labels"] == [t.get_text() for t in ax.texts]
        assert [s[0] for s in d["series"]] == list(ab.ALGOS) and len(d["x"]) == len(d["series"][0][2])
        for (name, _, ts), line in zip(d["series"], ax.lines):
            assert list(line.get_ydata()) == ts
        plt.close(fig)
    src = "from disttutor.viz.alphabeta import SENT, cost_widget\n\ncost_widget()"
    assert web.find(src).name == "costmodel"
    assert web.find("from disttutor.viz.allreduce import widget\n\nwidget()") is None  # measures on ranks: not live
