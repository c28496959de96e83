"""PrecisionConfig parsing (dicts, the ASCEND_TUNE_DUMP text) and seed_all / TrainingMonitor(seed=...)."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch

from ascend_tune import AscendTuneError, PrecisionConfig, TrainingMonitor, seed_all


def test_env_text_reads_lists_after_their_key():
    config = PrecisionConfig.from_text("task=tensor,steps=0,2,5-7,level=mix,list=relu,linear,overflow_nums=-1")
    assert (config.task, config.level, config.overflow_nums) == ("tensor", "mix", -1)
    assert config.steps == (0, 2, "5-7") and config.list == ("relu", "linear")
    assert [s for s in range(10) if config.selects_step(s)] == [0, 2, 5, 6, 7]
    assert config.last_step() == 7


@pytest.mark.parametrize("text", ["", "0", "off", "false"])
def test_env_text_that_turns_dumps_off(text):
    assert PrecisionConfig.from_text(text) is None


@pytest.mark.parametrize("text", ["1", "on", "true"])
def test_env_text_that_turns_dumps_on_with_defaults(text):
    assert PrecisionConfig.from_text(text) == PrecisionConfig()


def test_env_errors_name_the_variable(monkeypatch):
    monkeypatch.setenv("ASCEND_TUNE_DUMP", "task=statistics,stepz=1")
    with pytest.raises(AscendTuneError, match="ASCEND_TUNE_DUMP=.*no option 'stepz'"):
        PrecisionConfig.from_env()
    monkeypatch.setenv("ASCEND_TUNE_DUMP", "statistics")
    with pytest.raises(AscendTuneError, match="is not key=value"):
        PrecisionConfig.from_env()


def test_from_any_accepts_the_documented_forms():
    assert PrecisionConfig.from_any(None) is None and PrecisionConfig.from_any(False) is None
    assert PrecisionConfig.from_any(True) == PrecisionConfig()
    config = PrecisionConfig(steps=range(2, 5), ranks=[0, "2-3"], scope=("a", "b"), data_mode="forward")
    assert PrecisionConfig.from_any(config) is config
    assert config.steps == ("2-4",) and config.ranks == (0, "2-3") and config.data_mode == ("forward",)
    assert config.selects_rank(3) and not config.selects_rank(1)
    assert PrecisionConfig(steps=[]).selects_step(12345) and PrecisionConfig(steps=[]).last_step() is None
    assert config.as_dict()["steps"] == ["2-4"]
    with pytest.raises(AscendTuneError, match="precision must be True, False, a dict of options, a key=value string"):
        PrecisionConfig.from_any(3)
    with pytest.raises(AscendTuneError, match="steps must hold integers >= 0"):
        PrecisionConfig(steps=[-1])
    with pytest.raises(AscendTuneError, match="steps must hold integers >= 0"):
        PrecisionConfig(steps=[True])


def _draws():
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_seed_all_repeats_every_random_stream():
    seed_all(7)
    first = _draws()
    assert os.environ["PYTHONHASHSEED"] == "7"
    seed_all(7)
    assert _draws() == first
    seed_all(8)
    assert _draws() != first
    with pytest.raises(AscendTuneError, match="seed must be an integer"):
        seed_all(-1)


def test_seed_all_deterministic_turns_on_deterministic_algorithms():
    before = torch.are_deterministic_algorithms_enabled()
    try:
        seed_all(1, deterministic=True)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    finally:
        torch.use_deterministic_algorithms(before)
        torch.backends.cudnn.deterministic = False


def test_the_monitor_seeds_before_the_first_step_and_records_it(tmp_path):
    torch.manual_seed(0)
    with TrainingMonitor(log_dir=tmp_path, quiet=True, seed=5):
        inside = torch.rand(2).tolist()
    torch.manual_seed(5)
    assert inside == torch.rand(2).tolist()
    with open(tmp_path / "summary.json", encoding="utf-8") as fh:
        assert json.load(fh)["seed"] == {"seed": 5, "deterministic": False}


def test_a_bad_seed_option_raises_at_enter(tmp_path):
    with pytest.raises(AscendTuneError, match="seed must be an integer"):
        with TrainingMonitor(log_dir=tmp_path, quiet=True, seed="1234"):
            pass
    with pytest.raises(AscendTuneError, match="seed has no option 'mode'"):
        with TrainingMonitor(log_dir=tmp_path, quiet=True, seed=dict(mode=True)):
            pass
