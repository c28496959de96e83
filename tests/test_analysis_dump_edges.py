"""compare-dump, parse and overflow on small hand-written dumps (tolerance, fuzzy matching, ops in one run only,
ptdbg's JSON-lines .pkl, overflow upstream) and on dumps of TrainingMonitor runs by ascend_tune's own engine."""

from __future__ import annotations

import json
import math
import os

import pytest

from ascend_tune.analysis.dumps.compare import compare_dumps
from ascend_tune.analysis.dumps.read import read_index
from ascend_tune.analysis.dumps.sources import open_location
from ascend_tune.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def load(folder):
    files, refs = open_location(str(folder))
    return read_index(files, refs[0])


def tensor(mx, mn, mean, norm, dtype="torch.float32", shape=(4, 4)):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": mx, "Min": mn, "Mean": mean,
            "Norm": norm, "requires_grad": False}


def write_dump(folder, data, stack=None):
    os.makedirs(folder, exist_ok=True)
    index = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    with open(os.path.join(folder, "dump.json"), "w") as fh:
        json.dump(index, fh)
    if stack is not None:
        with open(os.path.join(folder, "stack.json"), "w") as fh:
            json.dump(stack, fh)
    return folder


def api(inputs, outputs):
    return {"input_args": inputs, "input_kwargs": {}, "output": outputs}


def test_tolerance_depends_on_dtype_and_is_measured_against_the_tensors_magnitude(tmp_path):
    x = tensor(1.0, -1.0, 0.0, 4.0)

    def pair(dtype, drift, mean):
        base = write_dump(tmp_path / f"b{dtype}{drift}", {"Torch.matmul.0.forward": api(
            [x], [tensor(2.0, -2.0, 1e-9, 8.0, dtype)])})
        target = write_dump(tmp_path / f"t{dtype}{drift}", {"Torch.matmul.0.forward": api(
            [x], [tensor(2.0 * (1 + drift), -2.0, mean, 8.0, dtype)])})
        return compare_dumps(load(base), load(target))

    assert pair("torch.bfloat16", 1e-3, 1e-9).first is None  # within bf16's rounding
    assert pair("torch.float32", 1e-3, 1e-9).first.op == "Torch.matmul.0.forward"  # beyond fp32 noise
    assert pair("torch.float32", 0.0, 3e-9).first is None  # mean 1e-9 vs 3e-9 is noise next to max 2.0
    assert pair("torch.float32", 1e-6, 1e-9).first is None


def test_fuzzy_matching_pairs_calls_by_order_when_call_counts_are_shifted(tmp_path, capsys):
    x, h, z = tensor(1, -1, 0, 4), tensor(2, -2, 0, 8), tensor(3, -3, 0, 12)
    base = write_dump(tmp_path / "base", {
        "Functional.linear.0.forward": api([x], [h]), "Functional.linear.1.forward": api([h], [z])})
    target = write_dump(tmp_path / "target", {  # the counter started at 1: one call before the dump began
        "Functional.linear.1.forward": api([x], [h]), "Functional.linear.2.forward": api([h], [z])})
    assert run_cli(capsys, "compare-dump", base, target)[0] == 1
    code, out, _ = run_cli(capsys, "compare-dump", base, target, "--fuzzy")
    assert code == 0 and "API and call order" in out


def test_an_op_only_the_target_has_is_named_when_it_changes_the_next_ops_inputs(tmp_path):
    x, h, h2, z = tensor(1, -1, 0, 4), tensor(2, -2, 0, 8), tensor(3, -3, 0, 12), tensor(4, -4, 0, 16)
    stack = {"0": [["Tensor.__mul__.0.forward"], ["File /home/me/train.py, line 7, in forward, \n h = h * 1.5"]]}
    base = write_dump(tmp_path / "base", {
        "Functional.linear.0.forward": api([x], [h]), "Torch.relu.0.forward": api([h], [h])})
    target = write_dump(tmp_path / "target", {
        "Functional.linear.0.forward": api([x], [h]), "Tensor.__mul__.0.forward": api([h], [h2]),
        "Torch.relu.0.forward": api([h2], [z])}, stack)
    result = compare_dumps(load(base), load(target))
    first = result.first
    assert first.op == "Tensor.__mul__.0.forward" and first.kind == "only in TARGET"
    assert first.next_op == "Torch.relu.0.forward" and first.stack[0].startswith("File /home/me/train.py")
    assert result.only_target == 1


