"""Callbacks follow the step clock: begin / end per step with the log's numbers, events in metrics.jsonl."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import read_jsonl

from ascend_tune import AscendTuneError, TrainingMonitor
from ascend_tune.contract.callbacks import Callback


class Recorder(Callback):
    name = "recorder"

    def __init__(self):
        self.calls = []

    def on_enter(self, mon, stack):
        self.calls.append("enter")
        stack.callback(self.calls.append, "undo")

    def on_step_begin(self, mon, step):
        self.calls.append(("begin", step))

    def on_step_end(self, mon, step):
        self.calls.append(("end", step))
        if step == 1:
            mon.record_event("marker", step=step, note="seen")

    def on_exit(self, mon, exc_type):
        self.calls.append(("exit", exc_type))

    def summary(self):
        return {"steps_seen": sum(1 for c in self.calls if c[0] == "end")}


def test_callbacks_see_each_step_with_the_log_numbers(setup, tmp_path):
    model, optimizer, loader = setup
    rec = Recorder()
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, start_step=5, callbacks=[rec]):
        for i, (x, y) in enumerate(loader):
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            if i == 2:
                break
    assert rec.calls == [
        "enter", ("begin", 5), ("end", 5), ("begin", 6), ("end", 6), ("begin", 7), ("end", 7), ("begin", 8),
        ("exit", None), "undo",
    ]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["recorder"] == {"steps_seen": 3}


def test_events_go_to_metrics_jsonl_beside_the_step_records(setup, tmp_path):
    model, optimizer, loader = setup

    class AtStep1(Recorder):
        def on_step_end(self, mon, step):
            if step == 1:
                mon.record_event("marker", step=step, note="seen")

    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, callbacks=[AtStep1()]):
        for x, y in loader:
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    events = [r for r in records if "event" in r]
    assert [(e["event"], e["step"], e["note"]) for e in events] == [("marker", 1, "seen")]
    assert len([r for r in records if "event" not in r]) == 8


def test_a_callback_must_be_a_callback():
    with pytest.raises(AscendTuneError, match="Callback objects"):
        TrainingMonitor(torch.nn.Linear(2, 2), callbacks=[object()])


class StepCounts(Callback):
    """Reads along, per step, its number and its double as a (steps, 2) tensor: a shape the read flattens."""

    name = "step_counts"

    def __init__(self):
        self.seen = []

    def read_along(self, mon, entries):
        return torch.tensor([[float(e.step), 2.0 * e.step] for e in entries])

    def on_window(self, mon, window, values):
        self.seen.append(values)
        return {"counted": values[-2]}


@pytest.mark.parametrize("health", [None, True], ids=["alone", "beside-health"])
def test_a_callbacks_read_along_values_come_back_flattened_alone_or_beside_another_riders(setup, tmp_path, health):
    model, optimizer, loader = setup
    counts = StepCounts()
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, log_every=4, callbacks=[counts],
                         health=health):
        for x, y in loader:
            F.cross_entropy(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
    assert counts.seen == [[0.0, 0.0, 1.0, 2.0, 2.0, 4.0, 3.0, 6.0], [4.0, 8.0, 5.0, 10.0, 6.0, 12.0, 7.0, 14.0]]
    records = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "event" not in r]
    assert [r["counted"] for r in records] == [3.0, 7.0]
    assert all((r.get("grad_norm") is not None) == bool(health) for r in records)
