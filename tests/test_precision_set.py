"""precision=[...]: several precision configs in one run, e.g. a statistics dump and a replay of the same step (the
demo's target does both at step 0). Each part must write exactly what it writes alone, and the run must compute
exactly what it computes unmonitored."""

from __future__ import annotations

import csv
import json
import os
import sys

import pytest
import torch
from conftest import train_gpt

from ascend_tune import AscendTuneError, PrecisionConfig
from ascend_tune.precision import backends
from ascend_tune.precision.backends import msprobe_installed
from ascend_tune.precision.config import ENV_DUMP, precision_configs

STATISTICS = dict(task="statistics", level="mix", steps=[0])
REPLAY = dict(task="replay", steps=[0])


pytestmark = pytest.mark.usefixtures("one_thread")


def train(log_dir, precision=None, steps: int = 2, monitor: bool = True) -> list:
    return train_gpt(log_dir, precision, steps=steps, autocast=True, monitor=monitor)


def rank_dir(log_dir, step: int = 0) -> str:
    return os.path.join(log_dir, "dump", f"step{step}", "rank0")


def load(path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def replay_rows(log_dir) -> list:
    with open(os.path.join(rank_dir(log_dir), "replay.csv"), newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def stack_groups(log_dir) -> list:
    """stack.json's groups: the names and the model's frames (the frames of this file's test functions differ by
    the line each test calls train() from)."""
    groups = load(os.path.join(rank_dir(log_dir), "stack.json")).values()
    return [(names, [f for f in frames if not f.startswith(f"File {__file__}, line") or "in train" in f])
            for names, frames in groups]


@pytest.mark.parametrize("order", ["dump-first", "replay-first"])
def test_a_dump_and_a_replay_of_one_step_each_write_what_they_write_alone(tmp_path, order):
    plain = train(tmp_path / "plain", monitor=False)
    alone_dump = train(tmp_path / "dump", STATISTICS)
    alone_replay = train(tmp_path / "replay", REPLAY)
    both = train(tmp_path / "both", [STATISTICS, REPLAY] if order == "dump-first" else [REPLAY, STATISTICS])

    for run in (alone_dump, alone_replay, both):  # nothing changes a number of the run
        assert all(torch.equal(a, b) for a, b in zip(plain, run))
    assert sorted(os.listdir(rank_dir(tmp_path / "both"))) == [
        "construct.json", "dump.json", "replay.csv", "replay.json", "stack.json"]
    # the dump: the same entries, names and statistics, in the same order; operators (Tensor.__add__) and the
    # slots of Python-level functions (F.layer_norm) as the model's code made the calls, not as a recorder above did
    dumped, alone = load(os.path.join(rank_dir(tmp_path / "both"), "dump.json")), load(
        os.path.join(rank_dir(tmp_path / "dump"), "dump.json"))
    assert list(dumped["data"]) == list(alone["data"])
    assert dumped == alone
    assert any(name.startswith("Tensor.__add__.") for name in dumped["data"])
    assert "Functional.layer_norm.0.forward" in dumped["data"]
    assert load(os.path.join(rank_dir(tmp_path / "both"), "construct.json")) == load(
        os.path.join(rank_dir(tmp_path / "dump"), "construct.json"))
    assert stack_groups(tmp_path / "both") == stack_groups(tmp_path / "dump")
    # the replay: the same calls checked with the same metrics; the dump's statistics are not replayed
    rows, rows_alone = replay_rows(tmp_path / "both"), replay_rows(tmp_path / "replay")
    assert [r["name"] for r in rows] == [r["name"] for r in rows_alone]
    assert rows == rows_alone
    assert load(os.path.join(rank_dir(tmp_path / "both"), "replay.json"))["checked"] == load(
        os.path.join(rank_dir(tmp_path / "replay"), "replay.json"))["checked"]

    summary = load(tmp_path / "both" / "summary.json")["precision"]
    tasks = [part["task"] for part in summary]
    assert tasks == (["statistics", "replay"] if order == "dump-first" else ["replay", "statistics"])
    assert all(part["steps_dumped"] == [0] and part["error"] is None for part in summary)
    assert next(p for p in summary if p["task"] == "replay")["replay"]["checked"] == len(
        [r for r in rows if r["verdict"] == "pass"])


def test_parts_on_different_steps_run_each_at_its_own(tmp_path):
    train(tmp_path, [dict(task="statistics", level="L1", steps=[1]), REPLAY])
    assert sorted(os.listdir(rank_dir(tmp_path, 0))) == ["replay.csv", "replay.json"]
    assert "dump.json" in os.listdir(rank_dir(tmp_path, 1)) and "replay.csv" not in os.listdir(rank_dir(tmp_path, 1))


def test_two_dumps_of_one_step_in_folders_of_their_own_are_those_of_each_alone(tmp_path):
    l1, l0 = tmp_path / "l1", tmp_path / "l0"
    train(tmp_path / "run", [dict(task="statistics", level="L1", steps=[0], dump_path=str(l1)),
                             dict(task="statistics", level="L0", steps=[0], dump_path=str(l0))])
    train(tmp_path / "alone", dict(task="statistics", level="L1", steps=[0], dump_path=str(tmp_path / "l1-alone")))
    dumped = load(l1 / "step0" / "rank0" / "dump.json")
    assert dumped == load(tmp_path / "l1-alone" / "step0" / "rank0" / "dump.json")
    modules = load(l0 / "step0" / "rank0" / "dump.json")["data"]
    assert modules and all(name.startswith("Module.") for name in modules)


@pytest.mark.parametrize(("precision", "message"), [
    ([STATISTICS, dict(task="statistics", level="L1", steps=[0, 1])],
     "precision items 0 (statistics) and 1 (statistics) both run at step 0"),
    ([dict(task="statistics", steps="0-4"), dict(task="overflow_check", steps=[3])],
     "both run at step 3"),
    ([REPLAY, dict(task="replay", steps=[])], "would write the same files"),
    ([dict(task="overflow_check", steps=[0]), dict(task="overflow_check", steps=[1])],
     "items 0 and 1 both check for overflows"),
    ([dict(task="statistics", steps=[0], backend="msprobe"), REPLAY], "item 0 (statistics) runs through msprobe"),
    ([REPLAY, dict(task="statistics", steps=[5], backend="msprobe")], "item 1 (statistics) runs through msprobe"),
    ([STATISTICS, dict(task="statistics", levle="L1")], "precision item 1: "),
    ([STATISTICS, None], "precision item 1 must be a dict of options"),
], ids=["same-task", "ranges", "two-replays", "two-overflow-checks", "msprobe-beside", "msprobe-other-step", "typo",
        "none-item"])
def test_parts_that_would_collide_are_refused_before_the_first_step(tmp_path, precision, message):
    with pytest.raises(AscendTuneError, match=message.replace("(", r"\(").replace(")", r"\)")):
        train(tmp_path, precision, steps=1)
    assert not os.path.exists(tmp_path / "dump")  # nothing dumped, nothing patched


def test_the_option_text_and_the_environment_separate_configs_with_semicolons(monkeypatch):
    text = "task=statistics,level=mix,steps=0;task=replay,steps=0"
    assert [(c.task, c.level, c.steps) for c in precision_configs(text)] == [
        ("statistics", "mix", (0,)), ("replay", "L1", (0,))]
    monkeypatch.setenv(ENV_DUMP, text + ";")
    assert [c.task for c in precision_configs(None)] == ["statistics", "replay"]
    monkeypatch.setenv(ENV_DUMP, "off")
    assert precision_configs(None) == []
    assert precision_configs([]) == [] and precision_configs(False) == []
    with pytest.raises(AscendTuneError, match=f"{ENV_DUMP}='task=replay,level=mix'"):
        monkeypatch.setenv(ENV_DUMP, "task=statistics;task=replay,level=mix")
        precision_configs(None)


@pytest.mark.skipif(not msprobe_installed(), reason="mindstudio-probe is not installed: auto has nothing else to pick")
def test_on_an_npu_auto_picks_the_builtin_engine_for_every_part(tmp_path, fake_npu):
    # alone, auto takes msprobe on an NPU; beside another part it takes the engine that shares a run
    assert backends.choose(PrecisionConfig(), "npu") == "msprobe"
    train(tmp_path, [STATISTICS, REPLAY], steps=1)
    summary = load(tmp_path / "summary.json")
    assert summary["device"]["kind"] == "npu"
    assert [(p["task"], p["backend"], p["steps_dumped"]) for p in summary["precision"]] == [
        ("statistics", "builtin", [0]), ("replay", "builtin", [0])]
    assert "msprobe" not in sys.modules
