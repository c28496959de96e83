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

from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Optional

from ..callbacks import Callback
from ..config import FeatureConfig
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..context import RunContext

# torch-heavy modules (device, metrics, compile_mode, optimizer_swap) are imported where they are used, so that
# `ascend-tune shapes`, which lives in this package, starts without importing torch

__all__ = ["TuneConfig", "TuningCallback", "build_callback", "ENV_TUNE"]

ENV_TUNE = "ASCEND_TUNE_TUNE"
OPTIMIZER_MODES = ("auto", "swap", "force", "report", "off")
logger = logging.getLogger("ascend_tune")


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


def build_callback(value: Any, ctx: RunContext) -> Optional[TuningCallback]:
    """The monitor's factory for ``tune=``: None (option not given) reads ``ASCEND_TUNE_TUNE``; unset: the default
    (``optimizer="auto"``: swap on an NPU, report elsewhere)."""
    config = TuneConfig.from_option(value, default=TuneConfig())
    return TuningCallback(config) if config.enabled else None


class TuningCallback(Callback):
    """Sets the compile mode, then swaps the optimizer, at the block's start; both come back at its end."""

    name = "tuning"

    def __init__(self, config: TuneConfig):
        self.config = config
        self._record: dict = {}
        self._swap: Optional[Any] = None  # an optimizer_swap.OptimizerSwap once on_enter has run

    def on_enter(self, ctx: RunContext, stack: contextlib.ExitStack) -> None:
        """Tune before the first step; the final tuning.json is written after everything is restored."""
        from .. import device
        from . import compile_mode, optimizer_swap

        path = ctx.run_dir.tuning_json if ctx.is_main else None
        if path is not None:  # registered first, so it runs after the undos below
            stack.callback(lambda: ctx.outputs.write_json(path, self._report()))
        kind = ctx.device.kind
        npu = device.torch_npu_module()
        # first of all: the compile mode applies to operators compiled after it, so before the probes below
        compiled = compile_mode.set_for_block(stack, self.config.jit_compile, npu, kind)
        try:
            self._swap = optimizer_swap.swap_in_place(
                stack, ctx.optimizer, device_kind=kind, mode=self.config.optimizer, measure=self.config.measure,
                models=ctx.models, npu=npu, world_size=ctx.world_size, report_only=not self.config.swaps_on(kind),
            )
        except Exception as exc:  # a faster optimizer is never worth a training run; the undo is on the stack
            name = type(ctx.optimizer).__name__
            reason = (f"the optimizer swap failed (what it changed is undone at the block's end): "
                      f"{type(exc).__name__}: {exc}")
            ctx.warn(f"tune optimizer {name}: {reason}")
            self._swap = optimizer_swap.OptimizerSwap(optimizer_swap.OptimizerDecision(name, "failed", None, reason))
        decision = self._swap.decision
        self._record = {"device": kind, "config": asdict(self.config), "compile_mode": compiled}
        logger.info("ascend_tune: tune compile mode: %s (%s)", compiled["action"], compiled["reason"])
        logger.info("ascend_tune: tune optimizer %s: %s %s (%s)", decision.optimizer, decision.action,
                    decision.variant or "", decision.reason)
        for variant, why in decision.refused.items():
            logger.info("ascend_tune: tune optimizer: not %s: %s", variant, why)
        if ctx.is_main and decision.action == "reported":
            from ..sinks import console  # the one line a user sees (rank 0, unless quiet)

            console.info("ascend_tune: tune: %s", decision.headline(kind))
        if compiled["action"] == "failed":
            ctx.warn(compiled["reason"])
        if path is not None:
            ctx.outputs.write_json(path, self._report())

    def summary(self) -> Optional[dict]:
        """The short form for summary.json: what runs during the block."""
        if self._swap is None:
            return None
        decision = self._swap.decision
        optimizer = {"action": decision.action, "variant": decision.variant, "reason": decision.reason}
        if decision.action == "reported":
            optimizer.update(would_run=decision.would_run, gain=decision.gain)
        return {
            "optimizer": optimizer,
            "compile_mode": {k: v for k, v in self._record["compile_mode"].items() if k in ("action", "jit_compile")},
        }

    def _report(self) -> dict:
        return {**self._record, "optimizer": self._swap.report() if self._swap else None}
