"""One call model for both engines' dumps, on small hand-written dumps in each engine's convention: arguments pair
by parameter (positional or keyword), a missing one against its default, older builtin dumps read the same;
string / bool / int arguments are verdicts; Mean / Norm tolerances follow the element count; reflected operators
pair across engines; a backward gradient recorded through a view (SDPA's math path, dumped here for real) pairs."""

from __future__ import annotations

import csv
import json
import os

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from ascend_tune import TrainingMonitor
from ascend_tune.analysis.dumps.compare import compare_dumps
from ascend_tune.analysis.dumps.read import read_dump
from ascend_tune.cli import main
from ascend_tune.testing.torch_features import sdpa_kernel_missing

BUILTIN = {"name": "ascend_tune", "version": "0.1.0", "call_model": 2}


def tensor(mx=1.0, mn=-1.0, mean=0.0, norm=4.0, shape=(2, 8, 16), dtype="torch.float32"):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": mx, "Min": mn, "Mean": mean,
            "Norm": norm, "requires_grad": False}


def value(v):
    return {"type": type(v).__name__, "value": v}


def write(folder, data, writer=None):
    os.makedirs(folder, exist_ok=True)
    index = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    if writer:
        index["writer"] = writer
    with open(os.path.join(folder, "dump.json"), "w") as fh:
        json.dump(index, fh)
    return str(folder)


def layer_norm(*args, **kwargs):
    return {"Functional.layer_norm.0.forward": {"input_args": list(args), "input_kwargs": kwargs,
                                                "output": [tensor(2.0, -2.0, 0.0, 16.0)]}}


X, SHAPE, W, B = tensor(), {"type": "torch.Size", "value": [16]}, tensor(1.0, 1.0, 1.0, 4.0, (16,)), \
    tensor(0.0, 0.0, 0.0, 0.0, (16,))


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_an_older_builtin_dump_pairs_with_msprobes_slots_and_its_dropped_defaults_stand_in(tmp_path, capsys):
    # what the builtin engine wrote before call model 2 for nn.LayerNorm's F.layer_norm(x, shape, w, b, 1e-5): the
    # keywords layer_norm forwards, the default eps left out, no writer header
    old = write(tmp_path / "old", layer_norm(X, SHAPE, weight=W, bias=B))
    same = write(tmp_path / "msprobe", layer_norm(X, SHAPE, W, B, value(1e-05)))
    changed = write(tmp_path / "eps", layer_norm(X, SHAPE, W, B, value(2e-05)))
    for base, target in ((old, same), (same, old)):
        code, out, _ = run(capsys, "compare-dump", base, target)
        assert code == 0, out
        assert "written by: base msprobe, target msprobe" in out  # an older builtin dump reads as msprobe's layout
    code, out, _ = run(capsys, "compare-dump", old, changed, "-o", tmp_path / "out")
    assert code == 1 and "first divergence: Functional.layer_norm.0.forward" in out
    assert "eps 1e-05 vs 2e-05" in out
    with open(tmp_path / "out" / "compare_result.csv", encoding="utf-8") as fh:
        rows = {row["NPU Name"]: row for row in csv.DictReader(fh)}
    eps = rows["Functional.layer_norm.0.forward.input.4"]
    assert eps["Bench Name"] == "N/A" and eps["Bench max"] == "1e-05" and eps["NPU max"] == "2e-05"
    assert eps["Result"] == "error" and "BASE does not record eps: its default is compared" in eps["Err_message"]
    # weight and bias pair by role: keyword slots in one dump, positions 2 and 3 in the other
    assert rows["Functional.layer_norm.0.forward.input.2"]["Bench Name"].endswith("input.weight")
    assert rows["Functional.layer_norm.0.forward.input.3"]["Result"] == "pass"


