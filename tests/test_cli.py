"""`disttutor run` and `disttutor doctor` from a terminal: exit codes and one-line errors."""
from __future__ import annotations

import pytest

from disttutor import cli


def test_run_hello(capsys, no_leftovers):
    assert cli.main(["run", "hello", "-n", "2", "--", "--size", "2"]) == 0
    out = capsys.readouterr().out
    assert "[rank 0] after all_reduce: [3.0, 3.0]" in out and "rank 1: ok" in out


@pytest.mark.parametrize("argv, words", [
    (["run", "hello", "-n", "0"], "nproc must be at least 1"),
    (["run", "nope", "-n", "2"], "program 'nope'"),
])
def test_run_bad_input_is_one_clear_line(capsys, argv, words):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("disttutor: error:") and words in err and "Traceback" not in err


def test_failed_program_exits_1_naming_the_rank(capsys, no_leftovers):
    assert cli.main(["run", "hello", "-n", "2", "--", "--crash-rank", "1"]) == 1
    assert "rank 1: error -- died with exit code 3" in capsys.readouterr().err


def test_doctor(capsys, no_leftovers):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "backends built" in out and "check: 2-rank all-reduce            ok" in out
