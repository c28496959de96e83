"""A torch.compile'd model: a dumped step runs eager and records the eager ops, the other steps run the compiled
graph untouched, nothing of ours is traced by dynamo (each case in a fresh process: dynamo's state is global)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import read_jsonl

from ascend_tune.analysis.dumps.read import read_dump
from ascend_tune.testing.torch_features import set_stance_missing

# both tests are about steps switched to eager, which needs torch.compiler.set_stance
pytestmark = pytest.mark.skipif(set_stance_missing() is not None, reason=str(set_stance_missing()))

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "compiled_train.py")
# what dynamo says when it traces into Python it cannot handle, recompiles, or sees global module hooks
DYNAMO_NOISE = ("dynamo", "Dynamo", "graph break", "recompile", "global hooks", "torch.compile")


def run(out, mode):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "default"}
    proc = subprocess.run([sys.executable, SCRIPT, str(out), mode], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    noise = [line for line in proc.stderr.splitlines() if any(word in line for word in DYNAMO_NOISE)]
    return json.loads(proc.stdout.strip().splitlines()[-1]), noise


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    result, _ = run(tmp_path_factory.mktemp("reference"), "none")
    assert result["compiles"] == 1 and result["graph_runs"] == 6
    return result


def test_a_dumped_step_runs_eager_and_the_others_stay_compiled(tmp_path, reference):
    result, noise = run(tmp_path, "dump")
    assert noise == []  # no dynamo warning, graph break or recompile caused by ascend_tune
    assert result["losses"] == reference["losses"]  # bitwise those of the unmonitored compiled run
    assert result["compiles"] == 1 and result["graph_runs"] == 5  # step 3 ran eager, no recompile after it
    steps = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "event" not in r]
    assert [r["loss"] for r in steps] == result["losses"]  # one line per optimizer step, with its loss
    dump = read_dump(tmp_path / "dump" / "step3")
    names = dump.names
    for name in ("Functional.linear.0.forward", "Functional.linear.0.backward", "Module.0.Linear.forward.0",
                 "Module.0.Linear.backward.0", "Functional.cross_entropy.0.backward"):
        assert name in names  # the eager ops, named as for an uncompiled model (not Module._orig_mod...)


def test_the_shapes_detector_under_compile_adds_no_global_module_hook(tmp_path, reference):
    result, noise = run(tmp_path, "shapes")
    assert noise == []  # no "global hooks on modules" warning, nothing traced
    assert result["losses"] == reference["losses"]
    assert result["compiles"] == 1 and result["graph_runs"] == 4  # the two watched steps ran eager
    summary = json.loads((tmp_path / "summary.json").read_text())["shapes"]
    assert summary["steps"] == [0, 1] and summary["ops"] > 0 and summary["error"] is None
