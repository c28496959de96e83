"""Overflow check: the first op whose outputs hold inf/nan, with the user's line, live and on a finished dump."""

from __future__ import annotations

import inspect
import json
import os

import pytest
import torch
import torch.nn.functional as F
from conftest import read_jsonl
from torch import nn
from torch.utils.data import DataLoader

from ascend_tune import TrainingMonitor
from ascend_tune.precision import find_overflows
from ascend_tune.testing.models import TinyMLP, synthetic_classification

pytestmark = pytest.mark.usefixtures("one_thread")


class Overflows(nn.Module):
    """exp of large activations: inf in the forward at a known line."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x) * 100.0
        h = torch.exp(h)  # overflows here
        return self.fc2(h)


class BackwardOverflows(nn.Module):
    """sqrt(0) is finite; its gradient 1 / (2 sqrt(0)) is not: the first overflow is in the backward."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(x)
        return out + torch.sqrt(out - out.detach())


def line_of(cls, marker: str) -> int:
    lines, first = inspect.getsourcelines(cls)
    return first + next(i for i, line in enumerate(lines) if marker in line)


def run(tmp_path, model_cls, batches=4, **precision):
    torch.manual_seed(0)
    model = model_cls()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(synthetic_classification(n=8 * batches), batch_size=8)
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, tune=False, precision=precision):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return tmp_path / "dump"


def load(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def test_the_report_names_the_op_that_made_the_inf_first_with_the_users_line(tmp_path):
    dump = run(tmp_path, Overflows, task="overflow_check", steps=[0, 1, 2])
    report = load(dump / "rank0" / "overflow.json")
    assert report["overflow_nums"] == 1 and len(report["overflows"]) == 1
    first = report["overflows"][0]
    assert (first["name"], first["step"], first["tensor"]) == ("Torch.exp.0.forward", 0, "output.0")
    assert first["max"] == float("inf")
    frame = first["stack"][0]
    assert frame["file"] == __file__ and frame["line"] == line_of(Overflows, "overflows here")
    assert frame["code"] == "h = torch.exp(h)  # overflows here"
    # overflow_nums reached at step 0: later steps are not checked, only the overflowing step is kept
    assert report["steps_checked"] == [0] and report["steps_kept"] == [0]
    assert sorted(os.listdir(dump)) == ["rank0", "step0"]
    warnings = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r.get("event") == "warning"]
    assert len(warnings) == 1 and "Torch.exp.0.forward" in warnings[0]["message"]
    assert f"{os.path.basename(__file__)}:{frame['line']}" in warnings[0]["message"]
    summary = load(tmp_path / "summary.json")["precision"]
    assert summary["overflows"] == 1 and summary["first_overflow"] == "Torch.exp.0.forward"


def test_unlimited_overflow_nums_reports_every_overflowing_op_in_order(tmp_path):
    dump = run(tmp_path, Overflows, task="overflow_check", steps=[0, 1], overflow_nums=-1)
    overflows = load(dump / "rank0" / "overflow.json")["overflows"]
    names = [o["name"] for o in overflows if o["step"] == 0]
    assert names[0] == "Torch.exp.0.forward"
    assert "Functional.linear.1.forward" in names  # fc2 received inf and produced inf/nan too
    assert "Tensor.__mul__.0.forward" not in names  # finite outputs are not overflows
    assert {o["step"] for o in overflows} == {0, 1}
    warnings = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r.get("event") == "warning"]
    assert len(warnings) == 1  # warned once, not per op or per step


def test_a_backward_overflow_is_found_in_the_gradients(tmp_path):
    dump = run(tmp_path, BackwardOverflows, task="overflow_check", steps=[0])
    first = load(dump / "rank0" / "overflow.json")["overflows"][0]
    assert first["name"] == "Torch.sqrt.0.backward" and first["tensor"].startswith("output")
    assert first["stack"][0]["line"] == line_of(BackwardOverflows, "torch.sqrt(")  # its forward's call


def test_a_clean_run_keeps_no_step_and_an_empty_report(tmp_path):
    dump = run(tmp_path, TinyMLP, task="overflow_check", steps="0-2")
    report = load(dump / "rank0" / "overflow.json")
    assert report["overflows"] == [] and report["steps_checked"] == [0, 1, 2] and report["steps_kept"] == []
    assert os.listdir(dump) == ["rank0"]
    run(tmp_path, TinyMLP, task="overflow_check", steps=[0])  # a second check never overwrites the first report
    moved = list(tmp_path.glob("previous-*/dump/rank0/overflow.json"))
    assert len(moved) == 1 and load(moved[0])["steps_checked"] == [0, 1, 2]
    assert load(dump / "rank0" / "overflow.json")["steps_checked"] == [0]


def test_find_overflows_reads_a_finished_statistics_dump(tmp_path):
    dump = run(tmp_path, Overflows, steps=[0, 2])
    found = find_overflows(str(dump))
    assert [(o.step, o.name) for o in found][:1] == [(0, "Torch.exp.0.forward")]
    assert {o.step for o in found} == {0, 2}
    assert found[0].stack[0].line == line_of(Overflows, "overflows here")
    assert [o.name for o in find_overflows(str(dump / "step2" / "rank0"))] == [
        o.name for o in found if o.step == 2
    ]
    clean = run(tmp_path / "clean", TinyMLP, steps=[0])
    assert find_overflows(str(clean)) == []
