"""The launcher's options and how they travel: the monitor's own in ``ASCEND_TUNE_RUN`` (JSON), each feature's in
the ``ASCEND_TUNE_*`` switch its config reads (:meth:`~ascend_tune.config.FeatureConfig.from_env`), so a variable
the user set keeps working and a flag given on the command line wins over it. No torch here.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Optional

from ..errors import ConfigError

ENV_RUN = "ASCEND_TUNE_RUN"  # JSON of RunOptions; its presence is what makes a process monitored
ENV_HOME = "ASCEND_TUNE_RUN_HOME"  # the folder holding the launcher's ascend_tune package
ENV_PROFILE, ENV_DUMP, ENV_TUNE = "ASCEND_TUNE_PROFILE", "ASCEND_TUNE_DUMP", "ASCEND_TUNE_TUNE"
ENV_SHAPES, ENV_TENSORBOARD, ENV_HEALTH = "ASCEND_TUNE_SHAPES", "ASCEND_TUNE_TENSORBOARD", "ASCEND_TUNE_HEALTH"
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


def precision_text(dump: Optional[str], overflow: Optional[str], replay: Optional[str]) -> Optional[str]:
    """``ASCEND_TUNE_DUMP``'s text for ``--dump`` / ``--overflow`` / ``--replay`` (``;`` between tasks), or None
    when none of them is given. A flag without SPEC (``"1"``) takes its task's defaults."""
    parts = []
    for task, spec in (("statistics", dump), ("overflow_check", overflow), ("replay", replay)):
        if spec is None:
            continue
        spec = spec.strip()
        parts.append(f"task={task}" + (f",{spec}" if spec and spec.lower() not in ("1", "on", "true", "yes") else ""))
    return ";".join(parts) if parts else None


def check_features(env: dict) -> None:
    """Raise ConfigError (with what to do) when a feature switch in ``env`` would be refused by its process."""
    from ..health.config import HealthConfig
    from ..precision.config import precision_configs
    from ..profiling.config import ProfileConfig
    from ..tuning import TuneConfig

    if env.get(ENV_DUMP):
        precision_configs(env[ENV_DUMP])
    if env.get(ENV_PROFILE):
        ProfileConfig.from_text(env[ENV_PROFILE], source="--profile")
    if env.get(ENV_HEALTH):
        HealthConfig.from_text(env[ENV_HEALTH], source="--health")
    if env.get(ENV_TUNE):
        TuneConfig.from_text(env[ENV_TUNE], source="--tune")
