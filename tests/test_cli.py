"""`disttutor run` and `disttutor doctor` from a terminal: exit codes and one-line errors."""
from __future__ import annotations

import pytest

from disttutor.course import cli


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


def test_help_shows_every_default(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for words in ("ranks per node (default: 2)", "seconds (default: 600.0)", "(default: 60.0)",
                  "(default: $DISTTUTOR_DEFAULT_BACKEND if set, else auto)", "OMP_NUM_THREADS per rank (default: 1)"):
        assert words in out
    assert "(default: None)" not in out


def test_cli_collective_timeout_default_is_the_runtimes():
    from disttutor.contract import DEFAULT_COLLECTIVE_TIMEOUT_S

    run = cli._parser()[1]
    assert run.get_default("collective_timeout") == DEFAULT_COLLECTIVE_TIMEOUT_S


def test_too_many_ranks_names_the_cli_option(capsys):
    assert cli.main(["run", "hello", "-n", "64"]) == 2
    err = capsys.readouterr().err
    assert "--max-procs 64" in err and "max_procs_override" not in err


def test_program_option_before_dashdash_says_where_it_goes(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "hello", "-n", "2", "--size", "8"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --size 8" in err
    assert "Options for the program go after `--`: disttutor run hello -n 2 -- --size 8" in err


def test_hang_demo_is_announced():
    assert cli.hang_flags("hello", ["--skip-rank", "1"]) == ["--skip-rank"]
    assert cli.hang_flags("hello", ["--size", "3"]) == []
    assert cli.hang_flags("mine.py", ["--skip-rank", "1"]) == []  # a learner's script carries no marks


@pytest.mark.timeout(300)
def test_user_script_gets_the_collective_timeout(tmp_path, capsys, no_leftovers):
    """A script calling init_process_group() itself ends after --collective-timeout, not gloo's 30 min."""
    import time

    script = tmp_path / "hang.py"
    script.write_text(
        "import sys, time, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "print('argv', sys.argv[1:], 'main', __name__, flush=True)\n"
        "if dist.get_rank() == 0:\n"
        "    dist.all_reduce(torch.ones(1))\n"
        "else:\n"
        "    time.sleep(600)\n")
    t0 = time.perf_counter()
    rc = cli.main(["run", str(script), "-n", "2", "--collective-timeout", "5", "--timeout", "200",
                   "--", "--x", "1"])
    wall = time.perf_counter() - t0
    out, err = capsys.readouterr()
    assert rc == 1
    assert "[rank 0] argv ['--x', '1'] main __main__" in out  # the script's semantics are unchanged
    assert "Timed out waiting 5000ms" in out  # gloo's own message: the 5 s reached the process group
    assert "rank 0: error -- RuntimeError: Timed out waiting 5000ms" in err and ".cc:" not in err
    assert "rank 1: stopped" in err
    # Startup on a loaded 2-core machine (up to ~60 s) + 5 s, far below the 200 s wall limit.
    assert wall < 150
