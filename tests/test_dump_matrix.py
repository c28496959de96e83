"""A GPU reference dumped by the builtin engine and an NPU target dumped by msprobe compare right: the matrix
{builtin, msprobe} x {builtin, msprobe} x {identical, three faults} on a 2-layer GPT, both engines driven by
TrainingMonitor, msprobe in one subprocess (tests/scripts/gpt_dumps.py: it patches torch for good).

Faults, one per kind: a number argument (every LayerNorm's eps 1e-5 -> 2e-5), a string argument (GELU's
approximation 'none' -> 'tanh'), a value drift with no argument changed (the second block's c_fc weight rounded to
bfloat16 before the step).
"""

from __future__ import annotations

import csv
import glob
import json
import os
import subprocess
import sys

import pytest

from ascend_tune.analysis.dumps.read import read_dump
from ascend_tune.cli import main
from ascend_tune.precision.backends import msprobe_installed

pytestmark = pytest.mark.skipif(not msprobe_installed(), reason="mindstudio-probe is not installed")

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "gpt_dumps.py")
ENGINES = ("builtin", "msprobe")
FAULTS = {  # step of the fault -> (the op compare-dump must name, what its reason must say)
    2: ("Functional.layer_norm.0.forward", "eps 1e-05 vs 2e-05"),
    3: ("Functional.gelu.0.forward", "approximate 'none' vs 'tanh'"),
    4: ("Functional.linear.6.forward", "input.1 already differs"),
}
# the APIs whose argument slots must be msprobe's, and how the GPT calls them
SLOT_APIS = ("Functional.layer_norm", "Functional.linear", "Functional.embedding", "Functional.gelu",
             "Functional.scaled_dot_product_attention", "Tensor.__mul__", "Functional.dropout",
             "Functional.cross_entropy")


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                        os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, SCRIPT, str(root)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return root


def step(root, engine, k):
    return root / engine / "dump" / f"step{k}"


def compare(capsys, base, target, *extra):
    code = main(["compare-dump", str(base), str(target), "--json", *extra])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.mark.parametrize("base", ENGINES)
@pytest.mark.parametrize("target", ENGINES)
def test_identical_runs_pass_on_every_pairing(dumps, capsys, base, target):
    code, summary = compare(capsys, step(dumps, base, 0), step(dumps, target, 1))
    assert code == 0, summary["first_divergence"]
    assert summary["first_divergence"] is None and summary["error"] == 0
    assert summary["ops_only_in_target"] == 0 or target == "builtin"  # msprobe leaves out view ops (low risk)
    engines = summary["engines"]
    assert engines["base"].startswith("ascend_tune" if base == "builtin" else "msprobe")
    assert engines["target"].startswith("ascend_tune" if target == "builtin" else "msprobe")


@pytest.mark.parametrize("base", ENGINES)
@pytest.mark.parametrize("target", ENGINES)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_names_its_op_on_every_pairing(dumps, capsys, base, target, fault):
    op, reason = FAULTS[fault]
    code, summary = compare(capsys, step(dumps, base, 0), step(dumps, target, fault))
    first = summary["first_divergence"]
    assert code == 1 and first is not None
    assert first["op"] == op, first
    assert reason in first["reason"], first


def test_fuzzy_pairing_names_the_same_ops_across_engines(dumps, capsys):
    code, summary = compare(capsys, step(dumps, "builtin", 0), step(dumps, "msprobe", 1), "--fuzzy")
    assert code == 0, summary["first_divergence"]
    code, summary = compare(capsys, step(dumps, "builtin", 0), step(dumps, "msprobe", 2), "--fuzzy")
    assert code == 1 and summary["first_divergence"]["op"] == "Functional.layer_norm.0.forward"


def test_a_differing_string_argument_is_an_error_row_in_the_csv(dumps, capsys, tmp_path):
    code = main(["compare-dump", str(step(dumps, "msprobe", 0)), str(step(dumps, "builtin", 3)), "-o",
                 str(tmp_path / "out")])
    capsys.readouterr()
    with open(tmp_path / "out" / "compare_result.csv", encoding="utf-8") as fh:
        rows = {row["NPU Name"]: row for row in csv.DictReader(fh)}
    row = rows["Functional.gelu.0.forward.input.approximate"]
    assert code == 1 and row["Result"] == "error" and "scalar parameters" in row["Err_message"]
    assert row["NPU max"] == "tanh" and row["Bench max"] == "none"


