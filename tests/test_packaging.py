"""What a user installs is the package: the sdist and the wheel built from this checkout carry every file of
``ascend_tune/`` that git tracks (the launcher's bootstrap, the fakes, the data files), no more, and the entry points.

Both are built as pip and ``build`` build them (tools/build_dist.py: the sdist from a copy of the files git tracks,
the wheel from the unpacked sdist). CI also installs that wheel into a fresh venv and runs the launcher's and the
plugin's tests against it (``make test-wheel``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tarfile
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("build_dist", os.path.join(ROOT, "tools", "build_dist.py"))
build_dist = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_dist)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(the checkout's files of ascend_tune/, names in the sdist below its top folder, names in the wheel, the
    wheel's entry_points.txt)``."""
    if shutil.which("git") is None or not os.path.isdir(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout: which files the package has is what git tracks")
    files = build_dist.tracked_files()
    sdist, wheel = build_dist.build(str(tmp_path_factory.mktemp("dist")))
    with tarfile.open(sdist) as tar:
        in_sdist = sorted(m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile())
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = sorted(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in in_wheel if n.endswith(".dist-info/entry_points.txt"))
    return [f for f in files if f.startswith("ascend_tune/")], in_sdist, in_wheel, entry_points


def test_the_wheel_holds_every_tracked_file_of_the_package_and_nothing_else(built):
    package, _, in_wheel, _ = built
    shipped = [n for n in in_wheel if n.startswith("ascend_tune/")]
    assert "ascend_tune/launch/bootstrap/sitecustomize.py" in package
    assert sorted(set(package) - set(shipped)) == [], "tracked files the wheel leaves out (setup.cfg package_data)"
    assert sorted(set(shipped) - set(package)) == [], "files in the wheel that the checkout does not track"


def test_the_sdist_holds_every_tracked_file_of_the_package(built):
    package, in_sdist, _, _ = built
    assert sorted(set(package) - set(in_sdist)) == []
    assert {"setup.cfg", "pyproject.toml", "README.md"} <= set(in_sdist)


def test_the_wheel_declares_the_command_and_the_pytest_plugin(built):
    entry_points = built[3]
    assert "ascend-tune = ascend_tune.cli:main" in entry_points
    assert "[pytest11]" in entry_points and "ascend_tune = ascend_tune.pytest_plugin" in entry_points
