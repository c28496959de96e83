"""The run's own settings (``experiment=``, on by default): what changes its numbers, recorded in ``config.json``
with no code from the user, for ``ascend-tune compare-config``.

- :mod:`.config`: ``ExperimentConfig``; :mod:`.callback`: the monitor's ``experiment=`` feature (``build_callback``);
- :mod:`.record`: each section of config.json, read from the objects the user already has.
"""

from ..lazy import lazy_names

__all__ = ["ExperimentCallback", "ExperimentConfig", "build_callback"]

__getattr__, __dir__ = lazy_names(__name__, {
    "ExperimentCallback": "ascend_tune.experiment.callback", "build_callback": "ascend_tune.experiment.callback",
    "ExperimentConfig": "ascend_tune.experiment.config",
})
