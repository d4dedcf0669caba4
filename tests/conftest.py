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


# `course.py test` runs two pytest-xdist workers, each taking whole files (--dist loadscope, so a
# notebook's cells run in order in one kernel) from the front of this order (--no-loadscope-reorder).
# The longest files go first, so that the last minutes are not one worker alone on a long file while
# the other one idles. Rough seconds on an idle 2-core machine (pytest --durations, chapter build
# times); the rest keep pytest's order.
SLOW_FIRST = [
    "tests/test_exercises.py",              # every solution on real ranks, and wrong answers
    "tests/test_grade.py",                  # ~250: a class graded (one learner hangs) and a class of 30
    "tests/test_ch09_fixbug.py",            # 9.2/9.3: the broken programs and half-fixes on real ranks
    "chapters/10_capstone_lm.ipynb",        # ~200
    "tests/test_ch08_performance.py",       # comm hooks + AMP ~120, tuning, data loading
    "chapters/04_ddp.ipynb",                # ~170
    "chapters/11_beyond_ddp.ipynb",         # ~165 (FSDP2 in full: profiled steps, DCP, memory tracker)
    "chapters/08_performance.ipynb",        # ~150
    "chapters/13_at_scale.ipynb",           # ~150 under load (five launches on 2 ranks)
    "chapters/02_process_groups_collectives.ipynb",  # ~140
    "chapters/12_tensor_sequence_expert.ipynb",      # ~140 at load 15 (six launches, one on 4 ranks twice)
    "tests/test_ch12_tensor_parallel.py",   # ~180 at load 18: a 4-rank launch, the plain script, 12.1 wrong answers
    "tests/test_ch07_pipeline_step.py",     # ~150 at load 8: 7.3's six wrong answers and the solution, a launch each
    "tests/test_ch11_hsdp.py",              # ~120 at load 6: 11.3's eight wrong answers and a hang, 4 ranks each
    "tests/test_kernel_kill.py",            # ~140: ten kernels killed
    "tests/test_browser.py",                # ~140: chapters 0 and 1 run in Chromium
    "tests/test_site.py",                   # ~70: the website built, every page in Chromium
    "chapters/09_profiling_troubleshooting.ipynb",   # ~130
    "tests/test_numerics.py",               # ~100: chapters 1 and 3 again, the ranks on other float kernels
    "chapters/00_setup.ipynb",              # ~115
    "chapters/07_pipeline_parallel.ipynb",  # ~105
    "tests/test_ch05_multi_node.py",        # ~90: the article's double spawn
    "tests/test_ch12_sequence_parallel.py",  # ~90 at load 8: 12.2's seven wrong answers, a launch each
    "tests/test_ch10_train_step.py",        # ~110 under load: seven wrong 10.2 steps, the loop twice on 2 ranks each
    "tests/test_ch04_scratch.py",           # ~80: the DDP checkers' wrong answers
    "tests/test_ch07_zero_bubble.py",       # ~45 idle: zero-bubble and balance launches
    "tests/test_ch08_links.py",             # ~45 idle: the emulated link fitted back, hooks vs one process
    "tests/test_ch11_fsdp2.py",             # ~40: FSDP2's bytes on 4 ranks
    "tests/test_sandbox.py",                # ~40 at load 4, ~75 at load 10: eight hostile submissions, the walls
    "tests/test_plain_scripts.py",          # ~30: every plain script on 2 ranks
    "tests/test_slurm.py",                  # ~60: six sbatch jobs on a local two-node Slurm
    "tests/test_ch09_troubleshoot.py",
    "tests/test_ch10_train.py",
]


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(SLOW_FIRST)))  # stable
