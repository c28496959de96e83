"""compare-loss and perf read TensorBoard event files: real SummaryWriter runs of a plain loop, each watched by
TrainingMonitor (its own TensorBoard sink on too) so the same training has both logs."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ascend_tune import TrainingMonitor
from ascend_tune.analysis.logs.compare import compare_loss
from ascend_tune.analysis.logs.detect import file_kind
from ascend_tune.analysis.logs.read import read_log
from ascend_tune.cli import main
from ascend_tune.testing.models import TinyMLP, synthetic_classification

STEPS = 32


def tensorboard_run(root, name, lr):
    """32 SGD steps; the script logs train/loss every step, train/loss_avg4 (the PyTorch tutorial's running mean)
    every 4, val/loss every 8 and one histogram."""
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(synthetic_classification(n=8 * STEPS), batch_size=8)
    writer = SummaryWriter(str(root / name / "tb"))
    running = 0.0
    with TrainingMonitor(model, optimizer, loader, log_dir=str(root / name / "ours"), quiet=True, warmup_steps=0,
                         tensorboard=True):
        for step, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            writer.add_scalar("train/loss", loss.item(), step)
            running += loss.item()
            if step % 4 == 3:
                writer.add_scalar("train/loss_avg4", running / 4, step)
                running = 0.0
            if step % 8 == 7:
                writer.add_scalar("val/loss", loss.item(), step)
    writer.add_histogram("weights", next(model.parameters()).detach(), STEPS - 1)
    writer.close()
    return root / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tensorboard")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {"base": tensorboard_run(root, "base", 0.1), "lr": tensorboard_run(root, "lr", 0.5)}
    finally:
        torch.set_num_threads(threads)


def event_file(run):
    (path,) = (run / "tb").glob("events.out.tfevents.*")
    return path


def test_a_tensorboard_reference_against_the_ascend_tune_log_of_the_same_training_has_gap_0_and_exit_0(runs, capsys):
    assert main(["compare-loss", str(runs["base"] / "tb"), str(runs["base"] / "ours"), "--json"]) == 0
    numbers = json.loads(capsys.readouterr().out)
    assert numbers["compared"] == STEPS and numbers["unit"] == "step"
    assert numbers["mean_abs_gap"] == 0 and numbers["max_rel_gap"] == 0
    read = numbers["read"][0]
    assert read["format"] == "tensorboard" and read["loss_key"] == "train/loss" and read["loss_key_guessed"]
    assert read["validation_skipped"] == 4  # the val/loss points
    assert read["non_step_skipped"] == 2  # the file-version event and the histogram
    assert main(["compare-loss", str(runs["base"] / "tb"), str(runs["base"] / "ours")]) == 0
    assert "loss 'train/loss' (guessed; --tag picks another of:" in capsys.readouterr().out


def test_another_learning_rate_is_not_aligned_and_exits_1(runs, capsys):
    assert main(["compare-loss", str(event_file(runs["base"])), str(runs["lr"] / "ours")]) == 1
    assert "NOT ALIGNED" in capsys.readouterr().out


def test_a_running_mean_logged_every_4_steps_is_compared_as_log_windows(runs):
    base = read_log(str(runs["base"] / "tb"), tag="train/loss_avg4")
    assert base.steps.tolist() == list(range(3, STEPS, 4)) and base.step_numbers is None
    result = compare_loss(base, read_log(str(runs["base"] / "ours")))
    assert result.unit == "log window" and result.compared == STEPS // 4
    assert result.aligned and result.max_rel_gap < 1e-6  # the writer stores float32


def _expected_median(run, exclude_first):
    """steps/sec from the wall times of train/loss, read with tensorboard's EventAccumulator (another reader)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    points = events.Scalars("train/loss")
    steps = np.array([p.step for p in points])
    walls = np.array([p.wall_time for p in points])
    rates = np.diff(steps) / np.diff(walls)
    steady = steps[:-1] + 1 >= steps[0] + exclude_first  # a window's first step is the previous point's + 1
    return float(np.median(rates[steady]))


def test_perf_on_a_tensorboard_run_prints_a_steps_per_sec_median_from_the_wall_times(runs, capsys):
    assert main(["perf", str(runs["base"] / "tb")]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "tfevents" in line and not line.startswith(" "))
    assert f"{_expected_median(runs['base'], 10):9.3f}" in row
    assert "steps/sec from the wall times" in out
    assert main(["perf", str(runs["base"] / "tb"), "--exclude-first", "4", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert run["rates_from"] == "wall times"
    assert run["steps_per_sec"]["median"] == pytest.approx(_expected_median(runs["base"], 4), rel=1e-9)


def test_ascend_tunes_own_tensorboard_sink_reads_back_with_its_rates(runs, capsys):
    ours = runs["base"] / "ours"
    sink = read_log(str(ours), format="tensorboard")
    jsonl = read_log(str(ours))
    assert sink.source.startswith(str(ours / "tensorboard"))
    np.testing.assert_allclose(sink.steps_per_sec, jsonl.steps_per_sec, rtol=1e-6)  # float32 in the event file
    assert main(["compare-loss", str(ours), str(ours), "--format", "tensorboard", "--format", "auto"]) == 0
    assert "read as TensorBoard events" in capsys.readouterr().out


def test_an_event_file_is_recognised_by_what_it_holds_whatever_its_name(runs, tmp_path):
    renamed = tmp_path / "reference.bin"
    shutil.copy(event_file(runs["base"]), renamed)
    assert file_kind(str(renamed)) == "tensorboard"
    assert read_log(str(renamed)).lines == STEPS


@pytest.mark.parametrize("damage", ["cut", "flipped"])
def test_a_truncated_or_corrupt_event_file_is_one_line_and_exit_2(runs, tmp_path, capsys, damage):
    data = bytearray(event_file(runs["base"]).read_bytes())
    if damage == "cut":
        data = data[: len(data) - 7]
    else:
        data[len(data) // 2] ^= 0xFF
    path = tmp_path / event_file(runs["base"]).name
    path.write_bytes(bytes(data))
    assert main(["compare-loss", str(path), str(runs["base"] / "ours")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "its records end at byte" in err
    assert path.read_bytes() == bytes(data)


def test_a_tag_that_is_not_there_is_one_line_and_exit_2(runs, capsys):
    assert main(["perf", str(runs["base"] / "tb"), "--tag", "train/los"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has no tag 'train/los'" in err and "train/loss" in err


def test_perf_walks_a_folder_of_runs_of_different_formats(runs, tmp_path, capsys):
    shutil.copytree(runs["base"] / "tb", tmp_path / "a-tensorboard")
    shutil.copytree(runs["base"] / "ours", tmp_path / "b-ours")
    (tmp_path / "notes").mkdir()
    assert main(["perf", str(tmp_path), "--exclude-first", "4", "--json"]) == 0
    formats = [run["read"]["format"] for run in json.loads(capsys.readouterr().out)["runs"]]
    assert formats == ["tensorboard", "jsonl"]


def test_an_option_given_neither_once_nor_once_per_input_is_one_line_and_exit_2(runs, capsys):
    given = ["--format", "tensorboard", "--format", "auto", "--format", "jsonl"]
    assert main(["compare-loss", str(runs["base"] / "tb"), str(runs["base"] / "ours"), *given]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--format was given 3 times for 2 input(s)" in err
