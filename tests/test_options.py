"""disttutor.contract.options: a program's command line derived from its config dataclass (no processes started)."""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Literal

import pytest

import disttutor.programs
from disttutor.contract.config import require_positive
from disttutor.contract.options import cli, flag, opt, parse, parser_for, to_argv


@dataclass(frozen=True)
class Inner:
    samples: int = opt(8, "dataset size")
    hidden: tuple[int, ...] = opt((4, 4), "widths")


@dataclass(frozen=True)
class Demo:
    steps: int = opt(3, "steps")
    lr: float = opt(0.5, "learning rate")
    name: str = opt("x", "a name")
    mode: Literal["a", "b"] = opt("a", "a choice")
    verbose: bool = opt(False, "a switch")
    check: bool = opt(True, "a switch on by default")
    sizes: tuple[int, ...] = opt((), "several numbers")
    limit: int | None = opt(None, "optional")
    inner: Inner = field(default_factory=Inner)

    def __post_init__(self):
        require_positive(self, "steps")


@dataclass(frozen=True)
class Needs:
    path: str  # no default: a required option


def test_types_are_converted():
    cfg = parse(Demo, ["--steps", "7", "--lr", "0.25", "--name", "y", "--mode", "b", "--sizes", "2", "3",
                       "--limit", "4"])
    assert cfg.steps == 7 and cfg.lr == 0.25 and cfg.name == "y" and cfg.mode == "b"
    assert cfg.sizes == (2, 3) and isinstance(cfg.sizes, tuple)  # a tuple, so the config stays hashable
    assert cfg.limit == 4
    assert parse(Demo, []) == Demo()  # every default comes from the dataclass


def test_bools_are_x_and_no_x():
    assert parse(Demo, ["--verbose"]).verbose is True
    assert parse(Demo, ["--no-check"]).check is False
    assert parse(Demo, ["--no-verbose", "--check"]) == Demo()


def test_literal_choices_are_enforced(capsys):
    with pytest.raises(SystemExit):
        parse(Demo, ["--mode", "c"])
    assert "invalid choice: 'c'" in capsys.readouterr().err


def test_required_field(capsys):
    assert parse(Needs, ["--path", "p"]) == Needs("p")
    with pytest.raises(SystemExit):
        parse(Needs, [])
    assert "--path" in capsys.readouterr().err


def test_misspelt_option_gets_a_suggestion(capsys):
    with pytest.raises(SystemExit):
        parse(Demo, ["--setps", "3"])
    assert "did you mean --steps?" in capsys.readouterr().err


def test_abbreviations_are_not_guessed(capsys):
    with pytest.raises(SystemExit):  # allow_abbrev=False: "--ste" is an error, not a silent --steps
        parse(Demo, ["--ste", "3"])
    assert "unrecognized arguments" in capsys.readouterr().err


def test_post_init_rejection_is_one_usage_line(capsys):
    with pytest.raises(SystemExit):
        parse(Demo, ["--steps", "0"])
    assert "steps must be >= 1, got 0" in capsys.readouterr().err


def test_nested_config_fields_are_flags_of_their_own():
    cfg = parse(Demo, ["--samples", "16", "--hidden", "5"])
    assert cfg.inner == Inner(samples=16, hidden=(5,))
    assert to_argv(cfg) == ["--samples", "16", "--hidden", "5"]


def test_a_flag_used_twice_is_an_error():
    @dataclass(frozen=True)
    class Clash:
        samples: int = opt(1)
        inner: Inner = field(default_factory=Inner)

    with pytest.raises(TypeError, match="--samples"):
        parser_for(Clash)


def test_to_argv_from_config_dict_and_list():
    assert to_argv(Demo()) == []  # only what differs from the defaults
    assert to_argv(Demo(verbose=True, check=False, sizes=(1, 2))) == ["--verbose", "--no-check", "--sizes", "1", "2"]
    # A dict gives every key; False is the --no-x switch (every program's bools are --x/--no-x).
    assert to_argv({"skip_rank": 1, "join": True, "set_epoch": False, "limit": None}) == \
        ["--skip-rank", "1", "--join", "--no-set-epoch"]
    assert to_argv(["--a", 1]) == ["--a", "1"]
    assert to_argv(None) == []
    with pytest.raises(TypeError, match="not a single string"):
        to_argv("--steps 3")
    assert flag("layers_per_stage") == "--layers-per-stage"


def test_opt_refuses_a_mutable_default():
    with pytest.raises(TypeError, match="tuple"):
        opt([1, 2])


def test_cli_runs_with_the_parsed_config():
    seen = []
    main = cli(Demo, seen.append)
    main(["--steps", "2"])
    assert seen == [Demo(steps=2)]


def _program_configs():
    """(program, config class, main) of every worker program in disttutor.programs."""
    out = []
    for m in pkgutil.iter_modules(disttutor.programs.__path__):
        mod = importlib.import_module(f"disttutor.programs.{m.name}")
        main = getattr(mod, "main", None)
        cls = getattr(main, "config", None)
        out.append(pytest.param(m.name, cls, id=m.name))
    return out


