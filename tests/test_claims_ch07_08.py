"""Chapters 7 and 8's named checks (disttutor/checks/claims/ch07.py, ch08.py) on inputs shaped like the chapters'
runs (chapter 7's own drawings; sweeps, counts and bytes as the ranks report them): each returns its verdict when
the claim holds and names the problem on a realistic wrong input."""
from __future__ import annotations

import pytest

from disttutor.checks.claims.ch07 import check_bubble_model, check_schedule_drawings
from disttutor.pipeline.schedules import PipeSpec
from disttutor.viz.pipeline import describe


def _rows():
    rows = []
    for spec in [PipeSpec("gpipe", 4, 8), PipeSpec("1f1b", 4, 8), PipeSpec("interleaved", 4, 8, 2)]:
        d = describe(spec)
        rows.append({"schedule": spec.schedule, "p": spec.p, "m": spec.m, "v": spec.v,
                     "bubble (drawing)": round(d["bubble_drawn"], 4), "formula": round(d["bubble_formula"], 4),
                     "peak activations per rank": d["peak_in_flight"]})
    return rows


def test_the_drawings_match_their_formulas_and_a_wrong_memory_claim_is_named():
    rows = _rows()
    assert "1F1B holds p - r" in check_schedule_drawings(rows)
    rows[1]["peak activations per rank"] = [8, 8, 8, 8]  # 1F1B drawn as if it kept every micro-batch like GPipe
    with pytest.raises(AssertionError, match="1F1B should keep p - r activations"):
        check_schedule_drawings(rows)


def test_the_bubble_model_is_asserted_only_on_a_quiet_machine():
    good = [{"m": m, "theory": t, "measured": t + 0.04, "model": t + 0.035} for m, t in ((2, 0.33), (4, 0.2), (8, 0.11))]
    assert "asserted" in check_bubble_model(good, 0.03, quiet=True)
    below = [dict(r, measured=r["theory"] - 0.08, model=r["theory"] - 0.08) for r in good]  # a stretched run
    assert "not asserted" in check_bubble_model(below, 0.03, quiet=False)
    with pytest.raises(AssertionError, match="below the formula"):
        check_bubble_model(below, 0.03, quiet=True)
    blind = [dict(r, model=r["theory"]) for r in good]  # a "model" that ignores the measured overhead
    with pytest.raises(AssertionError, match="half the formula's miss"):
        check_bubble_model(blind, 0.03, quiet=True)


# ---- chapter 8 ----------------------------------------------------------------------------------

def test_fp16_underflow_is_checked_on_the_real_conversions():
    import torch

    from disttutor.checks.claims.ch08 import check_fp16_underflow

    fi16 = torch.finfo(torch.float16)
    sub = fi16.smallest_normal * fi16.eps
    assert "loss scaling rescues" in check_fp16_underflow(sub, torch.tensor(1e-8))
    with pytest.raises(AssertionError, match="should underflow"):  # a gradient fp16 can hold: no lesson
        check_fp16_underflow(sub, torch.tensor(1e-3))


