"""Live ranks (disttutor.live): results against a single-process reference, stuck cells,
errors, pull/push limits, and the authenticated channel.

One 2-rank pool serves the module (start-up is the expensive part on a shared
2-core machine); the stuck-collective test restarts it, and the tests after it
check that the restarted pool works.
"""
from __future__ import annotations

import os
import pickle
import socket
import threading
from multiprocessing.connection import AuthenticationError, Client

import pytest
import torch

from disttutor.live import LiveError, Ranks, protocol
from disttutor.live.report import CellResult, Frame, parse_stack, where

pytestmark = pytest.mark.timeout(400)  # pool start-up alone can take a minute on the loaded machine


@pytest.fixture(scope="module")
def pool():
    with Ranks(2, timeout=20) as r:
        yield r
    assert not r.alive


def test_all_reduce_matches_single_process_reference(pool):
    res = pool.run("t = torch.arange(3.) + rank\ndist.all_reduce(t)\nprint('rank', rank, 'done')\nt")
    assert res.ok, res.text()
    ref = sum(torch.arange(3.) + r for r in range(2))  # the same sum, computed in one process
    got = pool.pull("t")
    assert len(got) == 2
    for t in got:  # exact: small integers in float32, any summation order gives the same bits
        assert torch.equal(t, ref)
    # output grouped by rank, in rank order, REPL-like last value
    assert res.text().splitlines() == [
        "[rank 0] rank 0 done", f"[rank 0] Out: {ref!r}", "[rank 1] rank 1 done", f"[rank 1] Out: {ref!r}"]


def test_namespace_persists_and_subset(pool):
    assert pool.run("x = rank * 10").ok
    res = pool.run("x + 1", ranks=[1])
    assert res.ranks == [1] and res.values == {1: "11"}
    assert pool.pull("x", ranks=[0]) == {0: 0}
    with pytest.raises(ValueError, match="no rank 5"):
        pool.run("1", ranks=[5])


def test_push_and_status(pool):
    pool.push("w", {"lr": 0.1})
    assert pool.run("w['lr'] * (rank + 1)").values == {0: "0.1", 1: "0.2"}
    rows = pool.status()
    assert [row["rank"] for row in rows] == [0, 1]
    assert rows[0]["backend"] == "gloo" and rows[0]["device"] == "cpu"
    assert rows[1]["names"]["w"] == "dict" and rows[0]["pid"] != rows[1]["pid"]


def test_exception_on_one_rank_is_trimmed_to_the_cell(pool):
    res = pool.run("y = 1\nif rank == 1:\n    raise ValueError('bad input on rank 1')\ny")
    assert res.status == {0: "ok", 1: "error"}
    err = res.errors[1]
    assert 'File "<live cell' in err and "line 3" in err and err.endswith("ValueError: bad input on rank 1")
    assert "worker.py" not in err and "disttutor" not in err  # none of the machinery's frames
    assert "rank 0 finished the cell" in res.text() and "rank 1 raised ValueError" in res.text()


def test_unpicklable_and_bad_names_get_clear_messages(pool):
    pool.run("f = lambda: 1")
    with pytest.raises(LiveError, match=r"rank 0 cannot send f \(function\) to the kernel"):
        pool.pull("f")
    with pytest.raises(LiveError, match="name 'nope' is not defined on rank 0"):
        pool.pull("nope")
    with pytest.raises(LiveError, match=r"cannot send g \(generator\) to the ranks"):
        pool.push("g", (i for i in range(3)))
    with pytest.raises(TypeError, match="string of Python source"):
        pool.run(42)


def test_python_loop_is_interrupted_and_pool_kept(pool):
    pool.run("keep = rank + 100")
    res = pool.run("import time\nif rank == 1:\n    while True:\n        time.sleep(0.01)\n'done'", timeout=2)
    assert res.timed_out and res.status == {0: "ok", 1: "interrupted"}, res.text()
    assert res.stuck[1] == "inside line 4: time.sleep(0.01) -- in that line itself (or a C function it called)"
    assert "namespaces are kept" in res.message
    assert pool.pull("keep") == [100, 101]  # same processes, same namespaces


