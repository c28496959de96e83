"""The dynamic-shape detector (``shapes=`` / ``ASCEND_TUNE_SHAPES=1``): which ops change shape from step to step.

- :mod:`.config`: ``ShapesConfig``; :mod:`.callback`: the monitor's ``shapes=`` feature (``build_callback``), a
  subscriber of the recording layer; :mod:`.watch`: one op's signatures across steps, its user frames;
- its report, shapes.csv, is :mod:`ascend_tune.formats.shapes_csv` (read by ``ascend-tune shapes``).
"""

from ..lazy import lazy_names

__all__ = ["ENV_SHAPES", "ShapesCallback", "ShapesConfig", "build_callback"]

__getattr__, __dir__ = lazy_names(__name__, {
    "ENV_SHAPES": "ascend_tune.shapes.config", "ShapesConfig": "ascend_tune.shapes.config",
    "ShapesCallback": "ascend_tune.shapes.callback", "build_callback": "ascend_tune.shapes.callback",
})
