"""compare-dump, parse, overflow and pack on real msprobe dumps of a tiny MLP, made once in a subprocess (msprobe
patches torch for good). Hand-written dumps for the edge cases are in test_analysis_dump_edges.py."""

from __future__ import annotations

import csv
import glob
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from ascend_tune.analysis.dumps.compare import compare_dumps
from ascend_tune.analysis.dumps.read import read_index
from ascend_tune.analysis.dumps.sources import open_location, select_dump
from ascend_tune.analysis.dumps.table import columns
from ascend_tune.cli import main

# Five one-step runs of a 3-layer MLP, dumped by msprobe (level mix): 0 and 1 identical, 2 with fc2's output
# scaled by 1.01, 3 with fc2 computed in bfloat16, 4 with fc2's output scaled into overflow. Statistics for all,
# tensors for the first three; then msprobe's own compare of run 2 (and 3) against run 0.
DUMP_SCRIPT = textwrap.dedent('''
    import glob, os, sys
    import torch
    import torch.nn.functional as F
    from torch import nn
    from msprobe.pytorch import PrecisionDebugger

    out = sys.argv[1]
    torch.set_num_threads(1)


    class Layer(nn.Linear):
        scale = 1.0
        compute = torch.float32

        def forward(self, x):
            y = F.linear(x.to(self.compute), self.weight.to(self.compute), self.bias.to(self.compute))
            return y.float() * self.scale  # PERTURBED LINE


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.fc3 = Layer(16, 32), Layer(32, 32), Layer(32, 4)

        def forward(self, x):
            return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


    VARIANTS = [{}, {}, {"scale": 1.01}, {"compute": torch.bfloat16}, {"scale": 1e39}]
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    for task, variants in (("statistics", VARIANTS), ("tensor", VARIANTS[:3])):
        PrecisionDebugger._instance = None  # one debugger per process in msprobe; each task needs its own
        dbg = PrecisionDebugger(task=task, dump_path=os.path.join(out, task), level="mix",
                                step=list(range(len(variants))))
        for variant in variants:
            torch.manual_seed(0)
            model = Net()
            for key, value in variant.items():
                setattr(model.fc2, key, value)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            dbg.start(model=model)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            dbg.stop()
            dbg.step()

    from msprobe.pytorch.compare.pt_compare import pt_compare

    for task, step in (("statistics", 2), ("statistics", 3), ("tensor", 2)):
        npu, bench = (glob.glob(os.path.join(out, task, f"step{s}", "*", "dump.json"))[0] for s in (step, 0))
        folder = os.path.join(out, f"msprobe_{task}_{step}")
        os.makedirs(folder)
        pt_compare({"npu_path": npu, "bench_path": bench, "is_print_compare_log": False}, folder)
''')


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    if importlib.util.find_spec("msprobe") is None:
        pytest.skip("mindstudio-probe is not installed (pip install 'ascend_tune[msprobe]')")
    root = tmp_path_factory.mktemp("msprobe")
    script = root / "make_dumps.py"
    script.write_text(DUMP_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(root)], capture_output=True, text=True, timeout=600,
                          cwd=str(root))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def step_dir(root, task, step):
    return glob.glob(str(root / task / f"step{step}" / "*"))[0]


