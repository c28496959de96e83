"""The pairs AMP ports bring: an fp32 reference against a bfloat16 / float16 autocast target, step 0 dumped at level
mix (tests/scripts/mixed_dumps.py, a small GPT and a small CNN). A correct port compares as aligned in statistics and
in tensor mode, by either engine and across the two, either run the finer; the same port with one kernel 2% off
(a torch.library override: the same recorded call, the same arguments) is named at that op."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ascend_tune.cli import main
from ascend_tune.precision.backends import msprobe_installed

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "mixed_dumps.py")
ENGINES = ("builtin", "msprobe") if msprobe_installed() else ("builtin",)
TASKS = ("statistics", "tensor")
FAULTY = {"gpt": "Functional.gelu.0.forward", "cnn": "Functional.relu.0.forward"}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                        os.environ.get("PYTHONPATH", "")]))
    runs = [(engine, task) for engine in ENGINES for task in TASKS]
    procs = [subprocess.Popen([sys.executable, SCRIPT, str(root), engine, task], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env) for engine, task in runs[:2]]
    for engine, task in runs[2:]:  # two at a time: the machine has two cores
        out, _ = procs[0].communicate(timeout=600)
        assert procs[0].returncode == 0, out[-3000:]
        procs = procs[1:] + [subprocess.Popen([sys.executable, SCRIPT, str(root), engine, task],
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)]
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-3000:]
    return root


def step(root, engine, task, model, scenario):
    scenarios = (root / f"{engine}_{task}" / "scenarios.txt").read_text().split()
    if scenario not in scenarios:
        pytest.skip(f"{scenario}: this torch has no float16 autocast on the CPU")
    return root / f"{engine}_{task}" / model / "dump" / f"step{scenarios.index(scenario)}"


def compare(capsys, base, target):
    code = main(["compare-dump", str(base), str(target), "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("model", ["gpt", "cnn"])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_correct_autocast_port_is_aligned_and_its_faulty_kernel_is_named(dumps, capsys, engine, task, model,
                                                                           precision):
    reference = step(dumps, engine, task, model, "fp32")
    code, summary = compare(capsys, reference, step(dumps, engine, task, model, precision))
    assert code == 0 and summary["first_divergence"] is None, summary["first_divergence"]
    assert summary["mode"] == task and summary["errors_judged_by_value"] > 0  # msprobe's dtype errors, judged
    code, summary = compare(capsys, reference, step(dumps, engine, task, model, f"{precision}_fault"))
    first = summary["first_divergence"]
    assert code == 1 and first is not None and first["op"] == FAULTY[model], first
    assert "is not what its own inputs give" in first["reason"] and "TARGET" in first["reason"], first


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("model", ["gpt", "cnn"])
def test_either_run_may_be_the_finer_one(dumps, capsys, task, model):
    code, summary = compare(capsys, step(dumps, "builtin", task, model, "bf16"),
                            step(dumps, "builtin", task, model, "fp32"))
    assert code == 0, summary["first_divergence"]
    code, summary = compare(capsys, step(dumps, "builtin", task, model, "bf16"),
                            step(dumps, "builtin", task, model, "fp16"))
    assert code == 0, summary["first_divergence"]


@pytest.mark.skipif(len(ENGINES) < 2, reason="mindstudio-probe is not installed")
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("model", ["gpt", "cnn"])
def test_a_builtin_reference_and_a_msprobe_port_compare_both_ways(dumps, capsys, task, model):
    for base_engine, target_engine in (("builtin", "msprobe"), ("msprobe", "builtin")):
        reference = step(dumps, base_engine, task, model, "fp32")
        code, summary = compare(capsys, reference, step(dumps, target_engine, task, model, "bf16"))
        assert code == 0, (base_engine, target_engine, summary["first_divergence"])
        code, summary = compare(capsys, reference, step(dumps, target_engine, task, model, "bf16_fault"))
        assert code == 1 and summary["first_divergence"]["op"] == FAULTY[model], summary["first_divergence"]


def test_the_statistics_check_states_what_it_proved(dumps, capsys):
    code = main(["compare-dump", str(step(dumps, "builtin", "statistics", "gpt", "fp32")),
                 str(step(dumps, "builtin", "statistics", "gpt", "bf16_fault"))])
    out = capsys.readouterr().out
    assert code == 1
    assert "where a correct bfloat16 op is within" in out and "its output's Max against gelu of its input's" in out
    assert "judged here by the dtypes' rounding" in out  # msprobe's dtype errors are counted, and said so
