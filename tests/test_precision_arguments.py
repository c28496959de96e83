"""The builtin engine records an API's arguments as the caller passed them (msprobe's slots), also for Python-level
torch functions whose torch-function call forwards every parameter by keyword; and the parameter table the offline
compare reads matches this torch."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from ascend_tune import TrainingMonitor
from ascend_tune.analysis.dumps import calls
from ascend_tune.precision import read_dump, signatures


class Calls(torch.nn.Module):
    """One call of each form the call-site reading tells apart."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(8))

    def forward(self, x):
        a = F.layer_norm(x, (8,), self.w, None, 1e-5)  # all positional, defaults included
        b = F.layer_norm(x, (8,), weight=self.w)  # keywords; bias and eps left out
        c = x.split(4, dim=1)[0]  # a Python-level Tensor method: self is positional
        d = x.split(2)[1]
        e = F.softmax(x, -1)
        args = (x, 0.0, True)
        f = F.dropout(*args)  # a call site with *args: kept as the function forwarded it
        g = F.cross_entropy(x, torch.zeros(4, dtype=torch.long), ignore_index=-1)
        h = F.gelu(x, approximate="tanh")  # C-level: the mode sees the call as made
        return (a + b + f + h).sum() + c.sum() + d.sum() + e.sum() + g


def slots(entry) -> tuple:
    args = tuple((v or {}).get("type") if not isinstance(v, list) else "list" for v in entry["input_args"])
    return args, tuple(entry["input_kwargs"])


def test_arguments_are_recorded_as_the_caller_passed_them(tmp_path):
    model = Calls()
    loader = DataLoader(TensorDataset(torch.randn(4, 8)), batch_size=4)
    with TrainingMonitor(model, train_loader=loader, log_dir=str(tmp_path), quiet=True, tune=False,
                         precision=dict(backend="builtin", level="L1", steps=[0])):
        for (x,) in loader:
            model(x).backward()
    data = read_dump(tmp_path / "dump" / "step0").data
    tensor, size = "torch.Tensor", "list"
    assert slots(data["Functional.layer_norm.0.forward"]) == ((tensor, size, tensor, None, "float"), ())
    assert data["Functional.layer_norm.0.forward"]["input_args"][4]["value"] == 1e-5
    assert slots(data["Functional.layer_norm.1.forward"]) == ((tensor, size), ("weight",))
    assert slots(data["Tensor.split.0.forward"]) == ((tensor, "int"), ("dim",))
    assert slots(data["Tensor.split.1.forward"]) == ((tensor, "int"), ())
    assert slots(data["Functional.softmax.0.forward"]) == ((tensor, "int"), ())
    assert slots(data["Functional.dropout.0.forward"]) == ((tensor,), ("p", "training", "inplace"))
    assert slots(data["Functional.cross_entropy.0.forward"]) == ((tensor, tensor), ("ignore_index",))
    assert slots(data["Functional.gelu.0.forward"]) == ((tensor,), ("approximate",))
    # a keyword and a position name one parameter for the compare
    assert calls.argument("Functional.layer_norm", "input.4")[0] == calls.argument("Functional.layer_norm",
                                                                                   "input.eps")[0] == "arg.eps"
    assert calls.argument("Functional.dropout", "input.1")[0] == "arg.p"


def test_the_shipped_parameter_table_is_the_one_this_torch_gives():
    shipped = open(signatures.TABLE, encoding="utf-8").read()
    table_torch, this_torch = json.loads(shipped)["torch"], torch.__version__.split("+")[0]
    if table_torch.split(".")[:2] != this_torch.split(".")[:2]:
        pytest.skip(f"the table is written from torch {table_torch}; torch {this_torch}'s parameter lists differ "
                    "where later torches added parameters (scaled_dot_product_attention's enable_gqa, ...)")
    assert signatures.render(signatures.build()) == shipped, "rewrite it: python -m ascend_tune.precision.signatures"


def test_the_table_names_the_parameters_the_compare_pairs_by():
    layer_norm = calls.signature("Functional.layer_norm")
    assert [p.name for p in layer_norm.positional] == ["input", "normalized_shape", "weight", "bias", "eps"]
    assert layer_norm.by_name["eps"].default == 1e-05
    gelu = calls.signature("Functional.gelu")
    assert [p.name for p in gelu.positional] == ["input"] and gelu.by_name["approximate"].default == "none"
    assert calls.signature("Torch.max").positional[1] is None  # max(x, dim) and max(x, other): no one name
