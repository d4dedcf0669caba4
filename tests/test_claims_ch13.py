"""Chapter 13's named check on the published Llama 3 layouts accepts the stored runs and rejects wrong ones, in words."""
import dataclasses

import pytest

from disttutor.checks.claims.ch13 import check_llama_layouts
from disttutor.scale import published

LLAMA = [r for r in published.RUNS if r.source == published.LLAMA3]
GPUS = [8192, 16384, 16384]  # reported: Table 4's GPU counts
TOKENS = 16 * 2**20  # reported: "16M" tokens per batch
PRINTED = 8 * 16 * 16 * 4  # the 131K row's layout as Table 4 prints it


def test_the_stored_runs_pass():
    assert check_llama_layouts(LLAMA, GPUS, TOKENS, PRINTED).startswith("layouts multiply to the reported GPU counts")


def test_a_wrong_gpu_count_is_named():
    with pytest.raises(AssertionError, match=r"the paper reports \[8192, 16384, 8192\]"):
        check_llama_layouts(LLAMA, [8192, 16384, 8192], TOKENS, PRINTED)


def test_a_row_with_another_batch_is_named():
    half = dataclasses.replace(LLAMA[1], global_batch=LLAMA[1].global_batch // 2)
    with pytest.raises(AssertionError, match="tokens per batch"):
        check_llama_layouts([LLAMA[0], half, LLAMA[2]], GPUS, TOKENS, PRINTED)


def test_the_printed_layout_taken_as_is_is_rejected():
    # the 131K row with the printed DP 4: its layout gives 8,192 GPUs, not the reported 16,384
    printed = dataclasses.replace(LLAMA[2], layout=dataclasses.replace(LLAMA[2].layout, dp=4))
    with pytest.raises(AssertionError):
        check_llama_layouts([LLAMA[0], LLAMA[1], printed], GPUS, TOKENS, PRINTED)


def _rows(*ratios, missing=""):
    return [{"run": f"run {i}", "predicted/measured": r, "missing term (if not)": missing} for i, r in enumerate(ratios)]


def test_the_local_model_is_asserted_only_on_a_quiet_machine():
    from disttutor.checks.claims.ch13 import check_local_model
    before = _rows(0.6, 0.5)
    got = check_local_model(before, _rows(0.9, 1.2), True, "load 0.1")
    assert got == "checked: predicted/measured 0.50-0.60 -> 0.90-1.20, 2 of 2 within 25% (load 0.1)"
    # a run outside 25 % fails on a quiet machine, named term or not
    with pytest.raises(AssertionError, match=r"outside 25%: \{'run 1': 0\.6\}"):
        check_local_model(before, _rows(0.9, 0.6, missing="GELU"), True, "load 0.1")
    with pytest.raises(AssertionError, match=r"outside 25%: \{'run 0': 1\.5\}"):
        check_local_model(before, _rows(1.5, 0.9, missing="x"), True, "load 0.1")
    # a miss with no candidate named fails on any machine
    with pytest.raises(AssertionError, match=r"run 1.*no missing term"):
        check_local_model(before, _rows(0.9, 0.6), False, "load 6.0")
    # busy: the same miss is reported with the load that explains it, not asserted
    got = check_local_model(before, _rows(1.5, 0.6, missing="x"), False, "load 6.0")
    assert got == "predicted/measured 0.50-0.60 -> 0.60-1.50, 0 of 2 within 25%, on a busy machine (load 6.0): reported, not checked"
