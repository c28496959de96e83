"""``shapes=`` / ``ASCEND_TUNE_SHAPES``: what the dynamic-shape detector watches."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import FeatureConfig

ENV_SHAPES = "ASCEND_TUNE_SHAPES"


@dataclass(frozen=True)
class ShapesConfig(FeatureConfig):
    """What the dynamic-shape detector watches (``ASCEND_TUNE_SHAPES``: ``1``, ``0`` or ``steps=N``).

    steps: how many steps, from the block's first, to watch (each op's shapes are compared across them).
    """

    OPTION = "shapes"
    ENV = ENV_SHAPES
    EXAMPLE = "steps=N"
    RUN_FLAGS = {"shapes": "the dynamic-shape detector"}

    steps: int = 20

    def __post_init__(self) -> None:
        self.check_int("steps", 1)
