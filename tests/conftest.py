"""Shared test fixtures.

Multi-process tests launch real torchrun jobs; every one has a timeout (the
launcher's and pytest-timeout's) so a bug fails the test instead of hanging CI.
"""
from __future__ import annotations

import os
import time

import psutil
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


def descendants() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


@pytest.fixture
def no_leftovers():
    """Fails the test if it leaves any child process behind."""
    before = {p.pid for p in descendants()}
    yield
    deadline = time.time() + 10
    while time.time() < deadline:
        left = [p for p in descendants() if p.pid not in before and p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE]
        if not left:
            return
        time.sleep(0.2)
    raise AssertionError(f"processes left behind: {[(p.pid, ' '.join(p.cmdline())) for p in left]}")
