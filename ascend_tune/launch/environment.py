"""The launcher's options and how they travel: the monitor's own in ``ASCEND_TUNE_RUN`` (JSON), each feature's in
the ``ASCEND_TUNE_*`` switch its config reads (:meth:`~ascend_tune.config.FeatureConfig.from_env`), so a variable
the user set keeps working and a flag given on the command line wins over it. A feature's flags and switch are
declared once, in its config (``RUN_FLAGS``, ``ENV``), found through the registry
(:func:`~ascend_tune.contract.callbacks.feature_config`). No torch here.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Optional

from ..errors import ConfigError

ENV_RUN = "ASCEND_TUNE_RUN"  # JSON of RunOptions; its presence is what makes a process monitored
ENV_HOME = "ASCEND_TUNE_RUN_HOME"  # the folder holding the launcher's ascend_tune package
PREFIX = "ascend-tune run: "  # every message of the launcher's own on stderr


@dataclass(frozen=True)
class RunOptions:
    """The TrainingMonitor options of every monitored process (the features travel in their own variables)."""

    log_dir: str = "exp/train"
    log_every: int = 1
    warmup_steps: int = 10
    seed: Optional[int] = None
    quiet: bool = False

    def to_env(self) -> str:
        """The ``ASCEND_TUNE_RUN`` value."""
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> Optional[RunOptions]:
        """The options ``ASCEND_TUNE_RUN`` holds; None when it is unset (the process is not the launcher's)."""
        text = os.environ.get(ENV_RUN, "")
        if not text:
            return None
        try:
            return cls(**json.loads(text))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{ENV_RUN}={text!r} is not what ascend-tune run writes ({exc})") from None


def run_features() -> list:
    """The configs of the features that have ``ascend-tune run`` flags, in the registry's order."""
    from ..contract.callbacks import FEATURES, feature_config

    return [config for config in map(feature_config, FEATURES) if config.RUN_FLAGS and config.ENV]


def feature_env(flags: dict) -> dict:
    """``{ENV: text}`` of the features whose flags were given (``flags``: flag -> SPEC or None)."""
    out = {}
    for config in run_features():
        text = config.run_text({flag: flags.get(flag) for flag in config.RUN_FLAGS})
        if text is not None:
            out[config.ENV] = text
    return out


def check_features(env: dict) -> None:
    """Raise ConfigError (with what to do) when a feature switch in ``env`` would be refused by its process."""
    for config in run_features():
        if env.get(config.ENV):
            config.check_text(env[config.ENV], source="--" + next(iter(config.RUN_FLAGS)))
