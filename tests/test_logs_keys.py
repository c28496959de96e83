"""The pieces the framework readers share: the loss-name guess, rates from wall times, the formats' names."""

from __future__ import annotations

import numpy as np
import pytest

from ascend_tune.analysis.logs.detect import check_format
from ascend_tune.analysis.logs.formats import NAMES
from ascend_tune.analysis.logs.keys import is_validation, pick_loss_key
from ascend_tune.analysis.logs.rates import rates_from_wall_times
from ascend_tune.cli.args import LOG_FORMATS
from ascend_tune.errors import InputError


@pytest.mark.parametrize("names, guess", [
    (["loss", "grad_norm", "learning_rate", "eval_loss"], "loss"),  # the Trainer
    (["train_loss_epoch", "train_loss_step", "val_loss"], "train_loss_step"),  # Lightning, on_epoch=True
    (["val_loss", "train_loss"], "train_loss"),
    (["Loss/test", "Loss/train"], "Loss/train"),  # the PyTorch TensorBoard tutorial
    (["lr", "my_loss", "val/my_loss", "my_loss_epoch"], "my_loss"),  # the one training loss otherwise
])
def test_the_guess_is_the_training_loss(names, guess):
    key = pick_loss_key(names, None, "--loss-key", "f", "column")
    assert key.name == guess and key.guessed and guess not in key.others


def test_no_or_several_unknown_losses_ask_for_the_option():
    with pytest.raises(InputError, match="no training-loss column .*name the loss with --loss-key"):
        pick_loss_key(["val_loss", "acc"], None, "--loss-key", "f", "column")
    with pytest.raises(InputError, match="no training-loss tag"):
        pick_loss_key(["a_loss", "b_loss"], None, "--tag", "f", "tag")
    assert pick_loss_key(["a_loss", "b_loss"], "b_loss", "--tag", "f", "tag").guessed is False


@pytest.mark.parametrize("name, validation", [
    ("val_loss", True), ("eval_loss", True), ("validate/time", True), ("Loss/test", True), ("test_acc", True),
    ("train_loss", False), ("interval", False), ("intervals", False), ("latest", False),
])
def test_validation_names(name, validation):
    assert is_validation(name) is validation


def test_rates_from_wall_times_need_a_start_and_skip_restarts():
    rates, seconds = rates_from_wall_times([0, 1, 3, 2, 4], [10.0, 10.5, 11.5, 12.0, 13.0])
    assert np.isnan(rates[0]) and rates[1] == 2.0 and rates[2] == 2.0
    assert np.isnan(rates[3])  # the step went back: a restarted run, no window
    assert rates[4] == 2.0 and seconds[4] == 1.0


def test_the_cli_offers_every_format_the_reader_knows():
    assert LOG_FORMATS == ("auto", *NAMES) == ("auto", "text", "jsonl", "hf", "lightning", "tensorboard")
    assert check_format("auto") is None
    with pytest.raises(InputError, match="unknown log format"):
        check_format("csv")
