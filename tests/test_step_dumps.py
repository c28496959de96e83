"""The first divergence holds on whole training steps (forward, backward, the optimizer's step) on every pairing of
builtin and msprobe dumps: identical runs pass with AdamW / Adam / SGD(momentum), for-loop and foreach; a value-only
fault in an in-place kernel of the step is named at that op; right-but-different kernels (SDPA's math backend
against the default CPU kernel in float32 and bfloat16 autocast, matmuls summed in blocks in another order,
deterministic algorithms on) compare as aligned; a dump of the previous version reads and compares. The dumps come
from tests/scripts/step_dumps.py, msprobe's in subprocesses (it patches torch for good).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from ascend_tune.analysis.dumps import evaluate
from ascend_tune.analysis.dumps.read import read_dump
from ascend_tune.cli import main
from ascend_tune.precision.backends import msprobe_installed
from ascend_tune.testing.torch_features import sdpa_kernel_missing

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "step_dumps.py")
PREVIOUS = os.path.join(HERE, "data", "dump_v0_1_adamw", "step0")  # builtin, 0.1.0, call model 2 (f03ba44)
NO_SDPA = sdpa_kernel_missing()  # the gpt steps choose SDPA's kernel
KINDS = ("adamw", "adam", "sgd") + (() if NO_SDPA else ("gpt",))
needs_sdpa = pytest.mark.skipif(NO_SDPA is not None, reason=NO_SDPA or "")
ENGINES = ("builtin", "msprobe") if msprobe_installed() else ("builtin",)
PAIRINGS = [(b, t) for b in ENGINES for t in ENGINES]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("steps")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    for kind in KINDS:  # the engines of one kind side by side: two processes at a time
        procs = [subprocess.Popen([sys.executable, SCRIPT, str(root), engine, kind], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=env) for engine in ENGINES]
        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            assert proc.returncode == 0, out[-3000:]
    return root


@pytest.fixture(scope="module")
def tensor_dumps(tmp_path_factory):
    """The builtin engine's tensor-mode dumps of ``gpt`` and ``adamw`` (OUT/builtin/{gpt,adamw}_tensor)."""
    root = tmp_path_factory.mktemp("tensor_steps")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, SCRIPT, str(root), "builtin", kind, "tensor"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env)
             for kind in KINDS if kind in ("gpt", "adamw")]
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-3000:]
    return root


def step(root, engine, kind, k):
    return root / engine / kind / "dump" / f"step{k}"


