"""The channel between the kernel and live ranks: loopback, authenticated, explicit pickles.

Why each piece:

* The kernel listens on ``127.0.0.1`` with a port from the OS: nothing on the
  network can reach a live rank's ``exec``.
* Every connection proves it knows the pool's secret (``secrets.token_bytes``)
  with the HMAC challenge of :mod:`multiprocessing.connection`, in *both*
  directions, before a single message is unpickled: a peer without the secret
  is refused, and a worker never unpickles data from an unauthenticated peer.
* Messages are ``pickle.dumps`` bytes sent with ``send_bytes``, never
  ``Connection.send``: torch registers shared-memory reducers with
  multiprocessing's pickler, and those file-descriptor handles mean nothing
  across a socket.
* The secret reaches the ranks in a 0600 file inside a 0700 directory, not on
  a command line other users could read with ``ps``.
"""
from __future__ import annotations

import os
import pickle
import socket
import struct
from multiprocessing.connection import (AuthenticationError, Client, Connection, answer_challenge,
                                        deliver_challenge)
from typing import Any

ENV_ADDR = "DISTTUTOR_LIVE_ADDR"        # host:port the ranks connect to
ENV_KEYFILE = "DISTTUTOR_LIVE_KEYFILE"  # file holding the pool's secret (mode 0600)
ENV_STACKS = "DISTTUTOR_LIVE_STACKS"    # directory for faulthandler stack dumps
STACK_SIGNAL = "SIGUSR1"                # the kernel asks a rank for its Python stacks with this

__all__ = ["AuthenticationError", "accept", "connect", "send", "recv", "write_key", "read_key",
           "stack_path"]


def write_key(directory: str, key: bytes) -> str:
    path = os.path.join(directory, "live.key")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return path


def read_key(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def stack_path(directory: str, rank: int) -> str:
    return os.path.join(directory, f"stack{int(rank)}.txt")


def listen() -> socket.socket:
    """A listening socket on loopback, port chosen by the OS."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


def _recv_timeout(sock: socket.socket, seconds: float) -> None:
    # Connection reads the raw fd, ignoring Python socket timeouts; SO_RCVTIMEO
    # bounds the handshake so a silent peer cannot hold the kernel.
    sec = int(seconds)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", sec, int((seconds - sec) * 1e6)))


def accept(server: socket.socket, key: bytes, timeout: float, handshake_s: float = 5.0) -> Connection:
    """One authenticated connection, or an exception.

    Raises ``socket.timeout`` when nobody connects within ``timeout`` seconds,
    :class:`AuthenticationError` (or ``OSError``/``EOFError``) when the peer
    fails the challenge; the caller keeps listening in that case.
    """
    server.settimeout(timeout)
    sock, _ = server.accept()
    sock.settimeout(None)
    _recv_timeout(sock, handshake_s)
    conn = Connection(sock.detach())
    try:
        deliver_challenge(conn, key)   # the peer proves it knows the secret ...
        answer_challenge(conn, key)    # ... and so do we
    except BaseException:
        conn.close()
        raise
    s = socket.socket(fileno=os.dup(conn.fileno()))
    _recv_timeout(s, 0)                # back to blocking reads for the session
    s.close()
    return conn


def connect(addr: str, key: bytes) -> Connection:
    host, port = addr.rsplit(":", 1)
    return Client((host, int(port)), authkey=key)  # mutual challenge, see multiprocessing.connection


def send(conn: Connection, *msg: Any) -> None:
    conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))


def recv(conn: Connection) -> tuple:
    return pickle.loads(conn.recv_bytes())
