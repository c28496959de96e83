"""compare-loss, perf and report read a Lightning CSVLogger's metrics.csv: real Lightning runs (with validation and
epoch aggregates), each watched by TrainingMonitor so the same training has both logs."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ascend_tune import TrainingMonitor
from ascend_tune.analysis.logs.detect import locate
from ascend_tune.analysis.logs.read import read_log
from ascend_tune.cli import main
from ascend_tune.testing.models import TinyMLP, synthetic_classification


def lightning_run(root, name, lr, callbacks=()):
    """Two epochs of 8 steps with a validation pass every 4 steps, CSVLogger(root/name, name="lit")."""
    import lightning.pytorch as pl  # seconds to import: only when a test here runs
    from lightning.pytorch.loggers import CSVLogger

    class Classifier(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = TinyMLP()

        def training_step(self, batch, index):
            x, y = batch
            loss = F.cross_entropy(self.net(x), y)
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch, index):
            x, y = batch
            self.log("val_loss", F.cross_entropy(self.net(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=lr)

    torch.manual_seed(0)
    model = Classifier()
    train = DataLoader(synthetic_classification(n=64), batch_size=8)
    val = DataLoader(synthetic_classification(n=16, seed=1), batch_size=8)
    trainer = pl.Trainer(
        max_epochs=2, logger=CSVLogger(str(root / name), name="lit"), log_every_n_steps=1, val_check_interval=4,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
        devices=1, callbacks=list(callbacks),
    )
    with TrainingMonitor(model, log_dir=str(root / name / "ours"), quiet=True, warmup_steps=0):
        trainer.fit(model, train, val)
    return root / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lightning")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {"base": lightning_run(root, "base", 0.1), "lr": lightning_run(root, "lr", 0.5)}
    finally:
        torch.set_num_threads(threads)


def csv_path(run):
    return run / "lit" / "version_0" / "metrics.csv"


def test_a_lightning_reference_against_the_ascend_tune_log_of_the_same_training_has_gap_0_and_exit_0(runs, capsys):
    assert main(["compare-loss", str(csv_path(runs["base"])), str(runs["base"] / "ours"), "--json"]) == 0
    numbers = json.loads(capsys.readouterr().out)
    assert numbers["compared"] == 16 and numbers["unit"] == "step"
    assert numbers["mean_abs_gap"] == 0 and numbers["max_rel_gap"] == 0
    assert numbers["pairing"].startswith("both count optimizer steps from 0")
    read = numbers["read"][0]
    assert read["format"] == "lightning" and read["loss_key"] == "train_loss_step" and read["loss_key_guessed"]
    assert read["validation_skipped"] == 4 and read["non_step_skipped"] == 2  # 4 validations, 2 epoch means


def test_the_guess_is_printed(runs, capsys):
    assert main(["compare-loss", str(csv_path(runs["base"])), str(runs["base"] / "ours")]) == 0
    out = capsys.readouterr().out
    assert "read as metrics.csv (Lightning CSVLogger)" in out
    assert "loss 'train_loss_step' (guessed; --loss-key picks another of: train_loss_epoch, val_loss)" in out


def test_another_learning_rate_is_not_aligned_and_exits_1(runs, capsys):
    assert main(["compare-loss", str(runs["base"]), str(runs["lr"] / "ours")]) == 1
    assert "NOT ALIGNED" in capsys.readouterr().out


def test_a_csvlogger_save_dir_is_read_from_its_newest_version(runs, tmp_path):
    assert locate(str(runs["base"])).path == str(csv_path(runs["base"]))  # save_dir/lit/version_0/metrics.csv
    save_dir = tmp_path / "logs"
    for version in (0, 1):
        (save_dir / "lit" / f"version_{version}").mkdir(parents=True)
    rows = csv_path(runs["base"]).read_text().splitlines()
    (save_dir / "lit" / "version_0" / "metrics.csv").write_text("\n".join(rows[:4]) + "\n")
    (save_dir / "lit" / "version_1" / "metrics.csv").write_text("\n".join(rows) + "\n")
    found = locate(str(save_dir))
    assert found.path.endswith("version_1/metrics.csv") and "newest of 2" in found.notes[0]


def test_the_rows_read_are_lightnings_training_steps(runs):
    log = read_log(str(csv_path(runs["base"])))
    with open(csv_path(runs["base"]), newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["train_loss_step"]]
    assert log.steps.tolist() == [int(r["step"]) for r in rows] == list(range(16))
    assert log.losses.tolist() == [float(r["train_loss_step"]) for r in rows]
    validation = read_log(str(csv_path(runs["base"])), loss_key="val_loss")
    assert validation.lines == 4 and not validation.loss_key.guessed


def test_perf_on_a_csv_without_timing_says_what_it_lacks(runs, capsys):
    assert main(["perf", str(runs["base"])]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "records no steps/sec and no wall time" in err and "ThroughputMonitor" in err
    assert main(["perf", str(runs["base"] / "ours"), str(runs["base"])]) == 0  # beside a timed run: noted
    assert "records no steps/sec and no wall time" in capsys.readouterr().out


def test_perf_reads_the_wall_times_lightnings_throughput_monitor_logs(tmp_path, capsys):
    from lightning.pytorch.callbacks import ThroughputMonitor

    run = lightning_run(tmp_path, "timed", 0.1, callbacks=[ThroughputMonitor(batch_size_fn=lambda batch: 8)])
    log = read_log(str(run))
    assert np.isfinite(log.wall_times).sum() >= 15
    assert main(["perf", str(run), "--exclude-first", "2", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)["runs"][0]
    assert stats["rates_from"] == "wall times" and stats["steps_per_sec"]["median"] > 0


def _rewrite(tmp_path, runs, keep):
    with open(csv_path(runs["base"]), newline="") as fh:
        rows = list(csv.reader(fh))
    columns = [i for i, name in enumerate(rows[0]) if keep(name)]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([[row[i] for i in columns] for row in rows])
    path = tmp_path / "metrics.csv"
    path.write_text(out.getvalue())
    return path


@pytest.mark.parametrize("keep, message", [
    (lambda name: "train_loss" not in name, "has no training-loss column (columns: val_loss)"),
    (lambda name: name != "step", "has no 'step' column"),
])
def test_a_csv_without_the_loss_or_step_column_is_one_line_and_exit_2(runs, tmp_path, capsys, keep, message):
    path = _rewrite(tmp_path, runs, keep)
    before = path.read_bytes()
    assert main(["compare-loss", str(path), str(runs["base"] / "ours")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert path.read_bytes() == before


def test_a_named_column_that_is_not_there_is_one_line_and_exit_2(runs, capsys):
    assert main(["compare-loss", str(runs["base"]), str(runs["base"] / "ours"), "--loss-key", "loss"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has no column 'loss'" in err and "train_loss_step" in err


def test_report_takes_a_lightning_csv_as_its_baseline(runs, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(runs["base"] / "ours"), "--baseline", str(runs["base"]), "-o", str(out),
                 "--no-advise"]) == 0
    assert "both count optimizer steps from 0" in out.read_text()
    capsys.readouterr()
