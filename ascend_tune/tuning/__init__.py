"""Device-driven tuning for the block: a faster optimizer implementation in place, and the NPU's compile mode.

The reference run stays the user's own: on a CPU or a GPU, by default, tuning only *reports* which optimizer
implementation would be faster (measured on clones of the parameters) in ``tuning.json`` and one console line,
and changes nothing. On an NPU the device-driven swap (NpuFused* or torch's fused, binary compile mode) is what a
port needs, and is done by default. ``tune=True`` swaps on every device.

``TrainingMonitor(tune=...)`` takes ``True``, ``False``, a dict or a :class:`TuneConfig`; with the option not given,
``ASCEND_TUNE_TUNE=0|1|force|report`` decides, unset is the default (``optimizer="auto"``). Every decision, taken or
refused, is logged through the ``ascend_tune`` logger with its reason and written to ``tuning.json`` in
``log_dir`` (rank 0); ``summary.json`` gets the short form under ``"tuning"``. Everything is undone when the block
ends.
"""

from ..lazy import lazy_names

__all__ = ["ENV_TUNE", "TuneConfig", "TuningCallback", "build_callback"]

__getattr__, __dir__ = lazy_names(__name__, {
    "ENV_TUNE": "ascend_tune.tuning.config", "TuneConfig": "ascend_tune.tuning.config",
    "TuningCallback": "ascend_tune.tuning.callback", "build_callback": "ascend_tune.tuning.callback",
})
