"""The ``health=`` feature: gradient norms per step, per-module statistics at chosen steps, spike detection.

- :mod:`.config`: ``HealthConfig``; :mod:`.callback`: the monitor's ``health=`` feature (``build_callback``);
- :mod:`.gradients`: the step's gradient norm on the device; :mod:`.modules`: module statistics;
  :mod:`.spikes`: the rolling median / MAD rule;
- its files are read back by :mod:`ascend_tune.analysis.health` (``ascend-tune health``).
"""

from ..lazy import lazy_names

__all__ = ["ENV_HEALTH", "HealthCallback", "HealthConfig", "build_callback"]

__getattr__, __dir__ = lazy_names(__name__, {
    "ENV_HEALTH": "ascend_tune.health.config", "HealthConfig": "ascend_tune.health.config",
    "HealthCallback": "ascend_tune.health.callback", "build_callback": "ascend_tune.health.callback",
})
