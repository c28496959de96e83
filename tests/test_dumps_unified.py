"""One dump reader and one overflow rule: the monitor, ``ascend-tune overflow`` and ``ascend-tune report`` agree."""

from __future__ import annotations

import inspect
import json
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import read_jsonl
from torch import nn
from torch.utils.data import DataLoader

from ascend_tune import TrainingMonitor
from ascend_tune.analysis.dumps.overflow import find_overflows, overflow_report
from ascend_tune.analysis.dumps.read import read_dump
from ascend_tune.analysis.dumps.sources import find_refs
from ascend_tune.analysis.dumps.stacks import parse_stacks
from ascend_tune.cli import main
from ascend_tune.testing.models import TinyMLP, synthetic_classification

pytestmark = pytest.mark.usefixtures("one_thread")


class MaskedThenOverflows(nn.Module):
    """An op that receives -inf and returns finite values, then the op that really makes the inf."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)
        self.register_buffer("floor", torch.tensor(float("-inf")))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.maximum(self.fc1(x), self.floor)  # receives -inf, returns finite values
        h = torch.exp(h * 100.0)  # overflows here
        return self.fc2(h)


def train(log_dir, model_cls, **precision):
    torch.manual_seed(0)
    model = model_cls()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(synthetic_classification(n=16), batch_size=8)
    with TrainingMonitor(model, optimizer, loader, log_dir=log_dir, quiet=True, tune=False, precision=precision):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return log_dir / "dump"


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def load(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def test_the_monitor_the_overflow_command_and_the_report_name_the_same_first_op(tmp_path, capsys):
    dump = train(tmp_path, MaskedThenOverflows, task="overflow_check", level="mix", steps=[0, 1])
    first_line = inspect.getsourcelines(MaskedThenOverflows)[1] + next(
        i for i, line in enumerate(inspect.getsourcelines(MaskedThenOverflows)[0]) if "overflows here" in line)

    # the case the two former rules disagreed on: the first op that *sees* an inf only received it
    ops = read_dump(dump / "step0").ops
    first_seen = next(op for op in ops if any(leaf.overflow for leaf in op.leaves))
    assert first_seen.name != "Torch.exp.0.forward"
    maximum = next(op for op in ops if op.name == "Torch.maximum.0.forward")
    assert any(leaf.overflow for leaf in maximum.inputs) and not any(leaf.overflow for leaf in maximum.outputs)
    assert [op.name for op in ops].index("Torch.maximum.0.forward") < [op.name for op in ops].index(
        "Torch.exp.0.forward")

    # the monitor: overflow.json, its warning, summary.json
    recorded = load(dump / "rank0" / "overflow.json")["overflows"]
    assert len(recorded) == 1 and recorded[0]["name"] == "Torch.exp.0.forward" and recorded[0]["produced_here"]
    assert recorded[0]["stack"][0]["line"] == first_line
    warnings = [r["message"] for r in read_jsonl(tmp_path / "metrics.jsonl") if r.get("event") == "warning"]
    assert len(warnings) == 1 and "Torch.exp.0.forward" in warnings[0]
    assert load(tmp_path / "summary.json")["precision"]["first_overflow"] == "Torch.exp.0.forward"

    # ascend-tune overflow on the kept dump, and on the monitor's overflow.json
    code, out, _ = run_cli(capsys, "overflow", dump / "step0")
    assert code == 1 and "first inf/NaN: Torch.exp.0.forward" in out and "produced here" in out
    assert f"line {first_line}" in out
    code, out, _ = run_cli(capsys, "overflow", dump / "rank0" / "overflow.json")
    assert code == 1 and "first inf/NaN: Torch.exp.0.forward" in out

    # ascend-tune report: its first overflow row
    assert run_cli(capsys, "report", tmp_path, "--no-advise")[0] == 1
    rows = [line for line in (tmp_path / "report.md").read_text().splitlines() if line.startswith("- inf/nan in")]
    assert rows and rows[0].startswith("- inf/nan in Torch.exp.0.forward (output.0) at step 0")

    # and the library call
    assert find_overflows(str(dump), first_only=True)[0].name == "Torch.exp.0.forward"


def test_every_overflow_is_listed_producers_first_and_modules_after_the_op_inside_them(tmp_path):
    dump = train(tmp_path, MaskedThenOverflows, task="statistics", level="mix", steps=[0])
    found = find_overflows(str(dump))
    names = [o.name for o in found]
    assert names[0] == "Torch.exp.0.forward"
    produced = [o for o in found if o.produced_here]
    assert [o.name for o in produced][:1] == ["Torch.exp.0.forward"]
    assert names.index("Module.fc2.Linear.forward.0") > names.index("Torch.exp.0.forward")
    fc2 = next(o for o in found if o.name == "Functional.linear.1.forward")
    assert not fc2.produced_here and fc2.inputs == ("input.0",)  # it received the inf
    assert found[len(produced):] and not any(o.produced_here for o in found[len(produced):])
    # a backward computes from its forward's tensors: the gradient of exp(inf) received the inf
    exp_grad = next(o for o in found if o.name == "Torch.exp.0.backward")
    assert not exp_grad.produced_here and any(slot.startswith("forward.") for slot in exp_grad.inputs)
    assert "Torch.maximum.0.forward" not in names  # finite outputs are no overflow, whatever came in
    assert [o.name for o in find_overflows(str(dump), first_only=True)] == ["Torch.exp.0.forward"]


def test_an_overflow_json_with_no_overflow_is_a_pass(tmp_path, capsys):
    dump = train(tmp_path, TinyMLP, task="overflow_check", steps=[0, 1])
    recorded = dump / "rank0" / "overflow.json"
    assert load(recorded)["overflows"] == []
    for given in (recorded, recorded.parent, dump):  # the file, its rank folder, the dump that kept no step
        code, out, err = run_cli(capsys, "overflow", given)
        assert (code, err) == (0, "") and "no overflow" in out
        assert "step(s) 0, 1 checked" in out
    report = overflow_report(str(recorded))
    assert report.first is None and report.overflowing_ops == 0


def test_a_broken_overflow_json_is_bad_input(tmp_path, capsys):
    (tmp_path / "overflow.json").write_text('{"rank": 0}')
    code, _, err = run_cli(capsys, "overflow", tmp_path / "overflow.json")
    assert code == 2 and "not an overflow.json" in err


def test_stack_json_is_read_in_every_form():
    frame = "File /home/me/train.py, line 7, in forward, \n h = h * 1.5"
    grouped = parse_stacks({"0": [["Torch.exp.0.forward", "Torch.exp.1.forward"], [frame]],
                            "any key": [["Tensor.__mul__.0.forward"], [frame]]})
    assert grouped == {name: (frame,) for name in ("Torch.exp.0.forward", "Torch.exp.1.forward",
                                                    "Tensor.__mul__.0.forward")}
    assert parse_stacks({"Torch.exp.0.forward": [frame]}) == {"Torch.exp.0.forward": (frame,)}
    listed = parse_stacks({"Torch.exp.0.forward": [["/home/me/train.py", 7, "forward", "h = h * 1.5"]]})
    assert listed == {"Torch.exp.0.forward": (frame,)}
    assert parse_stacks(["not", "a", "dict"]) == {}


def test_dumps_are_found_in_step_and_rank_order_in_every_layout():
    refs = find_refs([
        "step10/rank0/dump.json", "step2/rank1/dump.json", "step2/rank0/dump.json", "step2/proc4242/dump.json",
        "step3/rank0/dump.journal", "step3/rank0/dump.json", "step4/rank0/dump.journal",
        "step5/ptdbg_dump_v4.0/rank3/api_stack_dump.pkl", "notes.json",
    ])
    assert [(r.step, r.rank, r.layout) for r in refs] == [
        (2, None, "msprobe"), (2, 0, "msprobe"), (2, 1, "msprobe"), (3, 0, "msprobe"), (4, 0, "msprobe"),
        (5, 3, "ptdbg"), (10, 0, "msprobe"),
    ]
    assert [r.index for r in refs if r.step in (3, 4)] == ["step3/rank0/dump.json", "step4/rank0/dump.journal"]


def test_the_runtime_and_the_offline_reader_are_one(tmp_path):
    dump = train(tmp_path, MaskedThenOverflows, task="statistics", level="L1", steps=[0])
    read = read_dump(dump / "step0")
    exp = read.by_name["Torch.exp.0.forward"]
    assert exp.outputs[0].stats.max == math.inf and read.data["Torch.exp.0.forward"]["output"][0]["Max"] == math.inf
    assert read.stack_of("Torch.exp.0.backward") == read.stack_of("Torch.exp.0.forward") == exp.frames
    assert read.path == str(dump / "step0" / "rank0") and (read.step, read.rank, read.complete) == (0, 0, True)


def test_compare_metrics_are_named_and_the_csv_columns_come_from_one_map(tmp_path):
    import csv
    import io

    from ascend_tune.analysis.dumps.compare import compare_dumps
    from ascend_tune.analysis.dumps.differences import COLUMNS, StatsDiff
    from ascend_tune.analysis.dumps.table import columns, compare_csv

    def write(folder, norm):
        folder.mkdir()
        out = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "Max": 2.0, "Min": -2.0,
               "Mean": 0.0, "Norm": norm, "requires_grad": False}
        data = {"Torch.exp.0.forward": {"input_args": [dict(out, Norm=4.0)], "input_kwargs": {}, "output": [out]}}
        (folder / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "data": data}))
        return read_dump(folder)

    result = compare_dumps(write(tmp_path / "base", 8.0), write(tmp_path / "target", 10.0))
    row = next(r for r in result.rows if r.slot == "output.0")
    assert isinstance(row.stats, StatsDiff) and row.stats.norm_diff == 2.0 and row.stats.norm_rel == 0.25
    assert columns("statistics")[8:16] == [COLUMNS[name] for name in StatsDiff._fields]
    cells = {r["NPU Name"]: r for r in csv.DictReader(io.StringIO(compare_csv(result).decode()))}
    written = cells["Torch.exp.0.forward.output.0"]
    assert written[COLUMNS["norm_diff"]] == "2.0" and written[COLUMNS["norm_rel"]] == "25.0%"
    assert written["NPU l2norm"] == "10.0" and written["Bench l2norm"] == "8.0"


def test_an_inf_from_the_data_is_named_where_it_first_arrives_and_said_to_come_from_outside(tmp_path, capsys):
    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = synthetic_classification(n=16)
    data.tensors[0][0, 0] = float("inf")  # a broken sample: no recorded op makes this inf
    loader = DataLoader(data, batch_size=8)
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, tune=False,
                         precision=dict(task="overflow_check", steps=[0])):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    first = load(tmp_path / "dump" / "rank0" / "overflow.json")["overflows"][0]
    assert (first["name"], first["produced_here"], first["inputs"]) == ("Functional.linear.0.forward", False,
                                                                        ["input.0"])
    warnings = [r["message"] for r in read_jsonl(tmp_path / "metrics.jsonl") if r.get("event") == "warning"]
    assert "Functional.linear.0.forward received" in warnings[0]
    code, out, _ = run_cli(capsys, "overflow", tmp_path / "dump" / "step0")
    assert code == 1 and "first inf/NaN: Functional.linear.0.forward" in out and "already hold inf/NaN" in out


class Compares(nn.Module):
    """Comparisons whose bool results (a 0-d one, and a mask with both values) are dumped as true / false."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = x > 0  # Max true, Min false
        out = self.fc(torch.where(mask, x, torch.zeros_like(x)))
        if (out.abs().max() < 1e9).item():  # a 0-d bool: all four statistics true
            return out
        return out * 0


@pytest.mark.parametrize("task", ["statistics", "overflow_check"])
def test_a_comparisons_bool_result_is_no_overflow(tmp_path, capsys, task):
    # nanoGPT's `if losses['val'] < best_val_loss:` once read as an inf/NaN made by Tensor.__lt__
    dump = train(tmp_path, Compares, task=task, level="L1", steps=[0])
    assert not (dump / "rank0" / "overflow.json").exists() or load(dump / "rank0" / "overflow.json")["overflows"] == []
    if task == "statistics":
        data = load(dump / "step0" / "rank0" / "dump.json")["data"]
        results = [data[n]["output"][0] for n in data if n.startswith(("Tensor.__gt__", "Tensor.__lt__"))]
        assert {(r["dtype"], r["Max"], r["Min"]) for r in results} == {("torch.bool", True, False),
                                                                     ("torch.bool", True, True)}
        assert find_overflows(dump) == []
        code, out, _ = run_cli(capsys, "overflow", dump / "step0")
        assert code == 0 and "no overflow" in out