def compared(root, task, step, **options):
    def load(s):
        files, refs = open_location(step_dir(root, task, s))
        return read_index(files, select_dump(refs, "dump"))

    return compare_dumps(load(0), load(step), **options)


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_two_seeded_identical_runs_all_pass_and_exit_0(dumps, capsys, task):
    code, out, _ = run_cli(capsys, "compare-dump", step_dir(dumps, task, 0), step_dir(dumps, task, 1))
    assert code == 0
    assert "first divergence: none" in out and "verdict: PASS" in out
    result = compared(dumps, task, 1)
    assert result.mode == task and result.count("pass") == len(result.rows) > 50


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_a_layer_scaled_by_1_01_is_named_as_the_first_divergence(dumps, capsys, task):
    code, out, _ = run_cli(capsys, "compare-dump", step_dir(dumps, task, 0), step_dir(dumps, task, 2))
    assert code == 1 and "verdict: DIVERGED" in out
    result = compared(dumps, task, 2)
    first = result.first
    assert first.op == "Tensor.__mul__.1.forward"  # fc2's scaling; fc1's ops and fc2's linear agree
    assert first.parent == "Module.fc2.Layer.forward.0"
    assert "1.01" in first.reason
    assert any("PERTURBED LINE" in frame for frame in first.stack)
    assert "Tensor.__mul__.1.forward" in out and "PERTURBED LINE" in out
    rows = {f"{result.pairs[r.pair].name}.{r.slot}": r for r in result.rows}
    assert rows["Functional.linear.1.forward.output.0"].agree  # the op before it agrees
    assert not rows["Torch.relu.1.forward.output.0"].agree  # later ops differ too, but are not named


def test_a_layer_computed_in_bfloat16_is_a_precision_difference_not_a_divergence(dumps, capsys):
    # fc2 cast to bfloat16 by the model (x.to(compute)): every later tensor differs by bfloat16's rounding, the
    # values agree within it, and msprobe's dtype errors are counted but judged by value
    code, out, _ = run_cli(capsys, "compare-dump", step_dir(dumps, "statistics", 0),
                           step_dir(dumps, "statistics", 3))
    result = compared(dumps, "statistics", 3)
    assert code == 0 and result.first is None and "verdict: PASS" in out, out
    assert result.count("error") == result.errors_judged > 0
    rows = {f"{result.pairs[r.pair].name}.{r.slot}": r for r in result.rows}
    cast = rows["Functional.linear.1.forward.output.0"]
    assert cast.agree and "bfloat16" in cast.target.dtype and "within bfloat16's precision" in cast.note


