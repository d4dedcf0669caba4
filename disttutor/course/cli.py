"""The ``disttutor`` command: ``disttutor doctor``, ``disttutor run PROGRAM -n N [-- args]``, ``grade``, ``export``."""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys

RUN_HELP = """\
Arguments after -- go to the program:  disttutor run hello -n 4 -- --size 8
A script of your own runs with the same safety nets: its init_process_group()
gets --collective-timeout unless it passes timeout= itself, and the whole job
is stopped after --timeout seconds."""


class _Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Every default shown in --help; the description's examples kept as written."""


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    from disttutor.launcher.launch import max_procs  # torch-free

    fmt = _Help
    p = argparse.ArgumentParser(prog="disttutor", description="PyTorch distributed training course tools")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("doctor", help="check torch, cores, GPUs, backends, and run a 2-rank all-reduce",
                       formatter_class=fmt)
    d.add_argument("-n", "--nproc", type=int, default=2, help="ranks of the test all-reduce")
    r = sub.add_parser("run", help="run a worker program under torchrun", description=RUN_HELP,
                       formatter_class=fmt)
    r.add_argument("program", help="a disttutor program name (hello, ddp, ...), a module, or a script path")
    r.add_argument("-n", "--nproc", type=int, default=2, help="ranks per node")
    r.add_argument("--nnodes", type=int, default=1, help="simulated nodes on this machine (c10d on loopback)")
    r.add_argument("--backend", default=None, choices=["auto", "gloo", "nccl"],
                   # "%(default).0s" prints nothing: it only stops argparse adding "(default: None)".
                   help="process-group backend (default: $DISTTUTOR_DEFAULT_BACKEND if set, else auto)%(default).0s")
    r.add_argument("--timeout", type=float, default=600.0, help="wall-clock limit for the whole job, seconds")
    r.add_argument("--collective-timeout", type=float, default=60.0,
                   help="how long one collective may wait for the other ranks, seconds")
    r.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS per rank")
    r.add_argument("--max-procs", type=int, default=None,
                   help=f"allow more ranks than this machine's limit (default: {max_procs()} here: 2 per CPU core, "
                        "at least 8)%(default).0s")
    sub.add_parser("grade", help="run the exercise checkers on learners' notebooks (see disttutor grade -h)",
                   add_help=False)
    sub.add_parser("export", help="write a classroom copy of the course without solutions/ (see disttutor export -h)",
                   add_help=False)
    return p, r


def hang_flags(program: str, program_args: list[str]) -> list[str]:
    """The program options in ``program_args`` that make a run hang on purpose.

    A program marks them in its config's help text with "(a hang)" (e.g. hello's
    ``--skip-rank``); a script of the learner's own has no such marks.
    """
    flags = [a.split("=", 1)[0] for a in program_args if a.startswith("--")]
    if not flags or program.endswith(".py") or "/" in program:
        return []
    try:
        mod = importlib.import_module(program if "." in program else f"disttutor.programs.{program}")
    except Exception:  # the launch itself will report a bad program
        return []
    marked = set()
    for obj in vars(mod).values():
        if isinstance(obj, type) and dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                if "(a hang)" in f.metadata.get("help", ""):
                    marked.add("--" + f.name.replace("_", "-"))
    return [f for f in flags if f in marked]


def main(argv: list[str] | None = None) -> int:
    p, run_parser = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["grade"]:  # the grader has its own options (disttutor/course/grade.py)
        from disttutor.course.grade import main as grade_main
        return grade_main(argv[1:])
    if argv[:1] == ["export"]:  # standard library only: no torch needed to hand out the course
        from disttutor.course.export import main as export_main
        return export_main(argv[1:])
    # Everything after "--" belongs to the program, so its options never clash with ours.
    cut = argv.index("--") if "--" in argv else len(argv)
    a, extra = p.parse_known_args(argv[:cut])
    program_args = argv[cut + 1:]
    if extra:
        where = f" -- {' '.join(extra)}" if a.cmd == "run" else ""
        (run_parser if a.cmd == "run" else p).error(f"unrecognized arguments: {' '.join(extra)}"
                + (f". Options for the program go after `--`: disttutor run {a.program} -n {a.nproc}{where}"
                   if a.cmd == "run" else ""))

    from disttutor import doctor, launch
    from disttutor.launcher.launch import TooManyProcesses
    from disttutor.launcher.results import LaunchError, LaunchInterrupted

    if a.cmd == "doctor":
        rep = doctor(nproc=a.nproc)
        print(rep)
        return 0 if rep.ok else 1
    hangs = hang_flags(a.program, program_args)
    if hangs:
        print(f"disttutor: {' '.join(hangs)} makes this run hang on purpose. It ends when a collective has "
              f"waited {a.collective_timeout:g}s (--collective-timeout), at the latest after {a.timeout:g}s "
              "(--timeout).", flush=True)
    try:
        res = launch(a.program, a.nproc, program_args, nnodes=a.nnodes, backend=a.backend, timeout=a.timeout,
                     collective_timeout=a.collective_timeout, threads=a.threads, max_procs_override=a.max_procs)
    except LaunchInterrupted as e:  # Ctrl-C: the tree is gone; say what each rank was doing
        print(f"disttutor: {e}", file=sys.stderr)
        return 130
    except LaunchError as e:
        print(f"disttutor: {e}", file=sys.stderr)
        return 1
    except TooManyProcesses as e:
        print(f"disttutor: error: {e.hint('--max-procs {count}')}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, FileNotFoundError) as e:  # bad input: one clear line, no traceback
        print(f"disttutor: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the job started
        print("disttutor: interrupted", file=sys.stderr)
        return 130
    print(res.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
