"""Packaging: environment.yml says the same as pyproject.toml; the CI pin stays a CI pin."""
from __future__ import annotations

import os
import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# conda-forge spells some packages differently from PyPI.
CONDA_NAME = {"torch": "pytorch"}


def _req(spec: str) -> tuple[str, str]:
    spec = spec.split(";")[0].split("#")[0]  # environment markers / comments are not bounds
    m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(.*)", spec.strip())
    return m.group(1).lower(), m.group(2).replace(" ", "")


def test_environment_yml_matches_pyproject():
    meta = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    wanted = dict(_req(s) for s in meta["dependencies"] + meta["optional-dependencies"]["dev"])
    env = yaml.safe_load(open(os.path.join(ROOT, "environment.yml")))
    conda = dict(_req(s) for s in env["dependencies"] if isinstance(s, str))
    for name, bound in wanted.items():
        cname = CONDA_NAME.get(name, name)
        assert cname in conda, f"environment.yml lacks {cname} (pyproject: {name}{bound})"
        assert conda[cname] == bound, f"{cname}: environment.yml says {conda[cname]!r}, pyproject {bound!r}"
    assert conda["python"] == meta["requires-python"]


def test_torch_range_lets_gpu_users_in_and_ci_pins_the_cpu_wheel():
    meta = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    torch_spec = dict(_req(s) for s in meta["dependencies"])["torch"]
    assert torch_spec.startswith(">=") and "<" not in torch_spec and "==" not in torch_spec
    pins = open(os.path.join(ROOT, ".ci", "constraints.txt")).read()
    assert re.search(r"^torch==\d+\.\d+\.\d+$", pins, re.M)
    assert ".ci/constraints.txt" in open(os.path.join(ROOT, ".ci", "run")).read()
