"""What the recording tasks write on the tests' tiny GPT stays what it was: statistics, tensor,
overflow_check, replay, and a dump beside a replay beside the shape detector (tests/data/reference_dumps/).

The fixture was made before the recording layer moved out of precision/ (issue #22) and is compared after each
change, normalised (absolute paths, ``.pt`` tensors as their statistics) and compared exactly but for floats, which
agree within their scenario's rounding (another CPU's kernels round differently; see tests/scripts/reference_dumps.py).
A change that means to change what is dumped regenerates it with one command and says why in its commit:

    PYTHONPATH=$PWD python tests/scripts/reference_dumps.py --update

(``python tests/scripts/reference_dumps.py --diff OLD_DIR NEW_DIR`` names the entries two versions differ in.)
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "reference_dumps.py")
spec = importlib.util.spec_from_file_location("reference_dumps", SCRIPT)
reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reference)

FIXTURE_TORCH = "2.13"  # the torch the fixture was made with: torch 2.1's dropout masks differ (its RNG's use)
pytestmark = pytest.mark.skipif(
    ".".join(torch.__version__.split(".")[:2]) != FIXTURE_TORCH,
    reason=f"the reference dumps were made with torch {FIXTURE_TORCH}; torch {torch.__version__} draws other dropout "
           "masks (other values, not other rounding)")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """The script run now, in a subprocess (the frames of its stacks are the script's own, as in the fixture)."""
    out = tmp_path_factory.mktemp("reference_dumps")
    root = os.path.dirname(HERE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, SCRIPT, str(out)], check=True, env=env, cwd=root, capture_output=True)
    return out


@pytest.mark.parametrize("scenario", list(reference.SCENARIOS))
def test_a_recording_task_writes_what_it_wrote_before(fresh, scenario):
    old = reference.load(os.path.join(reference.FIXTURE, f"{scenario}.json.gz"))
    new = reference.load(os.path.join(fresh, f"{scenario}.json.gz"))
    assert reference.differences(old, new, reference.rtol(scenario)) == []
    assert any(name.endswith("dump.json") or name.endswith("replay.csv") for name in new)
