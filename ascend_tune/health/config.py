"""HealthConfig: what the ``health=`` option watches (``ASCEND_TUNE_HEALTH=1``, or ``key=value`` items).

The spike rule's defaults (``window``, ``warmup``, ``threshold``, ``min_rise``) were chosen by measuring clean noisy
runs: ``python benchmarks/health_false_alarms.py`` prints the false-alarm rate of a grid of them (docs/health.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..config import FeatureConfig
from ..errors import ConfigError

ENV_HEALTH = "ASCEND_TUNE_HEALTH"
ON_ANOMALY = ("warn", "dump", "modules")


@dataclass(frozen=True)
class HealthConfig(FeatureConfig):
    """Training health: per-step gradient norm, per-module statistics at chosen steps, spikes.

    Parameters:
        modules: per-module statistics (gradient / parameter norm, update ratio, activations) at chosen steps.
        every: with ``modules``, every N-th step (0: only ``steps``).
        steps: with ``modules``, these steps (numbers or ``"a-b"`` ranges); None with ``every=0``: the first step.
        targets: module name patterns (``fnmatch``, e.g. ``"transformer.h.*.mlp"``); empty: every module that holds
            parameters of its own.
        window: steps in the spike rule's rolling baseline (median and MAD of the values' logs, :mod:`.spikes`).
        warmup: values seen before the spike rule judges (none is flagged before).
        threshold: a spike is ``log(value) > median + threshold * 1.4826 * MAD`` ...
        min_rise: ... and ``value > (1 + min_rise) * baseline`` (a flat, noiseless series is not flagged for noise).
        on_anomaly: ``"warn"`` (the warning, the event and anomalies.jsonl), ``"dump"`` (also a statistics dump of
            the next step through the precision feature) or ``"modules"`` (also module statistics of the next steps).
        anomaly_steps: how many steps after an anomaly ``on_anomaly`` covers.
    """

    OPTION = "health"
    ENV = ENV_HEALTH
    EXAMPLE = "modules=1,every=100,on_anomaly=dump"
    RUN_FLAGS = {"health": "training health: gradient norms, spikes, per-module statistics (SPEC: e.g. "
                           "modules=1,every=50,on_anomaly=dump)"}

    modules: bool = False
    every: int = 0
    steps: Optional[tuple] = None
    targets: tuple = ()
    window: int = 50
    warmup: int = 20
    threshold: float = 8.0
    min_rise: float = 0.5
    on_anomaly: str = "warn"
    anomaly_steps: int = 1

    def __post_init__(self) -> None:
        self.check_bool("modules")
        self.check_int("every", 0)
        self.check_int("window", 5)
        self.check_int("warmup", 1)
        self.check_int("anomaly_steps", 1)
        for name in ("threshold", "min_rise"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"health option {name} must be a number >= 0, got {value!r}")
        self.check_choice("on_anomaly", ON_ANOMALY)
        if self.steps is not None:
            object.__setattr__(self, "steps", _steps(self.steps))
        if isinstance(self.targets, str):
            object.__setattr__(self, "targets", (self.targets,))
        if not all(isinstance(t, str) and t for t in self.targets):
            raise ConfigError(f"health option targets must be module name patterns, got {self.targets!r}")
        object.__setattr__(self, "targets", tuple(self.targets))

    def module_step(self, step: int, first_step: int) -> bool:
        """Whether ``modules=True`` records step ``step`` (the block's first step is ``first_step``)."""
        if not self.modules:
            return False
        if self.steps is not None and any(lo <= step <= hi for lo, hi in self.steps):
            return True
        if self.every:
            return (step - first_step) % self.every == 0
        return self.steps is None and step == first_step


def _steps(value: object) -> tuple:
    """``steps`` as ``((lo, hi), ...)`` from ints and ``"a-b"`` ranges."""
    items = value if isinstance(value, (list, tuple)) else (value,)
    out = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
            out.append((item, item))
            continue
        if isinstance(item, tuple) and len(item) == 2 and all(isinstance(v, int) for v in item):
            out.append(item)  # already a range
            continue
        if isinstance(item, str) and "-" in item:
            lo, _, hi = item.partition("-")
            if lo.strip().isdigit() and hi.strip().isdigit() and int(lo) <= int(hi):
                out.append((int(lo), int(hi)))
                continue
        raise ConfigError(f"health option steps must be step numbers or 'a-b' ranges, got {item!r}")
    return tuple(out)
