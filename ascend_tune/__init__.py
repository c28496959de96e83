"""ascend_tune: drop-in training instrumentation for PyTorch on Ascend NPUs, GPUs and CPUs.

``from ascend_tune import TrainingMonitor``. Names load on first use, so ``import ascend_tune`` (and the CLI's
offline commands) do not pay for importing torch.
"""

from ._version import __version__
from .errors import AscendTuneError
from .lazy import keep_moved_modules, lazy_names

__all__ = [
    "AscendTuneError", "DeviceInfo", "HealthConfig", "PrecisionConfig", "ProfileConfig", "ShapesConfig",
    "TrainingMonitor", "TuneConfig", "__version__", "detect_device", "seed_all",
]

_LAZY = {
    "TrainingMonitor": "ascend_tune.runtime.monitor",
    "AscendTuneError": "ascend_tune.errors",
    "DeviceInfo": "ascend_tune.device",
    "detect_device": "ascend_tune.device",
    "PrecisionConfig": "ascend_tune.precision.config",
    "seed_all": "ascend_tune.seed.seeding",
    "ProfileConfig": "ascend_tune.profiling.config",
    "TuneConfig": "ascend_tune.tuning.config",
    "ShapesConfig": "ascend_tune.shapes.config",
    "HealthConfig": "ascend_tune.health.config",
}

__getattr__, __dir__ = lazy_names(__name__, {**_LAZY, "__version__": "ascend_tune._version"})

# the modules that moved into runtime/ and contract/ (0.1.0's layout): their old import paths keep working
keep_moved_modules({
    **{f"ascend_tune.{m}": f"ascend_tune.runtime.{m}" for m in (
        "monitor", "options", "sigterm", "capture", "batch_indices", "optimizer_watch", "steps", "step_clock",
        "log_windows", "host_times", "sinks")},
    **{f"ascend_tune.{m}": f"ascend_tune.contract.{m}" for m in ("callbacks", "context", "outputs", "events")},
})
