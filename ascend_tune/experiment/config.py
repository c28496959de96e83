"""``experiment=``: what the run records of its own settings in config.json (on unless ``experiment=False``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import FeatureConfig


@dataclass(frozen=True)
class ExperimentConfig(FeatureConfig):
    """batches: forward calls of the first step whose tensor arguments are fingerprinted (statistics, not bytes);
    steps: the first steps during which gradient clipping calls are recorded.

    ``experiment=False`` (or ``ASCEND_TUNE_EXPERIMENT=off``) records nothing.
    """

    OPTION = "experiment"
    ENV = "ASCEND_TUNE_EXPERIMENT"

    batches: int = 2
    steps: int = 3

    def __post_init__(self) -> None:
        self.check_int("batches", 1)
        self.check_int("steps", 1)