def test_an_argument_one_dump_lacks_and_passes_at_its_default_agrees(tmp_path):
    base = write(tmp_path / "b", {"Functional.gelu.0.forward": {"input_args": [X], "input_kwargs": {},
                                                                "output": [tensor()]}})
    target = write(tmp_path / "t", {"Functional.gelu.0.forward": {
        "input_args": [X], "input_kwargs": {"approximate": value("none")}, "output": [tensor()]}})
    tanh = write(tmp_path / "tanh", {"Functional.gelu.0.forward": {
        "input_args": [X], "input_kwargs": {"approximate": value("tanh")}, "output": [tensor()]}})
    assert compare_dumps(read_dump(base), read_dump(target)).passed
    result = compare_dumps(read_dump(base), read_dump(tanh))
    assert result.first.op == "Functional.gelu.0.forward" and "approximate 'none' vs 'tanh'" in result.first.reason
    row = next(r for r in result.rows if r.parameter == "approximate")
    assert row.stand_in == "BASE" and row.result == "error"


@pytest.mark.parametrize("base_value, target_value, what", [
    (True, False, "is_causal True vs False"), (1, 2, "dim 1 vs 2"), ("mean", "sum", "'mean' vs 'sum'"),
])
def test_differing_string_bool_and_int_arguments_are_error_rows_and_the_divergence(tmp_path, base_value,
                                                                                   target_value, what):
    def dump(name, v):
        if isinstance(v, bool):
            entry = {"input_args": [X, X, X], "input_kwargs": {"is_causal": value(v)}, "output": [tensor()]}
            return write(tmp_path / name, {"Functional.scaled_dot_product_attention.0.forward": entry})
        if isinstance(v, int):
            return write(tmp_path / name, {"Torch.softmax.0.forward": {"input_args": [X, value(v)],
                                                                        "input_kwargs": {}, "output": [tensor()]}})
        return write(tmp_path / name, {"Unknown.api.0.forward": {"input_args": [X], "input_kwargs": {
            "reduction": value(v)}, "output": [tensor()]}})

    result = compare_dumps(read_dump(dump("b", base_value)), read_dump(dump("t", target_value)))
    assert result.first is not None and result.first.kind == "argument"
    assert what in result.first.reason
    bad = [r for r in result.rows if r.result == "error"]
    assert len(bad) == 1 and bad[0].role == "input" and bad[0].target.kind in ("scalar", "other")


def reduction_pair(tmp_path, name, norm_target, numel_shape, writer=None):
    base = write(tmp_path / f"{name}b", {"Torch.matmul.0.forward": {"input_args": [X], "input_kwargs": {},
                                                                     "output": [tensor(0.002, -0.0019, 1e-6,
                                                                                       0.04415314, numel_shape)]}},
                 BUILTIN)
    target = write(tmp_path / f"{name}t", {"Torch.matmul.0.forward": {"input_args": [X], "input_kwargs": {}, "output": [
        tensor(0.002, -0.0019, 1e-6, norm_target, numel_shape)]}}, writer)
    return compare_dumps(read_dump(base), read_dump(target))


def test_mean_and_norm_tolerances_follow_the_element_count_so_engines_agree(tmp_path):
    big = (8, 64, 512)  # 262144 elements: the builtin and msprobe norms of one such tensor differed by 2.8e-5 here
    # the figures of the issue: Norm 0.04415314 (builtin) vs 0.04415367 (msprobe), 1.2e-5 apart
    assert reduction_pair(tmp_path, "noise", 0.04415367, big).passed
    drift = reduction_pair(tmp_path, "drift", 0.04415314 * 1.001, big)  # a 1e-3 drift is still caught
    assert drift.first is not None and drift.first.op == "Torch.matmul.0.forward"
    assert "Norm differs by 0.000999" in drift.first.reason and "summed over 262144 elements" in drift.first.reason
    assert "BASE's statistics by ascend_tune 0.1.0 (builtin engine), TARGET's by msprobe" in drift.first.reason
    small = reduction_pair(tmp_path, "small", 0.04415367, (4, 4), BUILTIN)  # 16 elements sum with little noise
    assert small.first is not None and "tolerance 1e-05)" in small.first.reason and "TARGET's by" not in \
        small.first.reason


