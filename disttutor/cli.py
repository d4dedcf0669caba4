"""The ``disttutor`` command: ``disttutor doctor`` and ``disttutor run PROGRAM -n N [-- args]``."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="disttutor", description="PyTorch distributed training course tools")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("doctor", help="check torch, cores, GPUs, backends, and run a 2-rank all-reduce")
    d.add_argument("-n", "--nproc", type=int, default=2)
    r = sub.add_parser("run", help="run a worker program under torchrun",
                       description="Arguments after -- go to the program: disttutor run hello -n 4 -- --size 8")
    r.add_argument("program", help="a disttutor program name (hello, ddp, ...), a module, or a script path")
    r.add_argument("-n", "--nproc", type=int, default=2, help="ranks per node")
    r.add_argument("--nnodes", type=int, default=1, help="simulated nodes on this machine (c10d on loopback)")
    r.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    r.add_argument("--timeout", type=float, default=600.0, help="wall-clock limit in seconds")
    r.add_argument("--collective-timeout", type=float, default=None, help="limit for one collective, seconds")
    r.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS per rank")
    sub.add_parser("grade", help="run the exercise checkers on learners' notebooks (see disttutor grade -h)",
                   add_help=False)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["grade"]:  # the grader has its own options (disttutor/grade.py)
        from .grade import main as grade_main
        return grade_main(argv[1:])
    # Everything after "--" belongs to the program, so its options never clash with ours.
    cut = argv.index("--") if "--" in argv else len(argv)
    a = p.parse_args(argv[:cut])
    program_args = argv[cut + 1:]

    from . import doctor, launch
    from .results import LaunchError

    if a.cmd == "doctor":
        rep = doctor(nproc=a.nproc)
        print(rep)
        return 0 if rep.ok else 1
    try:
        res = launch(a.program, a.nproc, program_args, nnodes=a.nnodes, backend=a.backend, timeout=a.timeout,
                     collective_timeout=a.collective_timeout, threads=a.threads)
    except LaunchError as e:
        print(f"disttutor: {e}", file=sys.stderr)
        return 1
    except (ValueError, TypeError, FileNotFoundError) as e:  # bad input: one clear line, no traceback
        print(f"disttutor: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    print(res.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
