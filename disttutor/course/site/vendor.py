"""The site's own copies of what a page runs: ipywidgets' HTML manager, MathJax and Pyodide.

nbconvert's HTML pages load ``@jupyter-widgets/html-manager`` from a CDN at view time, so a page read
offline (or on a network that blocks the CDN) shows no widget. No PyPI package ships that bundle,
so the build takes it from the npm registry with ``npm pack`` (the package's tarball only, none of
its dependencies: ``dist/embed.js`` is a self-contained webpack bundle of the standard controls,
the output widget and their CSS, with no RequireJS needed). The version is in the range that
ipywidgets 8 asks for; the tarball is checked against the registry's sha512 recorded here, and kept in
``.site-cache/`` so later builds need no network. MathJax comes the same way, for the same reason
(nbconvert's pages load it from a CDN too). Pyodide (CPython compiled to WebAssembly) runs the
live widgets' Python (``live.py``): its npm package holds the core -- the runtime, the standard
library, the lock file -- and no package (numpy, matplotlib come from Pyodide's CDN, which a page
never asks: the live widgets need none of them).
"""
from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass



@dataclass(frozen=True)
class Package:
    name: str
    version: str
    integrity: str   # the registry's `npm view NAME@VERSION dist.integrity`
    folder: str      # inside the tarball
    files: tuple[str, ...]  # file names (or name endings) taken from ``folder``

    @property
    def tarball(self) -> str:  # npm pack's file name
        return f"{self.name.lstrip('@').replace('/', '-')}-{self.version}.tgz"


HTML_MANAGER = Package(
    "@jupyter-widgets/html-manager", "1.0.15",  # the newest 1.x, in ipywidgets 8's range ("^1.0.1")
    "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
    "package/dist/",
    # The bundle, its licence notes, and the Font Awesome fonts its CSS names (woff2 is what every
    # current browser takes first; the CSS's other formats are then never requested).
    ("embed.js", "embed.js.LICENSE.txt", ".woff2"))
# MathJax 3, all TeX extensions and SVG output in one file (no font files to serve): JupyterLab
# renders the notebooks' $...$ and $$...$$ with MathJax, so the pages do too.
MATHJAX = Package(
    "mathjax", "3.2.2",
    "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
    "package/es5/", ("tex-svg-full.js",))
# The newest release (npm's "latest" on 2026-12-03). It bundles CPython 3.14.2 (its pyodide-lock.json
# says so); the course's modules need 3.10 or later. The five files are what loadPyodide() fetches:
# the loader, the Emscripten module, the WebAssembly binary, the standard library and the lock file
# (about 13.5 MB, fetched by a page only once a reader touches a live widget's control).
PYODIDE = Package(
    "pyodide", "314.0.8",
    "sha512-74Wq1kXOC+CCEzAfxuRAO701nAcCMLjf8NrwvWpu8S41dVMXwXmLQ05dYB+F4e46AdnGo0oq7YHSVUpHsoarLQ==",
    "package/", ("pyodide.js", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"))
LICENCES = ("package/package.json", "package/LICENSE")  # name the version and the licence


class VendorError(RuntimeError):
    """A renderer could not be had (no npm, no registry, a tarball that fails its check)."""


def _verify(pkg: Package, tgz: str) -> None:
    algo, want = pkg.integrity.split("-", 1)
    h = hashlib.new(algo)
    with open(tgz, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    if base64.b64encode(h.digest()).decode() != want:
        raise VendorError(f"{os.path.basename(tgz)} does not match the recorded {algo} of "
                          f"{pkg.name}@{pkg.version}; delete it and build again")


def tarball(pkg: Package, cache: str) -> str:
    """The package's tarball in ``cache``, downloaded with ``npm pack`` when it is not there yet."""
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, pkg.tarball)
    if not os.path.exists(path):
        npm = shutil.which("npm")
        if npm is None:
            raise VendorError(f"npm is needed once to fetch {pkg.name}@{pkg.version}: install Node.js "
                              f"(Debian: apt-get install npm), or put {pkg.tarball} into {cache}")
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            r = subprocess.run([npm, "pack", f"{pkg.name}@{pkg.version}", "--silent", "--pack-destination", tmp],
                               capture_output=True, text=True, timeout=300)
            got = os.path.join(tmp, pkg.tarball)
            if r.returncode != 0 or not os.path.exists(got):
                tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
                raise VendorError(f"npm pack {pkg.name}@{pkg.version} failed: {tail[0][:200]}")
            _verify(pkg, got)
            os.replace(got, path)
    _verify(pkg, path)
    return path


def install(pkg: Package, cache: str, dest: str) -> None:
    """Unpack the package's wanted files (and its licence) into ``dest``."""
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(tarball(pkg, cache)) as tf:
        for m in tf.getmembers():
            base = os.path.basename(m.name)
            wanted = m.name.startswith(pkg.folder) and "/" not in m.name[len(pkg.folder):] and \
                any(base == f or (f.startswith(".") and base.endswith(f)) for f in pkg.files)
            if m.isfile() and (wanted or m.name in LICENCES):
                with tf.extractfile(m) as src, open(os.path.join(dest, base), "wb") as out:
                    shutil.copyfileobj(src, out)