def test_reflected_operators_pair_by_call_order_across_engines(tmp_path):
    def mul(v):
        return {"input_args": [X, value(v)], "input_kwargs": {}, "output": [tensor()]}

    # `2 * x` then `y * 3`: the builtin engine names both Tensor.__mul__, msprobe the first Tensor.__rmul__
    builtin = write(tmp_path / "b", {"Tensor.__mul__.0.forward": mul(2.0), "Tensor.__mul__.1.forward": mul(3.0)},
                    BUILTIN)
    msprobe = write(tmp_path / "m", {"Tensor.__rmul__.0.forward": mul(2.0), "Tensor.__mul__.0.forward": mul(3.0)})
    changed = write(tmp_path / "c", {"Tensor.__rmul__.0.forward": mul(2.0), "Tensor.__mul__.0.forward": mul(3.5)})
    for base, target in ((builtin, msprobe), (msprobe, builtin)):
        for fuzzy in (False, True):
            result = compare_dumps(read_dump(base), read_dump(target), fuzzy=fuzzy)
            assert result.passed and result.only_target == result.only_base == 0
    result = compare_dumps(read_dump(builtin), read_dump(changed))
    assert result.first.op == "Tensor.__mul__.0.forward" and "3.0 vs 3.5" in result.first.reason


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x):
        q = self.proj(x).view(2, 16, 4, 8).transpose(1, 2)  # [B, H, T, D]
        return F.scaled_dot_product_attention(q, q, q, is_causal=True).sum()


def sdpa_dump(log_dir, kernel, scale=1.0):
    from torch.nn.attention import sdpa_kernel  # torch 2.3

    torch.manual_seed(0)
    model = Attention()
    with torch.no_grad():
        model.proj.weight.mul_(scale)
    loader = DataLoader(TensorDataset(torch.randn(2, 16, 32)), batch_size=2)
    with TrainingMonitor(model, train_loader=loader, log_dir=str(log_dir), quiet=True, tune=False,
                         precision=dict(backend="builtin", level="L1", steps=[0])):
        for (x,) in loader:
            with sdpa_kernel(kernel):
                model(x).backward()
    return log_dir / "dump" / "step0"


def test_sdpa_math_and_flash_paths_pair_though_their_backward_gradients_are_other_views(tmp_path, capsys):
    if sdpa_kernel_missing():
        pytest.skip(sdpa_kernel_missing())
    from torch.nn.attention import SDPBackend  # torch 2.3

    flash = sdpa_dump(tmp_path / "flash", SDPBackend.FLASH_ATTENTION)
    math_path = sdpa_dump(tmp_path / "math", SDPBackend.MATH)
    backward = "Functional.scaled_dot_product_attention.0.backward"
    shapes = [[leaf.shape for leaf in read_dump(d).by_name[backward].outputs] for d in (flash, math_path)]
    assert shapes == [[(2, 4, 16, 8)] * 3, [(8, 16, 8)]]  # dq, dk, dv of the kernel; one view node's gradient
    for base, target in ((flash, math_path), (math_path, flash)):
        code, out, _ = run(capsys, "compare-dump", base, target)
        assert code == 0, out
    changed = sdpa_dump(tmp_path / "changed", SDPBackend.MATH, scale=1.001)
    code, out, _ = run(capsys, "compare-dump", flash, changed)
    assert code == 1 and "first divergence: Functional.linear.0.forward" in out


def test_a_view_in_the_forward_is_still_a_divergence(tmp_path):
    base = write(tmp_path / "b", {"Torch.matmul.0.forward": {"input_args": [X], "input_kwargs": {},
                                                             "output": [tensor(shape=(16, 16))]}})
    target = write(tmp_path / "t", {"Torch.matmul.0.forward": {"input_args": [X], "input_kwargs": {},
                                                               "output": [tensor(shape=(256,))]}})
    result = compare_dumps(read_dump(base), read_dump(target))
    assert result.first.op == "Torch.matmul.0.forward" and "shape [16, 16] in BASE, [256] in TARGET" in \
        result.first.reason