@pytest.mark.parametrize("task, step", [("statistics", 2), ("statistics", 3), ("tensor", 2)])
def test_the_csv_has_msprobes_columns_and_msprobes_verdict_on_every_row(dumps, tmp_path, capsys, task, step):
    out = tmp_path / "out"
    code, _, _ = run_cli(capsys, "compare-dump", step_dir(dumps, task, 0), step_dir(dumps, task, step), "-o", out)
    assert code == (0 if step == 3 else 1)  # 3: a bfloat16 layer, within its precision (msprobe's errors kept)
    with open(glob.glob(str(dumps / f"msprobe_{task}_{step}" / "*.csv"))[0], newline="") as fh:
        theirs = list(csv.DictReader(fh))
    with open(out / "compare_result.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == list(theirs[0].keys()) == columns(task)
        ours = list(reader)
    assert [r["NPU Name"] for r in ours] == [r["NPU Name"] for r in theirs]
    def verdict(row: dict) -> tuple:  # msprobe's result and messages; our notes ("note: ...") aside
        return row["Result"], [m for m in json.loads(row["Err_message"] or "[]") if not m.startswith("note: ")]

    assert [verdict(r) for r in ours] == [verdict(r) for r in theirs]
    numeric = ("Cosine", "MaxAbsErr", "EucDist") if task == "tensor" else ("Max diff", "NPU max", "Bench l2norm")
    for mine, msprobe in zip(ours, theirs):
        for column in numeric:
            try:
                expected = float(msprobe[column])
            except ValueError:
                continue
            assert float(mine[column]) == pytest.approx(expected, rel=1e-6, abs=1e-9), (mine["NPU Name"], column)
    summary = json.loads((out / "compare_summary.json").read_text())
    if step == 3:
        assert summary["first_divergence"] is None and summary["errors_judged_by_value"] == summary["error"]
    else:
        assert summary["first_divergence"]["op"] == "Tensor.__mul__.1.forward"


def test_outputs_are_never_overwritten_silently(dumps, tmp_path, capsys):
    out = tmp_path / "out"
    base, target = step_dir(dumps, "statistics", 0), step_dir(dumps, "statistics", 1)
    assert run_cli(capsys, "compare-dump", base, target, "-o", out)[0] == 0
    (out / "compare_result.csv").write_text("mine")
    code, _, err = run_cli(capsys, "compare-dump", base, target, "-o", out)
    assert code == 2 and err.count("\n") == 1 and "--force" in err
    assert (out / "compare_result.csv").read_text() == "mine"
    assert run_cli(capsys, "compare-dump", base, target, "-o", out, "--force")[0] == 0
    assert (out / "compare_result.csv").read_text().startswith("NPU Name,")


def test_a_dump_root_with_several_steps_needs_a_step(dumps, capsys):
    code, _, err = run_cli(capsys, "compare-dump", dumps / "statistics", dumps / "statistics")
    assert code == 2 and "--step" in err
    assert run_cli(capsys, "compare-dump", dumps / "statistics", dumps / "statistics", "--step", "0")[0] == 0


def test_tensor_mode_needs_saved_tensors(dumps, capsys):
    code, _, err = run_cli(capsys, "compare-dump", step_dir(dumps, "statistics", 0),
                           step_dir(dumps, "statistics", 1), "--mode", "tensor")
    assert code == 2 and "task=tensor" in err


def test_overflow_names_the_first_op_producing_inf_with_its_stack(dumps, capsys):
    code, out, _ = run_cli(capsys, "overflow", dumps / "statistics", "--step", "4")
    assert code == 1
    assert "first inf/NaN: Tensor.__mul__.1.forward" in out and "produced here" in out
    assert "PERTURBED LINE" in out
    code, out, _ = run_cli(capsys, "overflow", step_dir(dumps, "statistics", 0))
    assert code == 0 and "no inf/NaN" in out


def test_parse_prints_an_ops_stack_and_statistics(dumps, capsys):
    code, out, _ = run_cli(capsys, "parse", dumps / "statistics", "Tensor.__mul__.1.forward", "--step", "2")
    assert code == 0
    assert "Tensor.__mul__.1.forward  (in Module.fc2.Layer.forward.0)" in out
    assert "PERTURBED LINE" in out and "1.01" in out and "[8, 32]" in out
    code, _, err = run_cli(capsys, "parse", dumps / "statistics", "Functional.lineer.1.forward", "--step", "2")
    assert code == 2 and "did you mean Functional.linear.1.forward" in err


def test_packed_dumps_compare_like_folders_and_unpack_to_the_same_files(dumps, tmp_path, capsys):
    base_archive, target_archive = tmp_path / "base.tar.gz", tmp_path / "target.tar"
    assert run_cli(capsys, "pack", dumps / "tensor", "-o", base_archive)[0] == 0
    assert run_cli(capsys, "pack", step_dir(dumps, "tensor", 2), "-o", target_archive)[0] == 0
    code, out, _ = run_cli(capsys, "compare-dump", base_archive, target_archive, "--step", "0")
    assert code == 1 and "tensor mode" in out and "first divergence: Tensor.__mul__.1.forward" in out
    assert run_cli(capsys, "unpack", base_archive, "-o", tmp_path / "copy")[0] == 0
    for path in glob.glob(str(dumps / "tensor" / "**" / "*"), recursive=True):
        if os.path.isfile(path):
            copy = tmp_path / "copy" / os.path.relpath(path, dumps / "tensor")
            assert copy.read_bytes() == open(path, "rb").read()
    code, _, err = run_cli(capsys, "unpack", base_archive, "-o", tmp_path / "copy")
    assert code == 2 and "not an empty folder" in err
    assert run_cli(capsys, "pack", dumps / "tensor", "-o", base_archive)[0] == 2  # never overwritten silently
