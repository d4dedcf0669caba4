"""A SIGKILLed Jupyter kernel takes its whole job with it (chapter 0; issue 8, item 1).

The way it happens to a learner: a real ipykernel kernel, started with
``jupyter_client``, runs ``disttutor.launch(...)`` and is SIGKILLed (OOM
killer, "kill kernel", a crashed browser session...). Every process of the
job -- torchrun's agent and its ranks -- must be gone within a few seconds,
and still be gone 15 s later. Whether torchrun's own shutdown finishes is a
race (its ``--tee`` threads can keep the agent alive for ever), so one green
kill proves little: we kill ten times, at different moments of a job's life.

Processes are found by their environment (``DISTTUTOR_RUN_DIR`` names the
job's run directory), so nothing else on a shared machine is counted.
"""
from __future__ import annotations

import os
import signal
import textwrap
import time

import psutil
import pytest

from disttutor import contract

jupyter_client = pytest.importorskip("jupyter_client")

# Generous: the CI machine has 2 cores shared by several jobs; the promise is "a few seconds".
GONE_WITHIN_S = 10.0
STILL_GONE_AFTER_S = 15.0

PRINTER = textwrap.dedent("""
    import time
    import torch.distributed as dist
    dist.init_process_group("gloo")
    for i in range(100000):
        print(f"line {i} from rank {dist.get_rank()}", flush=True)
        time.sleep(0.02)
""")


def job_processes(run_dir: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose environment names this job's run directory."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(contract.ENV_RUN_DIR) == run_dir and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:  # gone meanwhile, a zombie, or not ours
            pass
    return found


class Kernel:
    """One real ipykernel kernel; collects the text its cell prints."""

    def __init__(self):
        self.km = jupyter_client.KernelManager(kernel_name="python3")
        self.km.start_kernel(env=dict(os.environ))  # PYTHONPATH: disttutor from this checkout
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        self.text = ""

    @property
    def pid(self) -> int:
        return self.km.provisioner.process.pid

    def run(self, code: str) -> None:
        self.kc.execute(code)

    def pump(self) -> None:
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=0.05)
            except Exception:  # queue.Empty
                return
            if msg["msg_type"] == "stream":
                self.text += msg["content"]["text"]
            elif msg["msg_type"] == "error":
                self.text += "\n".join(msg["content"]["traceback"])

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.km.provisioner.process.wait()  # reap it, as Jupyter's server would

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.cleanup_resources()


def wait_for(cond, what: str, kernel: Kernel, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while not cond():
        kernel.pump()
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}; kernel said:\n{kernel.text[-2000:]}")
        time.sleep(0.05)


def reports(run_dir: str) -> int:
    return sum(contract.report_rank(f) is not None for f in os.listdir(run_dir))


# (name, program, nproc, args, moment to kill, extra delay after that moment)
MOMENTS = {
    "agent starting": lambda rd, k, n: len(job_processes(rd)) >= 1,
    "ranks starting (rendezvous)": lambda rd, k, n: len(job_processes(rd)) >= 2,
    "ranks set up (all reported)": lambda rd, k, n: reports(rd) >= n,
    "ranks printing": lambda rd, k, n: k.text.count("line ") >= 5,
    "job ending": lambda rd, k, n: "after all_reduce" in k.text,
}
TRIALS = [
    ("hello", 3, {"sleep": 120}, "agent starting", 0.0),
    ("hello", 3, {"sleep": 120}, "agent starting", 0.7),
    ("hello", 2, {"sleep": 120}, "agent starting", 2.0),
    ("hello", 3, {"sleep": 120}, "ranks starting (rendezvous)", 0.0),
    ("hello", 2, {"sleep": 120}, "ranks starting (rendezvous)", 1.0),
    ("hello", 3, {"sleep": 120}, "ranks set up (all reported)", 0.0),
    ("hello", 3, {"sleep": 120}, "ranks set up (all reported)", 1.5),
    ("PRINTER", 2, None, "ranks printing", 0.0),
    ("PRINTER", 3, None, "ranks printing", 1.0),
    ("hello", 2, {}, "job ending", 0.0),
]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigkilled_kernel_takes_its_job_with_it(tmp_path):
    printer = tmp_path / "printer.py"
    printer.write_text(PRINTER)
    killed: list[tuple[str, float]] = []  # (run_dir, time of the kill)
    rows = []
    try:
        for i, (program, nproc, args, moment, delay) in enumerate(TRIALS):
            run_dir = str(tmp_path / f"run{i}")
            os.makedirs(run_dir)
            kernel = Kernel()
            try:
                prog = str(printer) if program == "PRINTER" else program
                kernel.run(f"import disttutor\n"
                           f"disttutor.launch({prog!r}, nproc={nproc}, args={args!r}, run_dir={run_dir!r}, "
                           f"timeout=300, collective_timeout=300)")
                wait_for(lambda: MOMENTS[moment](run_dir, kernel, nproc), moment, kernel)
                time.sleep(delay)
                running = len(job_processes(run_dir))
                kernel.kill()
                t_kill = time.time()
                killed.append((run_dir, t_kill))
                counts = {}
                for at in (1.0, 4.0):
                    time.sleep(max(0.0, t_kill + at - time.time()))
                    counts[at] = len(job_processes(run_dir))
                deadline = t_kill + GONE_WITHIN_S
                while job_processes(run_dir) and time.time() < deadline:
                    time.sleep(0.1)
                left = job_processes(run_dir)
                rows.append((f"{moment} +{delay:g}s", f"{program} x{nproc}", running, counts[1.0], counts[4.0]))
                assert left == [], (f"trial {i} ({moment}): {len(left)} job process(es) alive "
                                    f"{GONE_WITHIN_S:g}s after the kernel's SIGKILL: "
                                    f"{[(p.pid, p.name(), p.ppid()) for p in left]}")
            finally:
                kernel.close()
        # Still gone later: nothing respawned, nothing was only hidden as a transient state.
        wait = killed[-1][1] + STILL_GONE_AFTER_S - time.time()
        time.sleep(max(0.0, wait))
        late = {rd: len(job_processes(rd)) for rd, _ in killed}
        print("\nkill moment                          job          running  +1s  +4s  +15s")
        for (moment, job, running, c1, c4), rd in zip(rows, late):
            print(f"{moment:36s} {job:12s} {running:7d} {c1:4d} {c4:4d} {late[rd]:5d}")
        print(f"load average: {os.getloadavg()[0]:.1f}")
        assert sum(late.values()) == 0, f"job processes back or still alive >= 15 s after the kill: {late}"
        assert len(killed) >= 10
    finally:
        for rd, _ in killed:  # never leak into the rest of the session, even on failure
            for p in job_processes(rd):
                p.kill()
