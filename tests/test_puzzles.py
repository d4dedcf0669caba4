"""The puzzles (disttutor/course/puzzles.py): true answers, teaching wrong answers, enough of them.

Every puzzle that shows code is run for real: one launch of ``disttutor.programs.puzzle_check`` on 4
gloo ranks executes every run puzzle's snippet and the answer must be what the ranks computed. The
others are checked here against an independent computation (torch's own ``chunk`` and
``DistributedSampler``, the course's pipeline simulator and memory calculator, or counting one by one).
"""
from __future__ import annotations

import inspect
import json
import math

import pytest

from disttutor.course import puzzles as pz

PUZZLES = pz.all_puzzles()
TECHNIQUE = (2, 3, 4, 5, 7, 8, 10, 11, 12)  # the chapters that teach a technique: at least 3 each


def _of(ch: int) -> list[str]:
    return [k for k, p in PUZZLES.items() if p.chapter == ch]


def test_enough_puzzles_for_every_technique_chapter():
    assert len(PUZZLES) >= 30, f"{len(PUZZLES)} puzzles, at least 30"
    few = {ch: _of(ch) for ch in TECHNIQUE if len(_of(ch)) < 3}
    assert not few, f"chapters with fewer than 3 puzzles: {few}"
    for ch in {p.chapter for p in PUZZLES.values()}:
        ids = sorted(_of(ch), key=lambda k: int(k.split(".z")[1]))
        assert ids == [f"{ch}.z{i}" for i in range(1, len(ids) + 1)], f"chapter {ch}: ids not 1..K: {ids}"


@pytest.mark.parametrize("pid", list(PUZZLES))
def test_a_puzzle_accepts_its_answer_and_teaches_on_its_named_wrong_ones(pid):
    p = PUZZLES[pid]
    vals = p.values()
    templates = {"question": p.question, "explanation": p.explanation, **{f"wrong {k}": w for k, w in p.wrong.items()}}
    for name, text in templates.items():
        missing = pz.placeholders(text) - set(vals)
        assert not missing, f"{pid}: its {name} names {missing}, which values() does not give"
    ans = vals[p.answer]
    if isinstance(ans, float):
        assert p.rel_tol is not None and 0 < p.rel_tol < 0.34, f"{pid}: a float answer needs a tolerance (< 2x)"
    else:
        assert p.rel_tol is None, f"{pid}: only float answers have a tolerance; {ans!r} is checked exactly"
    if isinstance(ans, str):
        assert ans in p.choices, f"{pid}: the answer {ans!r} is not one of the choices {p.choices}"
    assert pz.verdict(pid, ans) == (True, None)
    text = pz.render(pid)
    assert "<details>" in text and "right" not in text.split("<details>")[0], pid
    right = pz.render(pid, ans)
    assert ": right.**" in right and "<details>" not in right, f"{pid}: the right answer opens the explanation"
    assert p.wrong, f"{pid}: name at least one realistic wrong answer and why it is wrong"
    seen = [ans]
    for i, key in enumerate(p.wrong):
        bad = vals[key]
        assert not any(pz._same(p, bad, s) for s in seen), f"{pid}: wrong answer {key}={bad!r} is the answer or another"
        seen.append(bad)
        assert pz.verdict(pid, bad) == (False, i)
        out = pz.render(pid, bad)
        assert "not yet" in out and p.wrong[key].format(**vals) in out, f"{pid}: {bad!r} does not get its message"
        shown = out.split("<details>")[0]
        assert p.explanation.format(**vals) not in shown, f"{pid}: a wrong answer shows the explanation"


