"""The ``seed=`` feature: seeded when the block is entered, before the first step; the seed goes into summary.json.

Why a feature and not one of TrainingMonitor's own options: like the others it has its own config, its own entry in
summary.json and an order among the features (it seeds before ``tune=``'s probes and the user's first batch,
:data:`ascend_tune.contract.callbacks.FEATURES`); the monitor's own options are about the step clock and its outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ..contract.callbacks import Callback
from .config import SeedConfig
from .seeding import seed_all

if TYPE_CHECKING:
    from ..contract.context import RunContext


class SeedCallback(Callback):
    """Records the seed in summary.json (the seeding itself happened when the callback was built)."""

    name = "seed"

    def __init__(self, config: SeedConfig):
        self.config = config

    def summary(self) -> Optional[dict]:
        return {"seed": self.config.seed, "deterministic": self.config.deterministic}


def build_callback(value: Any, ctx: RunContext) -> Optional[SeedCallback]:
    """The monitor's factory for ``seed=``: an int, ``True`` (1234) or ``{"seed": ..., "deterministic": ...}``."""
    if value is None:
        return None
    config = SeedConfig.from_any(value)
    if config is None:
        return None
    seed_all(config.seed, config.deterministic)
    return SeedCallback(config)
