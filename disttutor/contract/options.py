"""A program's options come from its config dataclass, and from nowhere else.

Introduced in chapter 0's house style. Each worker program declares one frozen
dataclass; its fields (name, type, default, ``help`` metadata) *are* the
program's options. This module derives the command line from it (standard
library only), and turns a config back into command-line arguments for the
launcher, so every default is written once::

    @dataclass(frozen=True)
    class HelloConfig:
        size: int = opt(3, "elements per rank")
        skip_rank: int = opt(-1, "this rank never joins the all-reduce (a hang)")

        def __post_init__(self):
            require_positive(self, "size")

    def run(cfg: HelloConfig) -> None: ...

    main = cli(HelloConfig, run)          # python -m disttutor.programs.hello --size 4

    launch("hello", 2, HelloConfig(size=4))    # or args={"size": 4}: same flags

Field types understood: ``int``, ``float``, ``str``, ``bool`` (``--x/--no-x``),
``Literal[...]`` (choices), ``tuple[int, ...]`` / ``tuple[str, ...]`` (one or
more values), ``X | None`` of those (default ``None``), and a nested config
dataclass (``train: TrainConfig = field(default_factory=TrainConfig)``), whose
fields become flags of their own, unprefixed (a name used twice is an error),
so a program can reuse a shared loop's config without copying its fields.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import sys
import types
import typing
from typing import Any, Callable, Mapping, TypeVar

C = TypeVar("C")

__all__ = ["opt", "parser_for", "parse", "cli", "to_argv", "flag", "check_args"]


def opt(default: Any, help: str = "", **metadata: Any) -> Any:
    """A dataclass field with a default and a help text (shown by ``--help``)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple for a sequence default (configs are frozen and hashable)")
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


def flag(name: str) -> str:
    """``"skip_rank"`` -> ``"--skip-rank"``."""
    return "--" + name.replace("_", "-")


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _argument(f: dataclasses.Field, tp: Any) -> tuple[list[str], dict[str, Any]]:
    default = f.default if f.default is not dataclasses.MISSING else None
    required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        default = f.default_factory()  # type: ignore[misc]
    helptext = f.metadata.get("help", "")
    kw: dict[str, Any] = {"dest": f.name, "help": (helptext + " " if helptext else "") + "(default: %(default)s)"}
    if required:
        kw["required"] = True
        kw["help"] = helptext or None
    else:
        kw["default"] = default
    tp, _optional = _unwrap_optional(tp)
    origin = typing.get_origin(tp)
    if tp is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif origin is typing.Literal:
        choices = typing.get_args(tp)
        kw["choices"] = choices
        kw["type"] = type(choices[0])
    elif origin is tuple:
        args = typing.get_args(tp)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"{f.name}: only tuple[X, ...] is supported, got {tp}")
        kw["nargs"] = "+"
        kw["type"] = args[0]
        kw["_tuple"] = True
    elif tp in (int, float, str):
        kw["type"] = tp
    else:
        raise TypeError(f"{f.name}: option type {tp!r} is not supported on the command line")
    return [flag(f.name)], kw


class _Parser(argparse.ArgumentParser):
    """argparse that suggests the closest option for a misspelt one (and, for launch(), raises instead of exiting)."""

    raise_errors = False

    def error(self, message: str) -> typing.NoReturn:  # noqa: D401
        if "unrecognized arguments:" in message:
            known = [s for a in self._actions for s in a.option_strings if s.startswith("--")]
            bad = message.split("unrecognized arguments:", 1)[1].split()
            hints = []
            for b in bad:
                if b.startswith("-"):
                    close = difflib.get_close_matches(b.split("=", 1)[0], known, n=1)
                    if close:
                        hints.append(f"{b} -> did you mean {close[0]}?")
            if hints:
                message += " (" + "; ".join(hints) + ")"
        if self.raise_errors:
            raise ValueError(f"{self.prog}: {message}")
        super().error(message)