def test_the_card_checks_the_kind_of_answer_and_round_trips_through_its_mime_data():
    assert "not yet" in pz.render("2.z3", 11)
    assert ": right.**" in pz.render("2.z3", 12.0)  # 12.0 is 12
    assert "not yet" in pz.render("2.z3", 12.5)
    assert ": right.**" in pz.render("2.z1", (76, 80))  # a tuple is a list
    with pytest.raises(ValueError, match="a list of numbers"):
        pz.render("2.z1", 76)
    with pytest.raises(ValueError, match="no puzzle"):
        pz.render("2.z99")
    card = pz.puzzle("2.z1", [76, 80], lang="en")
    bundle = card._repr_mimebundle_()
    assert bundle[pz.MIME] == {"pid": "2.z1", "mine": [76, 80]}
    assert pz.puzzle_in(json.loads(json.dumps(bundle[pz.MIME])), "en") == bundle["text/markdown"]
    assert "小题 2.z1" in pz.puzzle_in(bundle[pz.MIME], "zh")


def test_a_made_up_letter_puzzle_is_exact_and_names_its_wrong_letter():
    p = pz.Puzzle("99.z1", "deadlock", "Which order hangs?", "Order {answer}.",
                  lambda: {"answer": "a", "other": "b"}, "answer", choices=("a", "b", "c"),
                  wrong={"other": "Order b sends and receives in opposite orders."})
    pz.PUZZLES["99.z1"] = p
    try:
        assert ": right.**" in pz.render("99.z1", " A ")
        assert "opposite orders" in pz.render("99.z1", "b") and "not yet" in pz.render("99.z1", "c")
        assert "a, b, c" in pz.render("99.z1")
    finally:
        del pz.PUZZLES["99.z1"]


@pytest.mark.parametrize("pid", list(PUZZLES))
def test_a_puzzle_renders_in_chinese_with_the_same_placeholders(pid):
    from disttutor.course.chapters import chapter
    from disttutor.course.translation import lookup

    p = PUZZLES[pid]
    stem = chapter(p.chapter).stem
    keys = {"q": p.question, "w": p.explanation, **{f"x{i}": w for i, w in enumerate(p.wrong.values(), 1)}}
    for key, english in keys.items():
        zh = lookup(stem, f"puzzle:{pid}:{key}", english)
        assert zh is not None, f"{pid}: no signed Chinese for puzzle:{pid}:{key} (translate.py stub {p.chapter})"
        assert pz.placeholders(zh) == pz.placeholders(english), f"{pid}: the Chinese {key} fills other numbers"
    assert "小题" in pz.render(pid, None, lang="zh")


# --- the answers that need no ranks, against an independent computation ----------------------------

def test_memory_puzzles_match_the_table_and_the_calculator():
    from disttutor.sharding.memory import TrainingSetup, per_device

    per_param = 2 + 2 + 4 + 4 + 4  # bf16 weights, bf16 gradients, fp32 master, Adam's m and v
    assert PUZZLES["1.z1"].values()["answer"] == round(7e9 * per_param / 1e9)
    assert PUZZLES["1.z2"].values()["answer"] == math.ceil(13e9 * per_param / 1e9 / 80)
    cfg = TrainingSetup(layers=4, hidden=256, heads=4, batch=8, dp=8, zero=2)
    bytes_per_param = sum(per_device(cfg)[k] for k in ("weights", "gradients", "optimizer")) / cfg.params
    assert math.isclose(PUZZLES["11.z1"].values()["answer"], 1.5 * bytes_per_param, rel_tol=1e-12)


def test_dataparallel_splits_like_chunk_and_moves_what_the_traffic_model_says():
    import torch

    from disttutor.data_parallel.dataparallel import expected_bytes

    # nn.DataParallel's scatter calls tensor.chunk(len(devices)) (torch/csrc/cuda/comm.cpp, scatter: no
    # chunk_sizes given), and replicates the module onto only as many devices as there are chunks
    assert "self.device_ids[: len(inputs)]" in inspect.getsource(torch.nn.DataParallel.forward)
    assert PUZZLES["3.z1"].values()["answer"] == [len(c) for c in torch.arange(10).chunk(4)]
    assert PUZZLES["3.z2"].values()["answer"] == len(torch.arange(9).chunk(4))
    moved = expected_bytes("dp-copy", 4, 0, n_params=25_000_000, batch=4, d_in=0, d_out=0)
    assert PUZZLES["3.z3"].values()["answer"] == (moved["sent"] + moved["recv"]) / 1e6