def test_msprobe_compare_finds_no_error_in_identical_runs_from_either_engine(dumps):
    for pair in ("builtin_builtin", "builtin_msprobe"):
        (result,) = glob.glob(str(dumps / "msprobe_compare" / pair / "compare_result_*.csv"))
        with open(result, encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        assert len(rows) > 150, pair
        assert [r["NPU Name"] for r in rows if r["Result"] not in ("pass", "")] == [], pair
        # every argument of the target found its bench row: the slots are the same in both dumps
        assert [r["NPU Name"] for r in rows if r["Bench Name"] == "N/A" and ".forward.input" in r["NPU Name"]
                and not r["NPU Name"].startswith(("Tensor.__rmul__", "Tensor.__mul__"))] == [], pair


def _slots(entry) -> list:
    """An entry's arguments as (slot, type) pairs, the way both dumps spell them."""
    def kind(value):
        return None if value is None else value.get("type")
    out = [(f"input.{i}", kind(v) if not isinstance(v, list) else [kind(x) for x in v])
           for i, v in enumerate(entry.get("input_args", []))]
    out += [(f"input.{k}", kind(v)) for k, v in entry.get("input_kwargs", {}).items()]
    return out


def test_the_builtin_engine_records_the_argument_slots_msprobe_records(dumps):
    ours = read_dump(step(dumps, "builtin", 0))
    theirs = read_dump(step(dumps, "msprobe", 0))
    checked = 0
    for name, entry in theirs.data.items():
        api = name.rsplit(".", 2)[0]
        if not name.endswith(".forward") or api not in SLOT_APIS:
            continue
        if api == "Tensor.__mul__":
            continue  # msprobe names the GPT's `cap * x` Tensor.__rmul__; the builtin engine Tensor.__mul__
        assert _slots(ours.data[name]) == _slots(entry), name
        checked += 1
    rmul = theirs.data["Tensor.__rmul__.0.forward"]
    assert _slots(ours.data["Tensor.__mul__.0.forward"]) == _slots(rmul)  # the same slots under the other name
    assert checked >= 2 * 4 + 9 + 2 + 1
    for api in SLOT_APIS:
        assert any(n.startswith(api + ".") for n in ours.data), api
    layer_norm = ours.data["Functional.layer_norm.0.forward"]["input_args"]
    assert layer_norm[4] == {"type": "float", "value": 1e-05}  # nn.LayerNorm passes eps positionally: recorded
    assert ours.writer == {"name": "ascend_tune", "version": ours.writer["version"], "call_model": 3}


def test_parse_finds_ops_across_call_counts_and_shows_values_and_user_frames(dumps, capsys):
    for engine in ENGINES:
        code = main(["parse", str(step(dumps, engine, 3)), "Functional.layer_norm.0.forward"])
        out = capsys.readouterr().out
        assert code == 0
        assert "input.4 (eps)" in out and "value 1e-05" in out and "float" in out
        assert "<class" not in out and "/torch/" not in out  # no dtype spelled as a class, no torch frames
        assert "models.py, line" in out and "gpt_dumps.py, line" in out
        code = main(["parse", str(step(dumps, engine, 3)), "Functional.gelu.0.forward"])
        assert code == 0 and "value 'tanh'" in capsys.readouterr().out
        code = main(["parse", str(step(dumps, engine, 0)), "Functional.linear.12.forward"])
        err = capsys.readouterr().err
        assert code == 2 and "did you mean Functional.linear.8.forward?" in err and "9 such call(s)" in err
    code = main(["parse", str(step(dumps, "builtin", 0)), "Tensor.__rmul__.0.forward"])
    assert code == 2 and "did you mean Tensor.__mul__.0.forward?" in capsys.readouterr().err