def _non_default(cls):
    """A valid config that differs from the defaults in one field (a bool flipped, else a number raised)."""
    d = cls()
    for f in dataclasses.fields(cls):
        v = getattr(d, f.name)
        if isinstance(v, bool):
            return dataclasses.replace(d, **{f.name: not v})
    for f in dataclasses.fields(cls):
        v = getattr(d, f.name)
        if isinstance(v, int):
            try:
                return dataclasses.replace(d, **{f.name: v + 1})
            except ValueError:  # e.g. a width that must divide another: try the next field
                continue
    raise AssertionError(f"{cls.__name__}: no field to vary")


@pytest.mark.parametrize("program,cls", _program_configs())
def test_every_program_uses_the_options_pattern_and_round_trips(program, cls):
    # main = cli(Config, run): the config class is the program's single description of its options.
    assert cls is not None, f"programs/{program}.py: main must be cli(Config, run)"
    for cfg in (cls(), _non_default(cls)):
        assert parse(cls, to_argv(cfg)) == cfg
    assert "--help" in parser_for(cls).format_help()


def test_launch_args_are_checked_before_any_process_starts():
    from disttutor.contract.options import check_args

    check_args("disttutor.programs.ddp", {"samples": 64, "set_epoch": False})  # fine: no error
    check_args("disttutor.programs.ddp", {"no_set_epoch": True})  # the switch's other spelling is a flag too
    with pytest.raises(ValueError, match="did you mean --samples"):
        check_args("disttutor.programs.ddp", {"sampels": 64})
    with pytest.raises(ValueError, match="epochs must be >= 1"):
        check_args("disttutor.programs.ddp", {"epochs": 0})
    with pytest.raises(ValueError, match="invalid choice"):
        check_args("disttutor.programs.pipeline", {"schedule": "pipedream"})
    with pytest.raises(TypeError, match="takes a DDPConfig"):
        from disttutor.programs.hello import HelloConfig
        check_args("disttutor.programs.ddp", HelloConfig())
    check_args("disttutor.live.worker", {"anything": 1})  # not a cli() program: left to the program
    with pytest.raises(ValueError, match="unrecognized arguments: --anything"):  # checkers are cli() programs too
        check_args("disttutor.checks.ddp", {"anything": 1})
    check_args("disttutor.programs.ddp", ["--whatever"])  # a list is passed through as it is


def test_launch_rejects_a_misspelt_option_without_starting_processes():
    import disttutor

    with pytest.raises(ValueError, match="did you mean --skip-rank"):
        disttutor.launch("hello", 2, {"skip_rnak": 1}, timeout=5, stream=False)


def test_contributing_template_is_true():
    """CONTRIBUTING.md's program template runs as written and agrees with hello.py, which it abridges."""
    import pathlib
    import re
    import sys
    import types

    from disttutor.programs import hello

    text = (pathlib.Path(__file__).parents[1] / "CONTRIBUTING.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    mod = types.ModuleType("contributing_template")
    sys.modules[mod.__name__] = mod  # dataclasses resolve the (string) annotations through sys.modules
    try:
        exec(compile(block.replace('if __name__ == "__main__"', "if False"), "CONTRIBUTING.md", "exec"),
             mod.__dict__)
    finally:
        del sys.modules[mod.__name__]
    assert mod.main.config is mod.HelloConfig
    assert parse(mod.HelloConfig, ["--size", "4"]).size == 4
    real = {f.name: f.default for f in dataclasses.fields(hello.HelloConfig)}
    for f in dataclasses.fields(mod.HelloConfig):
        assert real[f.name] == f.default, f.name


def test_a_program_run_as_main_ends_without_interpreter_finalisation(tmp_path):
    """``python -m disttutor.programs.X`` ends through procs.quick_exit after run(): atexit handlers run,
    the exit code is kept, the interpreter's finalisation (where DDP's gloo objects aborted ranks) is not."""
    import subprocess
    import sys

    prog = tmp_path / "prog.py"
    prog.write_text(
        "import atexit\n"
        "from dataclasses import dataclass\n"
        "from disttutor.contract.options import cli, opt\n"
        "class Finaliser:\n"
        "    def __del__(self):\n"
        "        print('finalised', flush=True)\n"
        "KEEP = Finaliser()\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "@dataclass(frozen=True)\n"
        "class Cfg:\n"
        "    fail: bool = opt(False, 'raise in run')\n"
        "def run(cfg):\n"
        "    print('run done', flush=True)\n"
        "    if cfg.fail:\n"
        "        raise ValueError('boom')\n"
        "main = cli(Cfg, run)\n"
        "if __name__ == '__main__':\n"
        "    main()\n")
    ok = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.splitlines() == ["run done", "atexit ran"], (ok.stdout, ok.stderr)
    bad = subprocess.run([sys.executable, str(prog), "--fail"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "ValueError: boom" in bad.stderr and "finalised" not in bad.stdout