def test_sampler_puzzles_match_distributed_sampler():
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(10), num_replicas=4, rank=3, shuffle=False)
    assert PUZZLES["4.z4"].values()["answer"] == list(sampler)
    s = DistributedSampler(range(20), num_replicas=2, rank=0, shuffle=True, seed=0)
    assert PUZZLES["10.z2"].values()["answer"] == len({tuple(s) for _ in range(3)})  # no set_epoch
    s.set_epoch(1)
    assert len({tuple(s), tuple(DistributedSampler(range(20), num_replicas=2, rank=0, shuffle=True, seed=0))}) == 2


def test_launch_puzzles_match_torchruns_numbering_process_by_process():
    def ranks(nnodes, nproc):  # torchrun numbers node by node (tests/test_ch05_multi_node.py checks it)
        return {(g, lr): g * nproc + lr for g in range(nnodes) for lr in range(nproc)}

    assert PUZZLES["5.z1"].values()["answer"] == ranks(2, 4)[(1, 2)]
    assert PUZZLES["5.z2"].values()["answer"] == len(ranks(4, 8))
    assert PUZZLES["5.z3"].values()["answer"] == list(next(k for k, v in ranks(4, 8).items() if v == 13))


def test_schedule_puzzles_match_the_simulated_drawings():
    from disttutor.pipeline.schedules import PipeSpec, peak_in_flight, simulate

    def bubble(schedule, p, m, v=1):
        return simulate(PipeSpec(schedule, p=p, m=m, v=v)).bubble_fraction

    z2 = PUZZLES["6.z2"].values()
    assert math.isclose(z2["answer"], 1 - bubble("gpipe", z2["p"], 1), rel_tol=1e-9)
    assert math.isclose(PUZZLES["7.z1"].values()["answer"], bubble("gpipe", 3, 6), rel_tol=1e-9)
    assert PUZZLES["7.z2"].values()["answer"] == peak_in_flight(PipeSpec("gpipe", p=3, m=6))[0]
    assert math.isclose(PUZZLES["7.z3"].values()["answer"], bubble("interleaved", 3, 6, 2), rel_tol=1e-9)
    z4 = PUZZLES["7.z4"].values()
    assert bubble("1f1b", z4["p"], z4["answer"]) <= z4["t"] + 1e-12 < bubble("1f1b", z4["p"], z4["answer"] - 1)


def test_counting_puzzles_match_a_count_one_by_one():
    assert PUZZLES["8.z2"].values()["answer"] == sum(1 for _rank in range(8) for _mb in range(16) for _s in range(4))
    assert PUZZLES["10.z1"].values()["answer"] == sum(1 for _r in range(2) for _a in range(4) for _b in range(8)
                                                      for _t in range(128))
    newest = max(s for s in range(1, 371) if s % 100 == 0)
    assert PUZZLES["10.z4"].values()["answer"] == len(range(newest + 1, 371))


# --- the answers of the puzzles that show code: what 4 real ranks computed --------------------------

@pytest.mark.slow
@pytest.mark.timeout(240)
def test_every_run_puzzle_answer_is_what_real_ranks_compute(tmp_path, no_leftovers):
    import disttutor

    snippets = pz.snippets()
    assert len(snippets) >= 15 and {p.chapter for p in PUZZLES.values() if p.expr} >= {2, 4, 8, 11, 12}
    source = tmp_path / "snippets.json"
    source.write_text(json.dumps(snippets))
    res = disttutor.launch("puzzle_check", 4, {"source": str(source)}, backend="gloo", timeout=200,
                           collective_timeout=60, stream=False)
    assert res.ok, res.summary()
    wrong = {}
    for s in snippets:
        p = PUZZLES[s["id"]]
        got = p.reads([res.results[r]["results"][s["id"]] for r in range(4)])
        ok, _ = pz.verdict(s["id"], got)
        if not ok:
            wrong[s["id"]] = (got, p.values()[p.answer])
    assert not wrong, f"puzzles whose answer is not what the ranks computed (got, answer): {wrong}"
