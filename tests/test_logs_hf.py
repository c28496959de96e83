"""compare-loss, perf and report read a Hugging Face Trainer's trainer_state.json: real Trainer runs of a tiny GPT-2
built from a config on synthetic tokens, each watched by TrainingMonitor so the same training has both logs."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from ascend_tune import TrainingMonitor
from ascend_tune.analysis.logs.compare import compare_loss
from ascend_tune.analysis.logs.detect import locate
from ascend_tune.analysis.logs.read import read_log
from ascend_tune.cli import main
from ascend_tune.testing.torch_features import transformers_missing


def hf_run(root, name, lr, logging_steps=1, save_state=False):
    """A Trainer run (8 optimizer steps, checkpoints at 4 and 8, evaluation every 4) inside TrainingMonitor."""
    import transformers  # seconds to import: only when a test here runs

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    tokens = torch.randint(0, 64, (64, 16), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": row, "labels": row} for row in tokens]
    args = transformers.TrainingArguments(
        output_dir=str(root / name / "hf"), per_device_train_batch_size=8, per_device_eval_batch_size=8,
        num_train_epochs=1, learning_rate=lr, logging_steps=logging_steps, save_strategy="steps", save_steps=4,
        eval_strategy="steps", eval_steps=4, report_to="none", use_cpu=True, seed=0, disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:16])
    with TrainingMonitor(model, log_dir=str(root / name / "ours"), quiet=True, warmup_steps=0):
        trainer.train()
    if save_state:
        trainer.save_state()  # output_dir/trainer_state.json, with the run's train_runtime record
    return root / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if transformers_missing():
        pytest.skip(transformers_missing())
    root = tmp_path_factory.mktemp("hf")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("HF_HUB_OFFLINE", "1")
            return {
                "base": hf_run(root, "base", 1e-3, save_state=True),
                "lr": hf_run(root, "lr", 0.3),
                "every2": hf_run(root, "every2", 1e-3, logging_steps=2),
            }
    finally:
        torch.set_num_threads(threads)


def history(path):
    return json.loads(path.read_text())["log_history"]


def test_a_trainer_reference_against_the_ascend_tune_log_of_the_same_training_has_gap_0_and_exit_0(runs, capsys):
    checkpoint = runs["base"] / "hf" / "checkpoint-8" / "trainer_state.json"
    assert main(["compare-loss", str(checkpoint), str(runs["base"] / "ours"), "--json"]) == 0
    numbers = json.loads(capsys.readouterr().out)
    assert numbers["compared"] == 8 and numbers["unit"] == "step"
    assert numbers["mean_abs_gap"] == 0 and numbers["max_rel_gap"] == 0
    assert numbers["read"][0]["format"] == "hf" and numbers["read"][0]["loss_key"] == "loss"
    assert numbers["read"][0]["validation_skipped"] == 2  # the two evaluations


def test_steps_counted_from_1_by_the_trainer_pair_with_ours_counted_from_0_and_the_output_says_so(runs, capsys):
    checkpoint = runs["base"] / "hf" / "checkpoint-8" / "trainer_state.json"
    base, target = read_log(str(checkpoint)), read_log(str(runs["base"] / "ours"))
    assert base.step_origin == 1 and base.steps.tolist() == list(range(1, 9))
    assert target.step_origin == 0 and target.step_numbers.tolist() == list(range(8))
    result = compare_loss(base, target)
    assert result.steps.tolist() == list(range(8))  # shown in the counting from 0
    hf_losses = {r["step"]: r["loss"] for r in history(checkpoint) if "loss" in r}
    np.testing.assert_array_equal(result.base_loss, [hf_losses[s + 1] for s in range(8)])
    assert "base step N paired with target step N-1" in result.pairing
    assert main(["compare-loss", str(checkpoint), str(runs["base"] / "ours")]) == 0
    out = capsys.readouterr().out
    assert "counts optimizer steps from 1" in out and "loss 'loss' (guessed; --loss-key picks another" in out


def test_another_learning_rate_is_not_aligned_and_exits_1(runs, capsys):
    assert main(["compare-loss", str(runs["base"] / "hf"), str(runs["lr"] / "ours")]) == 1
    assert "NOT ALIGNED" in capsys.readouterr().out


def test_a_trainer_output_dir_is_read_from_its_saved_state_else_its_newest_checkpoint(runs):
    found = locate(str(runs["base"] / "hf"))
    assert found.kind == "hf" and found.path == str(runs["base"] / "hf" / "trainer_state.json")
    found = locate(str(runs["lr"] / "hf"))  # no save_state(): checkpoint-4 and checkpoint-8
    assert found.path == str(runs["lr"] / "hf" / "checkpoint-8" / "trainer_state.json")
    assert "newest of 2" in found.notes[0]
    assert read_log(str(runs["lr"] / "hf" / "checkpoint-4")).steps.tolist() == [1, 2, 3, 4]


def test_logging_every_2_steps_is_compared_with_our_per_step_losses_averaged_over_its_windows(runs):
    base = read_log(str(runs["every2"] / "hf"))
    assert base.steps.tolist() == [2, 4, 6, 8] and base.step_numbers is None  # windows of two steps
    target = read_log(str(runs["every2"] / "ours"))
    result = compare_loss(base, target)
    assert result.unit == "log window" and result.steps.tolist() == [1, 3, 5, 7]
    np.testing.assert_allclose(result.target_loss, target.step_losses.reshape(4, 2).mean(axis=1), rtol=0)
    assert result.aligned and result.max_rel_gap < 1e-6  # the Trainer sums in float32, we average in float64


def test_perf_on_a_saved_state_gives_the_whole_runs_rate_and_on_a_checkpoint_says_what_it_lacks(runs, capsys):
    state = runs["base"] / "hf" / "trainer_state.json"
    summary = next(r for r in history(state) if "train_runtime" in r)
    assert main(["perf", str(state), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert run["rates_from"] == "whole run" and run["read"]["format"] == "hf"
    assert run["steps_per_sec"]["median"] == summary["train_steps_per_second"]
    assert main(["perf", str(runs["lr"] / "hf")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no wall time and no train_runtime record" in err


def test_report_takes_a_trainer_state_as_its_baseline(runs, tmp_path, capsys):
    out = tmp_path / "same.html"
    assert main(["report", str(runs["base"] / "ours"), "--baseline", str(runs["base"] / "hf"), "-o", str(out),
                 "--no-advise"]) == 0
    page = out.read_text()
    assert "aligned: mean relative gap 0.00%" in page and "counts optimizer steps from 1" in page
    other = tmp_path / "lr.html"
    assert main(["report", str(runs["lr"] / "ours"), "--baseline", str(runs["base"] / "hf"), "-o", str(other),
                 "--no-advise"]) == 1
    assert "NOT aligned" in other.read_text()
    capsys.readouterr()


def test_loss_key_picks_another_record_key(runs, capsys):
    checkpoint = runs["base"] / "hf" / "checkpoint-8" / "trainer_state.json"
    log = read_log(str(checkpoint), loss_key="grad_norm")
    assert log.loss_key.name == "grad_norm" and not log.loss_key.guessed
    assert log.losses.tolist() == [r["grad_norm"] for r in history(checkpoint) if "grad_norm" in r]
    assert main(["compare-loss", str(checkpoint), str(runs["base"] / "ours"), "--loss-key", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has no key 'nope'" in err and "grad_norm" in err


def _broken(tmp_path, runs, change):
    state = json.loads((runs["base"] / "hf" / "trainer_state.json").read_text())
    change(state)
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(state, indent=2))
    return path


@pytest.mark.parametrize("change, message", [
    (lambda s: s.pop("log_history"), "has no log_history"),
    (lambda s: s.update(log_history=[r for r in s["log_history"] if "loss" not in r]), "has no training-loss key"),
    (lambda s: s.update(log_history={"loss": 1.0}), "has no log_history"),
])
def test_a_trainer_state_without_training_records_is_one_line_and_exit_2(runs, tmp_path, capsys, change, message):
    path = _broken(tmp_path, runs, change)
    before = path.read_bytes()
    assert main(["compare-loss", str(path), str(runs["base"] / "ours")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert path.read_bytes() == before


def test_a_cut_trainer_state_is_one_line_and_exit_2(runs, tmp_path, capsys):
    path = tmp_path / "trainer_state.json"
    path.write_bytes((runs["base"] / "hf" / "trainer_state.json").read_bytes()[:300])
    assert main(["perf", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not valid JSON" in err


def test_a_trainer_state_is_recognised_by_what_it_holds_whatever_its_name(runs, tmp_path):
    renamed = tmp_path / "reference.json"
    shutil.copy(runs["base"] / "hf" / "trainer_state.json", renamed)
    assert read_log(str(renamed)).kind == "hf"
