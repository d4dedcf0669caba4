"""Failure summaries a learner can read (chapter 0; issue 8 item 6, issue 16 item 5).

Pure data: RunResults are built by hand here (what collect() builds from a
real job is covered by tests/test_launch.py), so these run in milliseconds.
"""
from __future__ import annotations

import pytest

from disttutor.launcher.collect import rank_status
from disttutor.contract.errors import readable_error
from disttutor.launcher.results import LaunchError, RankResult, RunResult
from disttutor.launcher.stream import Display, short_paths

GLOO_RAW = ("another rank died in the middle of a collective -- RuntimeError: [/__w/pytorch/pytorch/third_party/"
            "gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:6040: Connection reset by peer. This is "
            "typically caused by a remote worker hanging or bugs in the application. Check the logs of the remote "
            "worker before reporting an error. GLHF! \U0001f3d6\ufe0f")


def _result(ranks, outcome="finished", agent_log=()):
    return RunResult("hello", len(ranks), 1, 1 if outcome == "finished" else -15, 1.0, ranks, list(agent_log),
                     "run", outcome)


def test_gloo_error_is_one_readable_line_and_raw_text_is_kept():
    line = readable_error(GLOO_RAW)
    assert line == ("another rank died in the middle of a collective -- RuntimeError: Read error "
                    "[127.0.0.1]:6040: Connection reset by peer.")
    r = RankResult(0, "error", line, {}, ["Traceback ...", GLOO_RAW], raw_error=GLOO_RAW, blame="peer")
    summary = _result([r, RankResult(1, "ok", None, {}, [])]).summary()
    assert "GLHF" not in summary and ".cc:" not in summary  # the C++ noise stays in raw_error / the log
    assert summary.count("Read error") == 1  # once, not again in the last lines
    assert r.raw_error == GLOO_RAW


def test_crashed_rank_is_named_before_the_rank_it_broke():
    victim = RankResult(0, "error", readable_error(GLOO_RAW), {}, ["before"], raw_error=GLOO_RAW, blame="peer")
    culprit = RankResult(1, "error", "died with exit code 3 before reporting", {}, ["crashing on purpose"],
                         evidence="exit")
    res = _result([victim, culprit])
    summary = res.summary()
    assert summary.index("rank 1: error -- died with exit code 3") < summary.index("rank 0: error")
    assert "| crashing on purpose" in summary  # a rank that said nothing: its last words are shown
    assert res.headline() == "error: rank 1; failed because another rank died: rank 0"
    assert str(LaunchError(res, "failed")).startswith(
        "hello failed (error: rank 1; failed because another rank died: rank 0)")


def test_every_rank_failing_argparse_says_so_once():
    line = "hello.py: error: unrecognized arguments: --bogus 1"
    ranks = [RankResult(r, "error", line, {}, ["usage: hello.py [-h]", line], raw_error=line, blame="self",
                        evidence="log") for r in range(2)]
    res = _result(ranks)
    assert res.headline() == f"every rank rejected the program's arguments -- {line}"
    assert "stopped" not in str(LaunchError(res, "failed"))
    assert res.summary().count(line) == 1 and "ranks 0, 1: error" in res.summary()


def test_rank_stopped_while_printing_its_argparse_error_counts_as_that_error():
    log = ["usage: hello.py [-h] [--size SIZE]", "hello.py: error: unrecognized arguments: --bogus 1"]
    status, error, evidence = rank_status(None, -15, "finished", True, log)
    assert (status, evidence) == ("error", "log") and error == log[-1]
    # ...whereas a rank stopped mid-work is a victim, with its last lines as evidence.
    assert rank_status(None, -15, "finished", True, ["step 3"])[0] == "stopped"


@pytest.mark.parametrize("outcome", ["timeout", "interrupted"])
def test_timeout_and_interrupt_summaries_have_no_empty_torchrun_heading(outcome):
    status, error, _ = rank_status(None, None, outcome, False, ["step 1"])
    res = _result([RankResult(0, status, error, {}, ["step 1"], evidence="launcher")], outcome,
                  agent_log=["W1130 Sending process 12 closing signal SIGTERM"])
    assert "torchrun said" not in res.summary()
    assert "cell" not in res.summary()  # a terminal's Ctrl-C is not a cell


def test_torchrun_heading_only_with_something_under_it():
    res = _result([RankResult(0, "stopped", "x", {}, [], evidence="launcher")],
                  agent_log=["torchrun: error: argument --nnodes: invalid"])
    assert "  torchrun said:\n      | torchrun: error: argument --nnodes: invalid" in res.summary()
    res = _result([RankResult(0, "stopped", "x", {}, [], evidence="launcher")], agent_log=["nothing here"])
    assert "torchrun said" not in res.summary()


def test_repeated_warnings_are_shown_once_with_a_count(capsys):
    d = Display(True)
    for rank in range(4):
        d.line(f"rank {rank}", "/x/site.py:12: FutureWarning: old API")
        d.line(f"rank {rank}", "  old_api()")
        d.line(f"rank {rank}", f"loss {rank}")
    d.close()
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["[rank 0] /x/site.py:12: FutureWarning: old API", "[rank 0]   old_api()", "[rank 0] loss 0"]
    assert [ln for ln in out if "loss" in ln] == [f"[rank {r}] loss {r}" for r in range(4)]  # nothing else dropped
    assert sum("FutureWarning" in ln for ln in out) == 2  # the first one, and the count line
    assert "x4: FutureWarning: old API" in out[-1] and "3 repeated warning line(s)" in out[-2]


def test_paths_of_this_machine_are_shown_relative():
    import os

    import disttutor

    pkg = os.path.dirname(disttutor.__file__)
    line = f'  File "{pkg}/programs/hello.py", line 51, in run'
    assert short_paths(line) == '  File "disttutor/programs/hello.py", line 51, in run'
    import torch  # noqa: F401  (only to find where site-packages is)

    torch_file = os.path.join(os.path.dirname(torch.__file__), "distributed", "distributed_c10d.py")
    assert short_paths(torch_file) == "site-packages/torch/distributed/distributed_c10d.py"


def test_readable_error_names_the_cause_under_an_rpc_header():
    from disttutor.contract.errors import readable_error

    raw = ("TypeError: On WorkerInfo(id=3, name=worker3):\nTraceback (most recent call last):\n  File \"x.py\"\n"
           "TypeError: embedding(): argument 'indices' (position 1) must be Tensor, not PyRRef\n")
    line = readable_error(raw)
    assert line.startswith("TypeError: On WorkerInfo(id=3, name=worker3):") and line.endswith("not PyRRef")
    assert "\n" not in line