def test_stuck_collective_ends_with_stacks_and_restarts(pool):
    pids = pool.pids()
    res = pool.run("t = torch.ones(2)\nif rank != 1:\n    dist.all_reduce(t)\nt", timeout=3)
    assert res.timed_out and res.status == {0: "stuck", 1: "ok"}, res.text()
    # rank 0 is named, with the cell line it is in and the torch call it waits in
    assert res.stuck[0].startswith("inside line 3: dist.all_reduce(t) -- waiting in all_reduce (torch/distributed/")
    assert "namespace was lost" in res.message and "rank 1 finished the cell" in res.text()
    assert res.message_s < 3 + 2 * 2 + 5  # timeout + stack read + interrupt grace, with slack for load
    assert not any(os.path.exists(f"/proc/{p}") for p in pids)  # the old ranks are gone
    again = pool.run("t = torch.ones(2)\ndist.all_reduce(t)\nt.sum().item()")
    assert again.values == {0: "4.0", 1: "4.0"}  # the fresh group works


def test_channel_refuses_peers_without_the_secret():
    key = secrets_key = os.urandom(32)
    server = protocol.listen()
    assert server.getsockname()[0] == "127.0.0.1"
    addr = server.getsockname()

    def wrong_key():
        with pytest.raises((AuthenticationError, EOFError, ConnectionError)):
            Client(addr, authkey=b"not the pool secret")

    t = threading.Thread(target=wrong_key)
    t.start()
    with pytest.raises(AuthenticationError):
        protocol.accept(server, key, timeout=30)
    t.join(30)
    # a raw peer sending a pickle instead of answering the challenge is refused unread
    raw = socket.create_connection(addr)
    raw.sendall(len(b"x").to_bytes(4, "big") + pickle.dumps(("run", "<x>", "import os")))
    with pytest.raises((AuthenticationError, OSError, EOFError)):
        protocol.accept(server, key, timeout=30, handshake_s=2)
    raw.close()
    # the right secret gets in, both ways
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("c", protocol.connect("%s:%d" % addr, secrets_key)))
    t.start()
    conn = protocol.accept(server, key, timeout=30)
    t.join(30)
    protocol.send(conn, "hello", 1)
    assert protocol.recv(got["c"]) == ("hello", 1)
    server.close()


def test_report_parsing_is_deterministic():
    dump = ('Thread 0x00000000000000aa (most recent call first):\n  File "/x/threading.py", line 1 in wait\n\n'
            'Current thread 0x00000000000000bb (most recent call first):\n'
            '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 9 in all_reduce\n'
            '  File "<live cell 2>", line 2 in <module>\n  File "/w/disttutor/live/worker.py", line 5 in run_cell\n')
    frames = parse_stack(dump, 0xbb)
    assert frames[0] == Frame("/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 9, "all_reduce")
    text = where(frames, "<live cell 2>", "a = 1\ndist.all_reduce(a)\n")
    assert text.startswith("inside line 2: dist.all_reduce(a) -- waiting in all_reduce (torch/distributed/")
    res = CellResult([0, 1], status={1: "ok", 0: "ok"}, outputs={1: "b\n", 0: "a\n"}, values={0: "1", 1: None})
    assert res.text() == "[rank 0] a\n[rank 0] Out: 1\n[rank 1] b"  # rank order, whatever order they finished


def test_bad_config_is_a_clear_error():
    with pytest.raises(ValueError, match="nproc must be >= 1"):
        Ranks(0)
    with pytest.raises(ValueError, match="backend must be"):
        Ranks(2, backend="mpi")
    with pytest.raises(ValueError, match="timeout must be a positive"):
        Ranks(2, timeout=-1)
