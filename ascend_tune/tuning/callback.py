"""The ``tune=`` feature: the optimizer swap and the NPU compile mode for the block, reported in tuning.json."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Optional

from ..contract.callbacks import Callback
from .config import TuneConfig

if TYPE_CHECKING:
    from ..contract.context import RunContext

# torch-heavy modules (device, metrics, compile_mode, optimizer_swap) are imported where they are used
logger = logging.getLogger("ascend_tune")


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
            from ..contract.lines import console  # the one line a user sees (rank 0, unless quiet)

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
