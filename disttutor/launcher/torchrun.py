"""torchrun, with its TCP stores listening on loopback only, no option abbreviations,
and no life after the kernel's death (chapter 0).

torch's ``TCPStore`` server listens on every interface, so a one-machine
``torchrun --rdzv-endpoint=127.0.0.1:PORT`` still opens ports to the network.
The stores accept an already-listening socket (``master_listen_fd``); this
wrapper hands them one bound to 127.0.0.1, then runs torchrun unchanged.
:func:`disttutor.launch` uses it for every job on this machine.

If the kernel that launched the job dies (SIGKILL, OOM), ``PR_SET_PDEATHSIG``
sends this agent SIGTERM and torchrun starts its own shutdown -- which can
hang for ever at interpreter exit, joining ``--tee``'s log-tailing threads.
So a watchdog thread also notices the new parent and SIGKILLs the ranks and
the agent itself, whatever torchrun's shutdown is doing.
"""
from __future__ import annotations

import os
import socket

# Imported now, not when needed: the watchdog may run while the interpreter is shutting down.
import psutil  # noqa: F401  (used by procs.kill_descendants_and_exit)
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend
from torch.distributed.run import get_args_parser, run

from disttutor import contract
from disttutor.contract.procs import kill_descendants_and_exit, watch_parent

_TCPStore = dist.TCPStore


class LoopbackTCPStore(_TCPStore):
    def __init__(self, host_name, port, world_size=None, is_master=False, *args, **kwargs):
        if is_master and kwargs.get("master_listen_fd") is None and not args[3:4]:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", int(port)))
            except OSError as e:
                sock.close()
                # torch's rendezvous retries as a client on RuntimeError (another
                # agent on this machine already hosts the store): keep that contract.
                raise RuntimeError(f"port {port} is taken: {e}") from e
            sock.listen(128)
            port = sock.getsockname()[1]
            kwargs["master_listen_fd"] = sock.detach()  # the store owns the socket now
            host_name = "127.0.0.1"
        super().__init__(host_name, port, world_size, is_master, *args, **kwargs)


def _follow_launcher() -> None:
    """End the whole job as soon as the launcher (the kernel) is gone."""
    launcher = int(os.environ.get(contract.ENV_LAUNCHER_PID) or os.getppid())
    if os.getppid() != launcher:  # it died before we got here: no job at all
        os._exit(1)
    watch_parent(launcher, kill_descendants_and_exit)
    # The ranks inherit this environment: they check their own parent against it.
    os.environ[contract.ENV_AGENT_PID] = str(os.getpid())


@record
def main() -> None:
    _follow_launcher()
    dist.TCPStore = LoopbackTCPStore
    c10d_rendezvous_backend.TCPStore = LoopbackTCPStore
    parser = get_args_parser()
    # Without this, a program flag such as `--n 5` is read as an ambiguous
    # abbreviation of torchrun's own --nnodes/--nproc-per-node and the job dies
    # before the program starts. Program arguments are the program's business.
    parser.allow_abbrev = False
    run(parser.parse_args())


if __name__ == "__main__":
    main()