def ptdbg_lines(scale):
    rows = [
        ["Functional_linear_0_forward_input.0", 0, [], "torch.float32", [4, 4], [1.0, -1.0, 0.0]],
        ["Functional_linear_0_forward_output.0", 0, [], "torch.float32", [4, 4], [2.0, -2.0, 0.1]],
        ["Functional_linear_0_forward_stack_info", [["/home/me/train.py", "9", "forward", "y = self.fc(x)"]]],
        ["Functional_relu_0_forward_input.0", 0, [], "torch.float32", [4, 4], [2.0, -2.0, 0.1]],
        ["Functional_relu_0_forward_output.0", 0, [], "torch.float32", [4, 4], [2.0 * scale, 0.0, 0.3 * scale]],
    ]
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def test_ptdbg_pkl_json_lines_are_read_and_compared(tmp_path, capsys):
    for name, scale in (("base", 1.0), ("target", 1.001)):
        folder = tmp_path / name / "ptdbg_dump_v4.0" / "rank0"
        folder.mkdir(parents=True)
        (folder / "api_stack_dump.pkl").write_text(ptdbg_lines(scale))
    code, out, _ = run_cli(capsys, "compare-dump", tmp_path / "base", tmp_path / "target")
    assert code == 1 and "first divergence: Functional_relu_0_forward" in out
    code, out, _ = run_cli(capsys, "parse", tmp_path / "base", "Functional_linear_0_forward")
    assert code == 0 and "/home/me/train.py, line 9" in out and "y = self.fc(x)" in out


def test_a_real_pickle_is_never_unpickled(tmp_path, capsys):
    import pickle

    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    folder = tmp_path / "dump" / "rank0"
    folder.mkdir(parents=True)
    (folder / "dump.pkl").write_bytes(pickle.dumps(Payload()))
    code, _, err = run_cli(capsys, "compare-dump", tmp_path / "dump", tmp_path / "dump")
    assert code == 2 and err.count("\n") == 1
    assert not marker.exists()


def test_inf_in_the_inputs_of_the_first_overflowing_op_points_upstream(tmp_path, capsys):
    write_dump(tmp_path / "d", {
        "Functional.linear.0.forward": api([tensor(1, -1, 0, 4)], [tensor(2, -2, 0, 8)]),
        "Torch.exp.0.forward": api([tensor(math.inf, -2, math.inf, math.inf)], [tensor(math.inf, 0, math.nan, 8)]),
    })
    code, out, _ = run_cli(capsys, "overflow", tmp_path / "d")
    assert code == 1 and "Torch.exp.0.forward" in out and "already hold inf/NaN (input.0)" in out


# --- dumps written by ascend_tune's own engine, through TrainingMonitor ----------------------------------------


def monitored_dump(log_dir, scale):
    """One TrainingMonitor run dumping step 0 with the built-in engine; fc2's output scaled by ``scale``."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.data import DataLoader

    from ascend_tune import AscendTuneError, TrainingMonitor
    from ascend_tune.testing.models import synthetic_classification

    class Layer(nn.Linear):
        def forward(self, x):
            return F.linear(x, self.weight, self.bias) * self.scale  # SCALED LINE

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.fc3 = Layer(16, 32), Layer(32, 32), Layer(32, 4)
            self.fc1.scale = self.fc3.scale = 1.0
            self.fc2.scale = scale

        def forward(self, x):
            return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(synthetic_classification(n=16), batch_size=8)
        precision = dict(backend="builtin", task="statistics", level="mix", steps=[0])
        with TrainingMonitor(model, optimizer, loader, log_dir=str(log_dir), quiet=True, precision=precision):
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    except AscendTuneError as exc:
        pytest.skip(f"the built-in dump engine is not available here: {exc}")
    finally:
        torch.set_num_threads(threads)
    return log_dir / "dump"


def test_builtin_engine_dumps_of_monitored_runs_compare_like_msprobes(tmp_path, capsys):
    base, same, scaled = (monitored_dump(tmp_path / name, s) for name, s in (("a", 1.0), ("b", 1.0), ("c", 1.01)))
    code, out, _ = run_cli(capsys, "compare-dump", base, same)
    assert code == 0 and "verdict: PASS" in out
    code, out, _ = run_cli(capsys, "compare-dump", base, scaled)
    assert code == 1
    assert "first divergence: Tensor.__mul__.1.forward" in out and "SCALED LINE" in out
