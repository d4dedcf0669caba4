"""A second numerical environment: the chapters that compare a rank's numbers with a reference
computed in the notebook's kernel run again with the RANKS on other float kernels than the kernel.

The build machine is one machine; a learner's laptop is another CPU with another vector unit and
another BLAS code path. There, an assert that claimed bit-exactness across two processes fails (it
did: chapter 1's layer-parallel output on an AMD Zen 4 machine). Here the ranks get ATen's scalar
kernels (``ATEN_CPU_CAPABILITY=default``) and MKL's SSE4.2 code path through DISTTUTOR_RANK_ENV,
while the kernel keeps this CPU's best ones: the same code, different rounding -- so an assert
that holds only on one machine fails in this test, not on a learner's laptop. The kernel also runs
with the machine's own thread count (``OMP_NUM_THREADS`` unset), as in a learner's JupyterLab.

Chapters 1 and 3 are the cheap ones (~25 s each) that compare the ranks' floats with the kernel's
(layer/tensor/pipeline outputs; nn.DataParallel's three patterns against one process); the static
twin of this test, for checked outputs, is tests/test_notebook_outputs.py.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHAPTERS = ["chapters/01_why_distributed.ipynb", "chapters/03_data_parallel.ipynb"]
OTHER_KERNELS = "ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_chapters_hold_when_the_ranks_round_differently(no_leftovers):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTEST_XDIST_WORKER")}
    env["DISTTUTOR_RANK_ENV"] = OTHER_KERNELS
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                          "-o", "addopts=--nbval-lax --nbval-current-env --nbval-cell-timeout=300", *CHAPTERS],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=580)
    tail = "\n".join(out.stdout.splitlines()[-40:])
    assert out.returncode == 0, f"with the ranks on {OTHER_KERNELS}:\n{tail}"
