"""The dynamic-shape detector (``shapes=`` / ``ASCEND_TUNE_SHAPES=1``): which ops change shape from step to step
(:mod:`.callback`); its report, shapes.csv, is :mod:`ascend_tune.formats.shapes_csv`."""
