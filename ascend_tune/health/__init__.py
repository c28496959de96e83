"""The ``health=`` feature: gradient norms per step, per-module statistics at chosen steps, spike detection.

config (HealthConfig), gradients (the step's gradient norm on the device), modules (module statistics), spikes (the
rolling median / MAD rule), callback (HealthCallback and the monitor's factory).
"""

from .callback import HealthCallback, build_callback
from .config import HealthConfig

__all__ = ["HealthCallback", "HealthConfig", "build_callback"]