def parser_for(cls: type, prog: str | None = None, description: str | None = None) -> argparse.ArgumentParser:
    """The command line of config dataclass ``cls``: one ``--flag`` per field."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    # allow_abbrev=False: "--n" must not silently mean "--nproc-like" options.
    p = _Parser(prog=prog, description=description, allow_abbrev=False)
    tuples: list[str] = []
    _add_fields(p, cls, tuples, {})
    p.set_defaults(_tuple_fields=tuple(tuples))
    return p


def _fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    """The command-line fields of ``cls`` with their resolved types."""
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")]


def _nested(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _add_fields(p: argparse.ArgumentParser, cls: type, tuples: list[str], seen: dict[str, str],
                defaults: Any = None) -> None:
    for f, tp in _fields(cls):
        if f.name in seen:  # a nested config's field would shadow another one: two meanings, one flag
            raise TypeError(f"{cls.__name__}.{f.name}: flag {flag(f.name)} is already {seen[f.name]}'s")
        seen[f.name] = cls.__name__
        if _nested(tp):
            inner = getattr(defaults, f.name) if defaults is not None else _default(f)
            _add_fields(p, tp, tuples, seen, inner)
            continue
        flags, kw = _argument(f, tp)
        if defaults is not None:  # a nested config's default instance may differ from its class defaults
            kw["default"] = getattr(defaults, f.name)
            kw.pop("required", None)
        if kw.pop("_tuple", False):
            tuples.append(f.name)
        p.add_argument(*flags, **kw)


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    if f.default is dataclasses.MISSING:
        raise TypeError(f"nested config field {f.name!r} needs a default (default_factory=...)")
    return f.default


def _build(cls: type, ns: dict[str, Any]) -> Any:
    """``cls`` from the flat namespace, nested configs built (and validated) first."""
    kw = {}
    for f, tp in _fields(cls):
        kw[f.name] = _build(tp, ns) if _nested(tp) else ns[f.name]
    return cls(**kw)


def parse(cls: type[C], argv: list[str] | None = None, prog: str | None = None,
          description: str | None = None) -> C:
    """Parse ``argv`` into a ``cls`` instance; a value ``__post_init__`` rejects becomes a one-line error."""
    p = parser_for(cls, prog=prog, description=description)
    ns = vars(p.parse_args(argv))
    tuples = ns.pop("_tuple_fields")
    for name in tuples:
        if isinstance(ns[name], list):
            ns[name] = tuple(ns[name])
    try:
        return _build(cls, ns)
    except (ValueError, TypeError) as e:
        p.error(str(e))
        raise  # unreachable: error() exits


def check_args(module: str, args: Any) -> None:
    """Before any process starts: ``args`` must be options that program ``module`` knows, with valid values.

    Used by :func:`disttutor.launch` so that ``args={"sampels": 3}`` is a one-line
    ``ValueError`` with a suggestion in the notebook, not a usage message from every
    rank. Programs written with :func:`cli` are checked; anything else (a script,
    a program with its own parser, a list of strings) is left to the program.
    """
    if args is None or isinstance(args, (str, list, tuple)) or not module.startswith("disttutor."):
        return
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return
    cls = getattr(getattr(mod, "main", None), "config", None)
    if cls is None:
        return
    if dataclasses.is_dataclass(args) and not isinstance(args, type) and not isinstance(args, cls):
        raise TypeError(f"{module.rsplit('.', 1)[-1]} takes a {cls.__name__}, not a {type(args).__name__}")
    p = parser_for(cls, prog=module.rsplit(".", 1)[-1])
    p.raise_errors = True  # type: ignore[attr-defined]
    ns = vars(p.parse_args(to_argv(args)))
    for name in ns.pop("_tuple_fields"):
        if isinstance(ns[name], list):
            ns[name] = tuple(ns[name])
    try:
        _build(cls, ns)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{p.prog}: {e}") from None


def cli(cls: type[C], run: Callable[[C], Any], prog: str | None = None,
        description: str | None = None) -> Callable[[list[str] | None], Any]:
    """A program's ``main(argv=None)``: parse the command line into ``cls``, then ``run(cfg)``."""

    def main(argv: list[str] | None = None) -> Any:
        module = getattr(run, "__module__", None) or "__main__"
        mod = sys.modules.get(module)
        name = prog or (module.rsplit(".", 1)[-1] if module != "__main__" else None)
        desc = description or ((mod.__doc__ or "").strip().splitlines() or [""])[0] if mod else description
        cfg = parse(cls, argv, prog=name, description=desc)
        if getattr(run, "__module__", None) != "__main__":  # called from Python (a test, an RPC program's module)
            return run(cfg)
        # Run as a program (python -m ...): end through quick_exit, not interpreter finalisation.
        from disttutor.contract.procs import quick_exit

        try:
            run(cfg)
        except SystemExit as exc:
            quick_exit(exc.code)
        except Exception:  # its traceback, then exit 1, as Python does; KeyboardInterrupt keeps Python's way
            import traceback

            traceback.print_exc()
            quick_exit(1)
        quick_exit(0)

    main.__doc__ = f"Command line of {cls.__name__} (one --flag per field), then run()."
    main.config = cls  # type: ignore[attr-defined]  # lets tools (launch, tests) find a program's options
    return main


def to_argv(args: Any) -> list[str]:
    """Config instance, dict or list -> command-line arguments for the program.

    A config gives only the fields that differ from their defaults (short,
    readable command lines; a nested config's fields are flags of their own);
    a dict gives every key it has: ``True`` is ``--x``, ``False`` is ``--no-x``
    (every program's bools are ``--x/--no-x`` switches), ``None`` is left out.
    """
    if args is None:
        return []
    if isinstance(args, str):
        raise TypeError("args must be a config, a dict of options or a list of strings, not a single string")
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        return _items_to_argv(_changed(args))
    if isinstance(args, Mapping):
        return _items_to_argv(args.items())
    return [str(a) for a in args]


def _changed(cfg: Any, ref: Any = None) -> list[tuple[str, Any]]:
    """(name, value) of the fields that differ from what the parser would default to."""
    items = []
    for f, tp in _fields(type(cfg)):
        v = getattr(cfg, f.name)
        if _nested(tp):
            items += _changed(v, getattr(ref, f.name) if ref is not None else _default(f))
            continue
        default = getattr(ref, f.name) if ref is not None else f.default
        if default is dataclasses.MISSING or v != default:
            items.append((f.name, v))
    return items


def _items_to_argv(items: Any) -> list[str]:
    argv: list[str] = []
    for k, v in items:
        name = flag(str(k))
        if v is True:
            argv.append(name)
        elif v is False:
            argv.append("--no-" + name[2:])
        elif v is None:
            continue
        elif isinstance(v, (list, tuple)):
            argv += [name, *map(str, v)]
        else:
            argv += [name, str(v)]
    return argv