def test_no_sync_counts_one_all_reduce_per_group_and_every_micro_batch():
    from disttutor.checks.claims.ch08 import check_no_sync_counts

    def row(k, no_sync):
        sizes = [k] * (18 // k) + ([18 % k] if 18 % k else [])
        return {"k": k, "no_sync": no_sync, "group_sizes": sizes, "grads_left": 0,
                "allreduces": [1 if no_sync else s for s in sizes]}
    rows = [row(k, ns) for k in (1, 2, 4) for ns in (False, True)]
    ok = [{"all_match_reference": True}] * 2
    assert "1 vs k" in check_no_sync_counts(ok, rows, samples=18)
    synced = [dict(r, allreduces=[r["k"]] * len(r["group_sizes"])) if r["no_sync"] else r for r in rows]
    with pytest.raises(AssertionError, match=r"k=2, no_sync=True: 1 all-reduce\(s\) per full group expected"):
        check_no_sync_counts(ok, synced, samples=18)  # no_sync forgotten: every micro-batch still all-reduces
    dropped = [dict(r, group_sizes=r["group_sizes"][:4]) if r["k"] == 4 else r for r in rows]
    with pytest.raises(AssertionError, match="16 of 18 micro-batches stepped"):
        check_no_sync_counts(ok, dropped, samples=18)  # the leftover 2 dropped instead of stepped


def test_hook_bytes_and_bucket_views_name_the_wrong_count():
    from disttutor.checks.claims.ch08 import check_bucket_view, check_hook_bytes

    base = {"grad_bytes": 4000, "bytes_per_step": 4000, "loss": [1.0, 0.5]}
    hrows = {"fp16": {"bytes_per_step": 2000, "replicas_equal": True, "loss": [1.0, 0.502]},
             "powersgd": {"bytes_per_step": 300, "bytes_first_step": 4000, "replicas_equal": True, "loss": [1.0, 0.55]}}
    allrows = {"bf16": "refused: this build has no bf16 NCCL"}
    assert check_hook_bytes(base, allrows, hrows, bf16_hook_ok=False).startswith("checked: fp16 sends 0.500x fp32's bytes")
    fp32_cast = {**hrows, "fp16": dict(hrows["fp16"], bytes_per_step=4000)}  # a hook that casts back before sending
    with pytest.raises(AssertionError, match="fp16: 2-byte floats should send exactly half"):
        check_hook_bytes(base, allrows, fp32_cast, bf16_hook_ok=False)

    bv = {True: {"grads_in_buckets": 6, "params": 6, "held_bytes": 8000, "grad_bytes": 4000, "max_err": 0.0},
          False: {"grads_in_buckets": 0, "params": 6, "held_bytes": 12000, "grad_bytes": 4000, "max_err": 0.0}}
    assert "one copy of the gradients" in check_bucket_view(bv)
    with pytest.raises(AssertionError, match="save exactly one copy"):
        check_bucket_view({**bv, True: dict(bv[True], held_bytes=12000)})  # views that still copy


def test_chapter_8_page_claims_name_what_failed():
    """The one-line proofs of chapter 8's page: each passes on a good run and names the wrong value."""
    from disttutor.checks.claims import ch08

    amp = {"loss_fp32": [1.0, 0.5], "loss_amp": [1.001, 0.5005], "any_param_identical": False}
    assert "no parameter bit-identical" in ch08.check_amp_rounding(amp)
    with pytest.raises(AssertionError, match="autocast did not run"):
        ch08.check_amp_rounding(dict(amp, any_param_identical=True))
    with pytest.raises(AssertionError, match="over 2 % of the loss"):
        ch08.check_amp_rounding(dict(amp, loss_amp=[1.0, 0.6]))

    assert "1/65536" in ch08.check_clip_order(1.0, 1.0)
    with pytest.raises(AssertionError, match="clip then unscale"):
        ch08.check_clip_order(1.0, 65536.0)  # clipped in true units both ways: the order made no difference

    rows = [{"cap_mb": c, "buckets": b, "max_err": 1e-8} for c, b in ((0.5, 6), (2, 3), (25, 1))]
    assert "[6, 3, 1]" in ch08.check_bucket_sweep([{"rows": rows}])
    with pytest.raises(AssertionError, match="fall to 1"):
        ch08.check_bucket_sweep([{"rows": [dict(r, buckets=2) for r in rows]}])
    with pytest.raises(AssertionError, match="changed the gradients"):
        ch08.check_bucket_sweep([{"rows": [dict(r, max_err=1e-3) for r in rows]}])

    probe = [{"time_s": 0.06, "model_s": 0.05}]
    assert "not asserted" in ch08.check_probe(probe, 0.3, 0.0, quiet=False)
    with pytest.raises(AssertionError, match="off by"):
        ch08.check_probe(probe, 0.3, 0.0, quiet=True)
    with pytest.raises(AssertionError, match="beat the emulated"):
        ch08.check_probe([{"time_s": 0.04, "model_s": 0.05}], 0.0, 0.0, quiet=False)

    assert ch08.check_faster("step", "a", 0.1, "b", 0.2, True) == "step: a 100 ms < b 200 ms (asserted: quiet machine)"
    assert ">=" in ch08.check_faster("step", "a", 0.3, "b", 0.2, False)   # a busy machine: stated, not asserted
    with pytest.raises(AssertionError, match="should be under"):
        ch08.check_faster("step", "a", 0.3, "b", 0.2, True)

    comp = {"fp32": {"bytes_per_step": 4000}, "fp16": {"bytes_per_step": 2000}, "powersgd": {"bytes_per_step": 100}}
    assert "exactly half" in ch08.check_link_bytes(comp)
    with pytest.raises(AssertionError, match="exactly half"):
        ch08.check_link_bytes(dict(comp, fp16={"bytes_per_step": 4000}))

    sg = {True: {"max_err": 1e-8}, False: {"max_err": 0.5}}
    assert "wrong gradients" in ch08.check_static_graph(sg)
    assert "DDP raised" in ch08.check_static_graph({**sg, False: {"error": "x"}})
    with pytest.raises(AssertionError, match="torch handled it"):
        ch08.check_static_graph({**sg, False: {"max_err": 1e-8}})


def test_check_pipeline_run_and_check_balance_reject_what_they_name():
    """The two proof checks of chapter 7's pipelined runs: a right run passes; a drifted weight, a loss off, the
    wrong stages, another order, an even split that is not more even each fail with the values."""
    from disttutor.checks.claims.ch07 import check_balance, check_pipeline_run

    order = [[("F", 0, 0), ("B", 0, 0)], [("F", 0, 1), ("B", 0, 1)]]
    ok = [{"max_weight_diff": 1e-9, "stages": [0]}, {"max_weight_diff": 2e-9, "stages": [1], "losses": [1.0, 0.9],
                                                    "ref_losses": [1.0, 0.9]}]
    check_pipeline_run(ok, 1e-5, order, order, losses=True, stages=[[0], [1]])
    with pytest.raises(AssertionError, match="from one-process training"):
        check_pipeline_run([{**ok[0], "max_weight_diff": 1e-2}, ok[1]], 1e-5, order, order)
    with pytest.raises(AssertionError, match="losses"):
        check_pipeline_run([ok[0], {**ok[1], "losses": [1.0, 0.8]}], 1e-5, order, order, losses=True)
    with pytest.raises(AssertionError, match="stages per rank"):
        check_pipeline_run(ok, 1e-5, order, order, stages=[[1], [0]])
    with pytest.raises(AssertionError, match="rank 1 ran"):
        check_pipeline_run(ok, 1e-5, order, [order[0], list(reversed(order[1]))])
    runs = [{"runs": [{"max_weight_diff": 1e-9}, {"max_weight_diff": 3e-9}]}]
    check_balance([[6, 2], [4, 4]], runs, 1e-5, 4.1, 0.8)
    with pytest.raises(AssertionError, match="further"):
        check_balance([[6, 2], [4, 4]], runs, 1e-5, 1.2, 0.7)
    with pytest.raises(AssertionError, match="splits"):
        check_balance([[4, 4], [6, 2]], runs, 1e-5, 4.1, 0.8)