def compare(capsys, base, target, *extra):
    code = main(["compare-dump", str(base), str(target), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("base,target", PAIRINGS)
@pytest.mark.parametrize("kind", ("adamw", "adam", "sgd"))
@pytest.mark.parametrize("impl,steps", [("loop", (0, 1)), ("foreach", (2, 3))])
def test_identical_whole_steps_pass_on_every_pairing(dumps, capsys, kind, impl, steps, base, target):
    code, summary = compare(capsys, step(dumps, base, kind, steps[0]), step(dumps, target, kind, steps[1]))
    assert code == 0, summary["first_divergence"]
    assert summary["first_divergence"] is None and summary["uncertain"] == []
    ops = read_dump(step(dumps, target, kind, steps[1])).names
    in_place = "Tensor.addcdiv_" if kind != "sgd" else "Tensor.add_"
    if impl == "loop":  # the optimizer's step is in the dump and was compared
        assert any(n.startswith(in_place) for n in ops), ops


@pytest.mark.parametrize("base,target", PAIRINGS)
@pytest.mark.parametrize("fault,op", [(4, "Tensor.addcdiv_.0.forward"), (5, "Tensor.lerp_.0.forward")])
def test_a_faulty_in_place_kernel_of_the_step_is_named_on_every_pairing(dumps, capsys, fault, op, base, target):
    code, summary = compare(capsys, step(dumps, base, "adamw", 0), step(dumps, target, "adamw", fault))
    first = summary["first_divergence"]
    assert code == 1 and first is not None
    assert first["op"] == op and first["kind"] == "output", first
    assert first["row"] == f"{op}.output.0" and first["reason"].startswith("its inputs agree"), first


@needs_sdpa
@pytest.mark.parametrize("base,target", PAIRINGS)
@pytest.mark.parametrize("steps", [(0, 1), (2, 3), (0, 4), (0, 5)],
                         ids=["sdpa_float32", "sdpa_bf16_autocast", "blocked_matmul", "deterministic"])
def test_right_but_different_kernels_are_aligned_on_every_pairing(dumps, capsys, steps, base, target):
    code, summary = compare(capsys, step(dumps, base, "gpt", steps[0]), step(dumps, target, "gpt", steps[1]))
    assert code == 0, summary["first_divergence"]
    closest = summary["closest"]
    if steps != (0, 5) or base != target:  # deterministic algorithms change nothing on the CPU: bitwise equal
        assert closest is not None and 0 < closest["ratio"] <= 1, closest
    # AdamW's first update divides by sqrt(v) ~ |grad|: gradients that agree to 1e-7 give updates 1e-4 apart
    for entry in summary["uncertain"]:
        assert entry["carried"] > 0 and entry["error"] > entry["tolerance"], entry


@needs_sdpa
def test_the_summary_line_says_how_close_aligned_runs_came(dumps, capsys):
    code = main(["compare-dump", str(step(dumps, "builtin", "gpt", 0)), str(step(dumps, "builtin", "gpt", 1))])
    out = capsys.readouterr().out
    assert code == 0 and "first divergence: none; aligned, worst op " in out and " of its tolerance" in out


def test_a_dump_of_the_previous_version_compares_with_a_new_one(dumps, capsys, tmp_path):
    old, new = read_dump(PREVIOUS), read_dump(step(dumps, "builtin", "adamw", 1))
    assert old.writer["call_model"] == 2 and new.writer["call_model"] == 3
    assert not old.inputs_as_received and new.inputs_as_received
    # AdamW's step_t += 1: the old engine read the 0-d step counter back after the op, the new one as received
    assert old.data["Tensor.__iadd__.0.forward"]["input_args"][0]["Max"] == 1.0
    assert new.data["Tensor.__iadd__.0.forward"]["input_args"][0]["Max"] == 0.0
    for engine in ENGINES:
        for base, target in ((PREVIOUS, step(dumps, engine, "adamw", 1)), (step(dumps, engine, "adamw", 1), PREVIOUS)):
            code, summary = compare(capsys, base, target)
            assert code == 0, summary["first_divergence"]
    # a fault against the old dump: lerp_'s (addcdiv_ divides by sqrt(v) ~ |grad|: against a dump of another CPU's
    # kernels its inputs carry their rounding, amplified 1e4-fold, and statistics cannot decide it: uncertain)
    code, summary = compare(capsys, PREVIOUS, step(dumps, "builtin", "adamw", 5))
    assert code == 1 and summary["first_divergence"]["op"] == "Tensor.lerp_.0.forward"
    main(["compare-dump", PREVIOUS, str(step(dumps, "builtin", "adamw", 1)), "-o", str(tmp_path / "out")])
    capsys.readouterr()
    with open(tmp_path / "out" / "compare_result.csv", encoding="utf-8") as fh:
        rows = {row["NPU Name"]: row for row in csv.DictReader(fh)}
    assert "not compared" in rows["Tensor.__iadd__.0.forward.input.0"]["Err_message"]
    assert rows["Tensor.__iadd__.0.forward.output.0"]["Result"] == "pass"


@needs_sdpa
@pytest.mark.parametrize("base,target", PAIRINGS)
def test_a_fault_in_an_op_whose_inputs_already_differ_is_uncertain_from_statistics(dumps, capsys, base, target):
    # SDPA's math backend upstream and a faulty addcdiv_: statistics cannot tell the fault from amplified drift
    code, summary = compare(capsys, step(dumps, base, "gpt", 0), step(dumps, target, "gpt", 6))
    assert summary["first_divergence"] is None and code == 0
    assert any(u["op"].startswith("Tensor.addcdiv_.") for u in summary["uncertain"]), summary["uncertain"]


@needs_sdpa
def test_in_tensor_mode_an_op_is_evaluated_again_from_its_own_inputs(tensor_dumps, capsys):
    gpt = tensor_dumps / "builtin" / "gpt_tensor" / "dump"
    for steps in ((0, 1), (2, 3), (0, 4)):  # right-but-different kernels: nothing left uncertain
        code, summary = compare(capsys, gpt / f"step{steps[0]}", gpt / f"step{steps[1]}")
        assert summary["mode"] == "tensor" and code == 0, summary["first_divergence"]
        assert summary["uncertain"] == [], summary["uncertain"]
    # the same fault statistics left uncertain: each run's addcdiv_ against what its own inputs give
    code, summary = compare(capsys, gpt / "step0", gpt / "step6")
    first = summary["first_divergence"]
    assert code == 1 and first["op"] == "Tensor.addcdiv_.0.forward", first
    assert "is not what its own inputs give" in first["reason"], first
    adamw = tensor_dumps / "builtin" / "adamw_tensor" / "dump"
    good, bad = read_dump(adamw / "step0"), read_dump(adamw / "step4")
    name = "Tensor.addcdiv_.0.forward"
    own_good, own_bad = evaluate.own_error(good, good.by_name[name]), evaluate.own_error(bad, bad.by_name[name])
    assert own_good.error < 1e-6 < 1e-4 < own_bad.error
    code, summary = compare(capsys, adamw / "step0", adamw / "step4")
    assert code == 1 and summary["first_divergence"]["op"] == name

