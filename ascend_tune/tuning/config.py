"""``tune=`` / ``ASCEND_TUNE_TUNE``: what tuning does in the block."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..config import FeatureConfig
from ..errors import ConfigError

ENV_TUNE = "ASCEND_TUNE_TUNE"
OPTIMIZER_MODES = ("auto", "swap", "force", "report", "off")


@dataclass(frozen=True)
class TuneConfig(FeatureConfig):
    """What tuning does in the block.

    optimizer: ``"auto"`` (default) swap on an NPU, report on a CPU or GPU; ``"swap"`` (``tune=True``, or
        ``optimizer=True``) swap to the fastest legal implementation on any device, keeping an explicit
        ``foreach``/``fused``; ``"force"`` also override those; ``"report"`` only report, on any device; ``"off"``
        (or False) leave the optimizer alone, report nothing.
    jit_compile: on an NPU, ``False`` sets binary kernels (``set_compile_mode(jit_compile=False)``), ``True``
        online compilation, ``None`` leaves the runtime alone.
    measure: on a CPU, time the legal variants on clones of the parameters when that is cheap (else use fused, then
        foreach); ``False`` makes the choice by rule only, the same in every run.

    ``ASCEND_TUNE_TUNE`` takes the on/off words (on is ``tune=True``), ``force``, ``swap``, ``report`` (the
    ``optimizer`` modes) or ``key=value`` items.
    """

    OPTION = "tune"
    ENV = ENV_TUNE
    EXAMPLE = "optimizer=force,jit_compile=none"
    RUN_FLAGS = {"tune": "device-driven tuning: on, off, swap, force, report or key=value items"}
    TAKES_TEXT = False
    WORDS = {"force": {"optimizer": "force"}, "swap": {"optimizer": "swap"}, "report": {"optimizer": "report"}}

    optimizer: str = "auto"
    jit_compile: Optional[bool] = False
    measure: bool = True

    def __post_init__(self) -> None:
        if self.optimizer is True:
            object.__setattr__(self, "optimizer", "swap")
        elif self.optimizer is False:
            object.__setattr__(self, "optimizer", "off")
        if self.optimizer not in OPTIMIZER_MODES:
            raise ConfigError(
                f"tune option optimizer must be one of {', '.join(map(repr, OPTIMIZER_MODES))} (or True / False), "
                f"got {self.optimizer!r}"
            )
        if self.jit_compile not in (None, True, False):
            raise ConfigError(f"tune option jit_compile must be None, True or False, got {self.jit_compile!r}")
        self.check_bool("measure")

    @property
    def enabled(self) -> bool:
        """Whether tuning would touch anything."""
        return self.optimizer != "off" or self.jit_compile is not None

    @classmethod
    def turned_on(cls) -> TuneConfig:
        """``tune=True`` / ``ASCEND_TUNE_TUNE=1``: swap the optimizer on every device (the NPU's compile mode as
        by default)."""
        return cls(optimizer="swap")

    def swaps_on(self, device_kind: str) -> bool:
        """Whether the optimizer is swapped on ``device_kind`` (else it is only reported on)."""
        return self.optimizer in ("swap", "force") or (self.optimizer == "auto" and device_kind == "npu")

    @classmethod
    def off(cls) -> TuneConfig:
        """``tune=False`` / ``ASCEND_TUNE_TUNE=0``: a config that touches nothing."""
        return cls(optimizer="off", jit_compile=None)
