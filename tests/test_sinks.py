"""The step clock's outputs behind one Sink protocol: the TensorBoard sink read back by TensorBoard itself."""

from __future__ import annotations

import math

import pytest
from conftest import read_jsonl, read_log, train

from ascend_tune import AscendTuneError, TrainingMonitor

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")


def _scalars(folder) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_has_one_loss_scalar_per_log_line(setup, tmp_path):
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, log_every=3, quiet=True, tensorboard=True):
        train(model, optimizer, loader, epochs=2)  # 16 steps: lines at steps 2, 5, ..., 14 and the last, 15
    lines = read_log(tmp_path)
    records = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "event" not in r]
    scalars = _scalars(tmp_path / "tensorboard")
    loss = scalars["train/loss"]
    assert len(loss) == len(lines) == len(records) == 6
    assert [step for step, _ in loss] == [r["step"] for r in records] == [2, 5, 8, 11, 14, 15]
    for (_, value), record in zip(loss, records):
        assert math.isclose(value, record["loss"], rel_tol=1e-6)  # TensorBoard keeps float32
    assert [s for s, _ in scalars["train/steps_per_sec"]] == [r["step"] for r in records]
    assert [s for s, _ in scalars["train/samples_per_sec"]] == [r["step"] for r in records]


def test_the_environment_switch_turns_it_on(setup, tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_TUNE_TENSORBOARD", "1")
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True):
        train(model, optimizer, loader)
    assert len(_scalars(tmp_path / "tensorboard")["train/loss"]) == 8


def test_off_by_default(setup, tmp_path):
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True):
        train(model, optimizer, loader)
    assert not (tmp_path / "tensorboard").exists()


@pytest.mark.parametrize("value", ["yes please", 2])
def test_bad_values_are_refused_before_any_step(setup, tmp_path, monkeypatch, value):
    model, optimizer, loader = setup
    if isinstance(value, str):
        monkeypatch.setenv("ASCEND_TUNE_TENSORBOARD", value)
        with pytest.raises(AscendTuneError, match="ASCEND_TUNE_TENSORBOARD"):
            with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True):
                pass
    else:
        with pytest.raises(AscendTuneError, match="tensorboard"):
            TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, tensorboard=value)
    assert not (tmp_path / "log.txt").exists()
