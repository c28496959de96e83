"""``seed=``: the seed TrainingMonitor seeds every random stream with when the block is entered."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from ..config import FeatureConfig
from .seeding import check_seed


@dataclass(frozen=True)
class SeedConfig(FeatureConfig):
    """seed: an integer in [0, 2**32 - 1]; deterministic: also ask for deterministic kernels (:func:`seed_all`).

    The option takes an int, ``True`` (1234), a dict of these fields or a SeedConfig; there is no environment form.
    """

    OPTION = "seed"
    TAKES_TEXT = False

    seed: int = 1234
    deterministic: bool = False

    def __post_init__(self) -> None:
        check_seed(self.seed, self.deterministic)

    @classmethod
    def from_any(cls, value: Any) -> Optional[SeedConfig]:
        """:meth:`FeatureConfig.from_any`, and a bare value is the seed (``seed=5``)."""
        if value is None or isinstance(value, (bool, cls, Mapping)):
            return super().from_any(value)
        return cls(seed=value)
