"""compare-loss on runs logged by TrainingMonitor: gap numbers, the guide's method, verdicts, plots."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ascend_tune import TrainingMonitor
from ascend_tune.analysis.logs.compare import compare_loss
from ascend_tune.analysis.logs.model import LossLog
from ascend_tune.analysis.logs.read import read_log
from ascend_tune.cli import main
from ascend_tune.errors import InputError
from ascend_tune.testing.models import TinyMLP, synthetic_classification


def train_run(log_dir, lr=0.1, steps=24, seed=0, log_every=1):
    """A seeded TrainingMonitor run of a tiny MLP; its log_dir holds log.txt and metrics.jsonl."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: thread hand-offs would cost more than the maths
    try:
        _train(log_dir, lr, steps, seed, log_every)
    finally:
        torch.set_num_threads(threads)
    return log_dir


def _train(log_dir, lr, steps, seed, log_every):
    torch.manual_seed(seed)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(synthetic_classification(n=8 * steps), batch_size=8)
    with TrainingMonitor(model, optimizer, loader, log_dir=str(log_dir), quiet=True, warmup_steps=0,
                         log_every=log_every):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {
        "base": train_run(root / "base"),
        "same": train_run(root / "same"),
        "lr": train_run(root / "lr", lr=0.5),
    }


def seed_script(base_log: str, target_log: str) -> tuple:
    """The guide's offline loss-curve script, as it computed its numbers."""
    pattern = r"\(step=(\d+)\) Train Loss: ([\d\.]+), Train Steps/Sec: ([\d\.]+)"

    def read(path):
        with open(path) as fh:
            return [float(m.group(2)) for m in (re.search(pattern, line) for line in fh) if m]

    a, b = read(base_log), read(target_log)
    n = min(len(a), len(b))
    a, b = np.array(a[:n]), np.array(b[:n])
    return float(np.mean(np.abs(a - b))), float(np.mean(np.abs(a - b) / np.abs(a)))


def test_two_seeded_identical_runs_have_no_gap_and_exit_0(runs, capsys):
    assert main(["compare-loss", str(runs["base"]), str(runs["same"])]) == 0
    out = capsys.readouterr().out
    assert "ALIGNED" in out and "NOT ALIGNED" not in out
    result = compare_loss(read_log(str(runs["base"])), read_log(str(runs["same"])))
    assert result.unit == "step" and result.compared == 24
    assert result.mean_abs_gap == 0 and result.mean_rel_gap == 0 and result.max_rel_gap == 0


def test_a_changed_learning_rate_is_not_aligned_exits_1_and_writes_both_plots(runs, tmp_path, capsys):
    plots = tmp_path / "plots"
    assert main(["compare-loss", str(runs["base"]), str(runs["lr"]), "--plot", str(plots)]) == 1
    assert "NOT ALIGNED" in capsys.readouterr().out
    for name in ("compare_loss_curves.png", "loss_gap_curves.png"):
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_index_alignment_reproduces_the_seed_scripts_numbers(runs, capsys):
    base_log, target_log = str(runs["base"] / "log.txt"), str(runs["lr"] / "log.txt")
    seed_abs, seed_rel = seed_script(base_log, target_log)
    assert main(["compare-loss", base_log, target_log, "--align", "index", "--json"]) == 1
    numbers = json.loads(capsys.readouterr().out)
    assert numbers["mean_abs_gap"] == pytest.approx(seed_abs, rel=1e-12)
    assert numbers["mean_rel_gap"] == pytest.approx(seed_rel, rel=1e-12)
    assert numbers["align"] == "index" and numbers["base"] == base_log  # the guide's input, not metrics.jsonl


def test_step_alignment_reads_full_precision_and_pairs_by_step(runs):
    result = compare_loss(read_log(str(runs["base"] / "log.txt")), read_log(str(runs["lr"] / "log.txt")))
    assert result.base.endswith("metrics.jsonl")  # %.4f would round small losses
    jsonl = [json.loads(line) for line in (runs["base"] / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in jsonl if "loss" in r]
    np.testing.assert_array_equal(result.base_loss, losses)


def log_of(steps, losses, source="mem"):
    steps, losses = np.array(steps), np.array(losses, dtype=float)
    nan = np.full(steps.size, np.nan)
    return LossLog(source, "jsonl", steps, losses, nan, nan, None, None, 0, (), 0)


def test_steps_only_in_one_run_and_unusable_base_losses_are_counted_never_divided_by():
    base = log_of([0, 1, 2, 3, 4], [2.0, 0.0, float("nan"), 1.0, 1.0])
    target = log_of([1, 2, 3, 4, 5, 6], [0.5, 1.0, 1.1, 0.9, 1.0, 1.0])
    result = compare_loss(base, target)
    assert (result.compared, result.only_base, result.only_target, result.excluded) == (2, 1, 2, 2)
    assert result.mean_abs_gap == pytest.approx(0.1)
    assert result.mean_rel_gap == pytest.approx(0.1)
    assert result.max_rel_gap_step in (3, 4) and result.final_step == 4
    assert not result.aligned  # 10% > 5%
    assert compare_loss(base, target, threshold=0.2).aligned


def test_a_nan_target_loss_where_the_base_is_finite_fails_the_check():
    result = compare_loss(log_of([0, 1], [1.0, 1.0]), log_of([0, 1], [1.0, float("nan")]))
    assert result.target_nonfinite == 1 and result.mean_rel_gap == 0 and not result.aligned


def test_a_restarted_run_uses_the_last_loss_of_a_repeated_step():
    result = compare_loss(log_of([0, 1], [1.0, 1.0]), log_of([0, 1, 1], [1.0, 5.0, 1.0]))
    assert result.compared == 2 and result.mean_abs_gap == 0


def test_runs_without_common_steps_say_to_align_by_index():
    with pytest.raises(InputError, match="--align index"):
        compare_loss(log_of([0, 1], [1.0, 1.0]), log_of([5, 6], [1.0, 1.0]))


def test_existing_plots_are_never_overwritten_silently(runs, tmp_path, capsys):
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "loss_gap_curves.png").write_bytes(b"mine")
    assert main(["compare-loss", str(runs["base"]), str(runs["same"]), "--plot", str(plots)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err
    assert (plots / "loss_gap_curves.png").read_bytes() == b"mine"
    assert not (plots / "compare_loss_curves.png").exists()
    assert main(["compare-loss", str(runs["base"]), str(runs["same"]), "--plot", str(plots), "--force"]) == 0
    assert (plots / "loss_gap_curves.png").read_bytes()[:4] == b"\x89PNG"
