"""No orphans, through a real Jupyter kernel: `%ranks stop`, the stop button, a kernel
restart, a SIGKILLed kernel and a plain Python exit all leave zero live-rank processes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytestmark = pytest.mark.timeout(600)  # three pool start-ups and two kernels on a loaded 2-core machine


def _execute(kc, code: str, timeout: float = 240, interrupt_after=None) -> str:
    msg_id = kc.execute(code)
    out, t0 = [], time.time()
    while True:
        if interrupt_after is not None and time.time() - t0 > interrupt_after[0]:
            interrupt_after[1]()
            interrupt_after = None
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except Exception:  # noqa: BLE001 - queue.Empty: keep waiting, bounded by timeout
            assert time.time() - t0 < timeout, f"cell did not finish in {timeout}s: {code!r}"
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out.append(content["text"])
        elif kind == "error":
            out.append(f"{content['ename']}: {content['evalue']}")
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(out)


def _start_ranks(kc) -> list[int]:
    text = _execute(kc, "%load_ext disttutor\n%ranks start -n 2")
    assert "2 live ranks ready: backend gloo" in text, text
    pids = json.loads(_execute(kc, "import disttutor.live, json; print(json.dumps(disttutor.live.current().pids()))"))
    assert len(pids) == 3  # torchrun and two ranks
    return pids


def _gone(pids: list[int], within: float = 30) -> list[int]:
    deadline = time.time() + within
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.time() > deadline:
            return alive
        time.sleep(0.2)


def test_no_orphans_after_stop_restart_and_sigkill():
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
    try:
        pids = _start_ranks(kc)
        text = _execute(kc, "%%ranks\nt = torch.full((2,), float(rank))\ndist.all_reduce(t)\nt")
        assert text.splitlines() == ["[rank 0] Out: tensor([1., 1.])", "[rank 1] Out: tensor([1., 1.])"]
        # the stop button: the kernel gets SIGINT, the ranks are interrupted, the pool is kept
        text = _execute(kc, "%%ranks --timeout 120\nimport time\nwhile True:\n    time.sleep(0.01)",
                        interrupt_after=(3.0, km.interrupt_kernel))
        assert "The cell was interrupted." in text and "namespaces are kept" in text, text
        # IPython hands the magic the body without its %%ranks line: time.sleep is line 3 of it
        assert "rank 0 was interrupted inside line 3: time.sleep(0.01) -- in that line itself" in text, text
        assert "Out: 1" in _execute(kc, "%%ranks 1\nrank")
        _execute(kc, "%ranks stop")
        assert _gone(pids) == [], "%ranks stop left processes"

        pids = _start_ranks(kc)
        km.restart_kernel(now=False)  # what Jupyter's "Restart kernel" does: shutdown_request, then a new one
        assert _gone(pids) == [], "kernel restart left processes"
        kc.wait_for_ready(timeout=120)

        pids = _start_ranks(kc)
        kernel_pid = int(_execute(kc, "import os; print(os.getpid())"))
        os.kill(kernel_pid, signal.SIGKILL)  # no cleanup code runs: only PR_SET_PDEATHSIG can help
        assert _gone(pids) == [], "SIGKILLed kernel left processes"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_no_orphans_after_python_exit():
    code = ("import json; from disttutor.live import Ranks\n"
            "r = Ranks(1)\nprint(json.dumps(r.pids()), flush=True)\n")  # no stop(): atexit must do it
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    pids = json.loads(out.stdout.strip().splitlines()[-1])
    assert _gone(pids) == []


def _reply(kc, msg_id: str, timeout: float = 240) -> dict:
    deadline = time.time() + timeout
    while True:
        msg = kc.get_shell_msg(timeout=max(1.0, deadline - time.time()))
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg["content"]


def _outputs(kc, msg_id: str, timeout: float = 240) -> tuple[str, list[dict]]:
    """The cell's stream text and its error outputs, up to the kernel's idle for it."""
    out, errors, t0 = [], [], time.time()
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except Exception:  # noqa: BLE001 - queue.Empty: keep waiting, bounded by timeout
            assert time.time() - t0 < timeout, "cell did not finish"
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            errors.append(msg["content"])
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return "".join(out), errors


def test_a_rank_that_raises_fails_the_cell_and_run_all_stops_there():
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
    try:
        mid = kc.execute("%load_ext disttutor\n%ranks status")
        _, errors = _outputs(kc, mid)
        assert _reply(kc, mid)["status"] == "error"
        assert errors[0]["traceback"] == ["RanksFailed: live ranks: no live ranks yet: run `%ranks start -n 2` first"]
        pids = _start_ranks(kc)

        # Run All: the failing cell, then one queued behind it (stop_on_error, as JupyterLab sends it)
        bad = kc.execute("%%ranks\nx = 10 * rank\nif rank == 1:\n    raise ZeroDivisionError('boom on rank 1')\nx")
        after = kc.execute("print('ran past the failed cell')")
        text, errors = _outputs(kc, bad)
        assert _reply(kc, bad)["status"] == "error"
        # every rank's state first: rank 0's value, rank 1's error, the summary
        assert "[rank 0] Out: 0" in text and "ZeroDivisionError: boom on rank 1" in text, text
        assert "rank 0 finished the cell" in text and "rank 1 raised ZeroDivisionError: boom on rank 1" in text, text
        assert [e["ename"] for e in errors] == ["RanksFailed"]
        assert errors[0]["traceback"] == ["RanksFailed: %%ranks: the cell failed: rank 1 raised ZeroDivisionError: "
                                          "boom on rank 1 (1 of 2 ranks; every rank's state is above)"]
        assert _reply(kc, after)["status"] == "aborted"  # Run All stopped at the failed cell
        _outputs(kc, after)

        # a cell that fails on purpose, to show it: --keep-going
        mid = kc.execute("%%ranks --keep-going\nif rank == 0:\n    raise KeyError('shown, not fatal')\nrank")
        text, errors = _outputs(kc, mid)
        assert _reply(kc, mid)["status"] == "ok" and errors == [] and "rank 0 raised KeyError" in text, text
        assert "Out: 1" in _execute(kc, "%%ranks 1\nrank")  # the pool is still there, namespaces kept

        mid = kc.execute("%ranks stop")
        text, _ = _outputs(kc, mid)
        assert _reply(kc, mid)["status"] == "ok" and "live ranks stopped" in text
        assert _gone(pids) == [], "%ranks stop left processes"
        mid = kc.execute("%%ranks\nrank")
        _, errors = _outputs(kc, mid)
        assert errors[0]["traceback"] == ["RanksFailed: live ranks: the live ranks are stopped: "
                                          "`%ranks start -n 2` starts them again"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
