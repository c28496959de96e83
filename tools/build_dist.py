"""Build the package as a user gets it: the sdist from a copy of the files git tracks in this checkout (untracked
files it does not ignore count too), then the wheel from the unpacked sdist, as pip and ``build`` do. Nothing else
of the checkout takes part (a stale ``*.egg-info/SOURCES.txt`` or ``build/`` would carry files the configuration
leaves out), and so a file the sdist leaves out is missing from the wheel too. Uses the running interpreter's
setuptools (no download).

Usage: python tools/build_dist.py OUT    writes OUT/<sdist>.tar.gz and OUT/<wheel>.whl, prints the wheel's path

tests/test_packaging.py compares what they hold with the tracked files; ``make test-wheel`` installs the wheel into
a fresh venv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK = "import sys; from setuptools import build_meta as b; print(getattr(b, sys.argv[1])(sys.argv[2]))"


def _hook(name: str, source: str, out: str) -> str:
    proc = subprocess.run([sys.executable, "-c", HOOK, name, out], cwd=source, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} in {source} failed:\n{proc.stderr[-3000:]}")
    return os.path.join(out, proc.stdout.strip().splitlines()[-1])


def tracked_files(root: str = ROOT) -> list:
    """The files of the checkout at ``root`` that git tracks or would (untracked, not ignored), as on disk."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return sorted(f for f in listed if f and os.path.isfile(os.path.join(root, f)))


def build(out: str, root: str = ROOT) -> tuple:
    """``(sdist path, wheel path)`` of the checkout at ``root``, both written into ``out``."""
    out = os.path.abspath(out)
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as source:
        for rel in tracked_files(root):
            os.makedirs(os.path.join(source, os.path.dirname(rel)), exist_ok=True)
            shutil.copy2(os.path.join(root, rel), os.path.join(source, rel))
        sdist = _hook("build_sdist", source, out)
    with tempfile.TemporaryDirectory() as unpacked, tarfile.open(sdist) as tar:
        top = tar.getmembers()[0].name.split("/")[0]
        if sys.version_info >= (3, 12):
            tar.extractall(unpacked, filter="data")
        else:
            tar.extractall(unpacked)
        wheel = _hook("build_wheel", os.path.join(unpacked, top), out)
    return sdist, wheel


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    print(build(sys.argv[1])[1])
