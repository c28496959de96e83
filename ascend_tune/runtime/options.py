"""TrainingMonitor's own options (the step clock's and its outputs'), checked by the same :class:`FeatureConfig`
machinery as the features' configs: one message style, one "did you mean" for a misspelt option."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional

import torch

from ..config import FeatureConfig
from ..contract.callbacks import FEATURES, Callback
from ..errors import ConfigError, check_option_names

# every keyword TrainingMonitor takes: its own, then the features' (the registry's: a feature that TrainingMonitor
# does not name among its parameters is taken as a keyword all the same)
OPTIONS = (
    "model", "optimizer", "train_loader", "log_dir", "log_every", "warmup_steps", "start_step",
    "samples_per_step", "scaler", "accumulate", "rank", "quiet", "tensorboard", "callbacks", *FEATURES,
)


@dataclass(frozen=True)
class MonitorOptions(FeatureConfig):
    """The monitor's own options; see :class:`~ascend_tune.runtime.monitor.TrainingMonitor` for what each does."""

    OPTION = "TrainingMonitor"
    TAKES_TEXT = False

    log_dir: Any = "exp/train"
    log_every: int = 1
    warmup_steps: int = 10
    start_step: int = 0
    samples_per_step: Optional[int] = None
    accumulate: str = "sum"
    rank: Optional[int] = None
    tensorboard: Optional[bool] = None

    def __post_init__(self) -> None:
        if not isinstance(self.log_dir, (str, os.PathLike)) or not str(self.log_dir):
            raise ConfigError("log_dir must be a folder path such as 'exp/train'")
        self.check_int("log_every", 1)
        self.check_int("warmup_steps", 0)
        self.check_int("start_step", 0)
        if self.samples_per_step is not None:
            self.check_int("samples_per_step", 1)
        if self.rank is not None:
            self.check_int("rank", 0)
        self.check_choice("accumulate", ("sum", "mean"))
        if self.tensorboard is not None:
            self.check_bool("tensorboard")


def check_objects(unknown: dict, model: Any, optimizer: Any, train_loader: Any, scaler: Any,
                  callbacks: list) -> None:
    """Refuse an unknown option (with "did you mean") and objects of the wrong kind, before anything is installed."""
    check_option_names(unknown, OPTIONS, "TrainingMonitor")
    for m in model if isinstance(model, (list, tuple)) else [model]:
        if m is not None and not isinstance(m, torch.nn.Module):
            raise ConfigError(
                f"model must be a torch.nn.Module (or a list of them), got {type(m).__name__}; "
                "pass the module you train"
            )
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise ConfigError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}; "
            "pass the optimizer whose step() ends a training step, or None"
        )
    if train_loader is not None and not isinstance(train_loader, Iterable):
        raise ConfigError(f"train_loader must be iterable, got {type(train_loader).__name__}")
    if scaler is not None and not callable(getattr(scaler, "scale", None)):
        raise ConfigError(f"scaler must be a GradScaler, got {type(scaler).__name__}")
    for cb in callbacks:
        if not isinstance(cb, Callback):
            raise ConfigError(f"callbacks must be ascend_tune.callbacks.Callback objects, got {type(cb).__name__}")
