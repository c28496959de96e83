"""ascend_tune: drop-in training instrumentation for PyTorch on Ascend NPUs, GPUs and CPUs.

``from ascend_tune import TrainingMonitor``. Names load on first use, so ``import ascend_tune`` (and the CLI's
offline commands) do not pay for importing torch.
"""

from typing import Any

from ._version import __version__
from .errors import AscendTuneError

__all__ = [
    "AscendTuneError", "DeviceInfo", "PrecisionConfig", "ProfileConfig", "ShapesConfig", "TrainingMonitor",
    "TuneConfig", "__version__", "detect_device", "seed_all",
]

_LAZY = {
    "TrainingMonitor": "ascend_tune.monitor",
    "DeviceInfo": "ascend_tune.device",
    "detect_device": "ascend_tune.device",
    "PrecisionConfig": "ascend_tune.precision.config",
    "seed_all": "ascend_tune.precision.seed",
    "ProfileConfig": "ascend_tune.profiling",
    "TuneConfig": "ascend_tune.tuning",
    "ShapesConfig": "ascend_tune.shapes.config",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ascend_tune' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(__all__)
