"""The ``health=`` option of TrainingMonitor: gradient norm per step, module statistics at chosen steps, spikes.

Per step nothing is read back: the step's gradient norm and non-finite count (:mod:`.gradients`; a clipped step's
are the clip's own norm, nothing computed) stay on the device and ride along with the losses' read-back at the log
step (``Callback.read_along``); the spike rule (:mod:`.spikes`) then judges each step of the window, so anomalies
are found at log steps, never between them.
An anomaly is an ``anomaly`` event in metrics.jsonl, a line in ``anomalies.jsonl``, one console warning, with the
sample indices of the step's batches when the passed loader is a ``DataLoader`` (``ctx.batches``). ``on_anomaly``
then arms a statistics dump (the precision feature: the user's own ``precision=`` callback when on, else one made
through the feature registry with the builtin engine) or module statistics for the next whole step: the step under
way when the read-back came at its first batch (the CPU, a passed loader), else the one after it.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional

import torch

from ..analysis.health import anomaly_line
from ..contract.callbacks import Callback, build_feature
from ..contract.lines import json_line
from ..contract.outputs import LineFile
from ..formats.run_dir import ANOMALIES_JSONL, HEALTH_DIR, MODULES_JSONL, rank_dir_name
from ..formats.writing import make_folder
from ..recording.frames import internal
from .config import HealthConfig
from .gradients import GradNorms
from .modules import ModuleStats
from .spikes import SpikeRule

if TYPE_CHECKING:
    from ..contract.context import RunContext

logger = logging.getLogger("ascend_tune")
_isfinite = math.isfinite


def build_callback(value: Any, ctx: RunContext) -> Optional[HealthCallback]:
    """The monitor's factory for ``health=``: a :class:`HealthCallback`, or None when off
    (``value`` None: ``ASCEND_TUNE_HEALTH``)."""
    config = HealthConfig.from_option(value)
    return None if config is None else HealthCallback(config)


class HealthCallback(Callback):
    """Drives the health feature from the step clock (see the module docstring)."""

    name = "health"

    def __init__(self, config: HealthConfig):
        self.config = config
        self._norms = GradNorms()
        self._modules: Optional[ModuleStats] = None
        self._pending: dict = {}  # step -> its StepNorm, on the device
        self._derived: dict = {}  # step -> its count when its norm is not finite (0 when it is), read back
        self._indices: dict = {}  # step -> the sample indices of its batches
        self._skipped: set = set()
        spike = (config.window, config.warmup, config.threshold, config.min_rise)
        self._loss_rule, self._norm_rule = SpikeRule(*spike), SpikeRule(*spike)  # the step loss's, the norm's
        self._anomalies: list = []
        self._module_steps: list = []
        self._armed: set = set()  # steps whose module statistics an anomaly asked for
        self._begun: Optional[int] = None
        self._dump: Any = None
        self._own_dump = False
        self._dumps_armed: list = []
        self._nan: dict = {}
        self._files: dict = {}

    # --- the step clock ---------------------------------------------------------------------------------------------

    def on_enter(self, ctx: RunContext, stack: contextlib.ExitStack) -> None:
        self._ctx, self._stack = ctx, stack
        self._first = ctx.start_step
        if (self.config.modules or self.config.on_anomaly == "modules") and ctx.models:
            self._modules = ModuleStats(ctx.models, self.config.targets)
            stack.callback(self._modules.close)
        # module statistics' moment before each optimizer step and clip; without them, nothing to call
        self._norms.install(stack, ctx.optimizer, self._before_step if self._modules is not None else None)
        if ctx.batches is not None:
            ctx.batches.start()
        folder = ctx.run_dir.root if ctx.rank == 0 else ctx.run_dir.path(rank_dir_name(ctx.rank))
        make_folder(folder)
        resume = ctx.start_step > 0
        self._files["anomalies"] = LineFile(f"{folder}/{ANOMALIES_JSONL}", resume, ctx.outputs)
        stack.callback(self._files["anomalies"].close)
        if self._modules is not None:
            make_folder(f"{folder}/{HEALTH_DIR}")
            self._files["modules"] = LineFile(f"{folder}/{HEALTH_DIR}/{MODULES_JSONL}", resume, ctx.outputs)
            stack.callback(self._files["modules"].close)

    def listens(self, hook: str) -> bool:
        # a step's beginning matters to module statistics and to an anomaly's response (the step under way); the
        # default, norms and warnings, has nothing to do there: no step calls it
        if hook == "on_step_begin":
            return bool(self.config.modules or self.config.on_anomaly != "warn")
        return super().listens(hook)

    def on_step_begin(self, ctx: RunContext, step: int) -> None:
        self._begun = step
        if self._own_dump:
            self._dump.on_step_begin(ctx, step)
        if self._modules is not None and (self.config.module_step(step, self._first) or step in self._armed):
            self._modules.begin()

    def on_step_end(self, ctx: RunContext, step: int) -> None:
        value = self._norms.take()
        if value is not None:
            self._pending[step] = value
        if ctx.batches is not None and ctx.batches.pending:
            self._indices[step] = [i for i in ctx.batches.take() if i is not None] or None
        if self._modules is not None and self._modules.recording:
            records = self._modules.end(step, ctx.rank)
            self._module_steps.append(step)
            self._files["modules"].write(b"".join(json_line(r) for r in records))
        if self._armed:
            self._armed.discard(step)
        if self._own_dump:
            self._dump.on_step_end(ctx, step)

    def read_along(self, ctx: RunContext, entries: list) -> Any:
        values, pending, clipped = [], self._pending, True
        for entry in entries:  # a loop, no generator: at log_every=1 this runs every step
            value = pending.pop(entry.step, None)
            values.append(value)
            if value is None or value.nonfinite_if is None:
                clipped = False
            if entry.skipped:
                self._skipped.add(entry.step)
        if clipped:
            # clipped steps: each count follows from its norm (on_window), so the norms ride alone, and one step's
            # as it is: no kernel of ours
            for entry, value in zip(entries, values):
                self._derived[entry.step] = value.nonfinite_if
            if len(values) == 1:
                return values[0].norm
            with internal():
                return _stacked([v.norm for v in values])
        known = next((v for v in values if v is not None), None)
        if known is not None:
            dev = known.norm.device
        else:
            dev = next((e.loss.device for e in entries if isinstance(e.loss, torch.Tensor)), torch.device("cpu"))
        with internal():
            nan = self._nan_on(dev)
            flat = []
            for entry, value in zip(entries, values):
                if value is None:
                    flat += (nan, nan)
                    continue
                flat += (value.norm, nan if value.nonfinite is None else value.nonfinite)
                if value.nonfinite_if is not None:
                    self._derived[entry.step] = value.nonfinite_if
            return _stacked(flat)

    def on_window(self, ctx: RunContext, window: Any, values: list) -> Optional[dict]:
        steps = range(window.first_step, window.last_step + 1)
        paired = len(values) > len(steps)  # (norm, count) per step; else the norms alone (read_along)
        raw = values[0::2] if paired else values
        derived, skipped, indices = self._derived, self._skipped, self._indices
        loss_rule, norm_rule = self._loss_rule, self._norm_rule
        norms, counts = [], []
        # one loop, every step's value and verdicts (at log_every=1 this runs every step)
        for step, loss, v, c in zip(steps, window.losses, raw, values[1::2] if paired else raw):
            if_nonfinite = derived.pop(step, None)
            if if_nonfinite is not None:  # a clipped step's: it follows from the clip's norm where it can
                # a NaN norm made every gradient NaN; an infinite one zeroed the finite gradients and made the
                # infinite ones NaN: which ones is not known without the pass the clip's norm saved (unknown)
                c = 0 if _isfinite(v) else if_nonfinite if v != v else None
            elif c != c:
                c = None
            counts.append(c)
            # (NaN, NaN) is a step without a value; a NaN norm with a count is a NaN gradient
            norm = None if c is None and v != v else v
            norms.append(norm)
            verdict = loss_rule.judge(loss)
            if verdict is not None:
                self._report(ctx, step, "loss", verdict, c)
            if step in skipped:  # GradScaler skips the steps whose gradients overflow: by design
                skipped.discard(step)
            else:
                verdict = norm_rule.judge(norm)
                if verdict is not None:
                    self._report(ctx, step, "grad_norm", verdict, c)
            if indices:
                indices.pop(step, None)
        if len(norms) == 1:  # log_every=1
            count = counts[0]
            return {"grad_norm": norms[0], "step_grad_norms": norms,
                    "grad_nonfinite": None if count is None else int(count)}
        seen = [v for v in norms if v is not None]
        nonfinite = [int(c) for c in counts if c is not None]
        return {"grad_norm": sum(seen) / len(seen) if seen else None, "step_grad_norms": norms,
                "grad_nonfinite": sum(nonfinite) if nonfinite else None}

    def on_exit(self, ctx: RunContext, exc_type: Optional[type]) -> None:
        if self._own_dump:
            self._dump.on_exit(ctx, exc_type)

    def summary(self) -> Optional[dict]:
        first = self._anomalies[0] if self._anomalies else None
        out = {"anomalies": len(self._anomalies), "first_anomaly": first, "module_steps": self._module_steps,
               "on_anomaly": self.config.on_anomaly, "dumps_armed": self._dumps_armed}
        if self._own_dump:
            out["dump"] = self._dump.summary()
        return out

    # --- anomalies --------------------------------------------------------------------------------------------------

    def _report(self, ctx: RunContext, step: int, metric: str, verdict: Any, count: Optional[float]) -> None:
        """An anomaly of ``metric`` at ``step`` (the spike rule's ``verdict``): recorded, written, warned, answered."""
        c = self.config
        record = {"step": step, "metric": metric, "value": verdict.value, "baseline": verdict.baseline,
                  "spread": verdict.spread, "rule": verdict.describe(c.threshold, c.min_rise, c.window),
                  "indices": self._indices.get(step), "rank": ctx.rank}
        if metric == "grad_norm" and count is not None:
            record["grad_nonfinite"] = int(count)
        self._anomalies.append(record)
        self._files["anomalies"].write(json_line(record))
        ctx.record_event("anomaly", **{k: v for k, v in record.items() if k != "rank"})
        logger.warning("ascend_tune: %s", anomaly_line(record))
        self._respond(ctx)

    def _respond(self, ctx: RunContext) -> None:
        """``on_anomaly``: arm the next whole step(s)."""
        if self.config.on_anomaly == "warn" or self._begun is None:
            return
        batches = ctx.batches
        now = batches is not None and batches.on and batches.pending == 1  # read at the step's first batch
        first = self._begun if now else self._begun + 1
        steps = range(first, first + self.config.anomaly_steps)
        if self.config.on_anomaly == "modules" and self._modules is not None:
            self._armed.update(steps)
            if now and not self._modules.recording:
                self._modules.begin()
        elif self.config.on_anomaly == "dump":
            for step in steps:
                if step not in self._dumps_armed and self._arm_dump(ctx, step):
                    self._dumps_armed.append(step)

    def _arm_dump(self, ctx: RunContext, step: int) -> bool:
        if self._dump is None:
            self._dump = ctx.feature("precision")
            if self._dump is None:  # none asked for: the registry's precision feature, builtin statistics
                self._dump = build_feature("precision", {"task": "statistics", "level": "L1", "steps": [step],
                                                         "backend": "builtin"}, ctx)
                self._own_dump = True
                self._dump.on_enter(ctx, self._stack)
                self._dump.on_step_begin(ctx, self._begun)  # the step under way (dumped from now when it is `step`)
        arm = getattr(self._dump, "dump_step", None)
        if arm is None:
            ctx.warn("health: on_anomaly='dump' needs one precision item (a list of them cannot be armed)")
            self.config = replace(self.config, on_anomaly="warn")
            return False
        return bool(arm(step))

    def _before_step(self) -> None:
        if self._modules is not None and self._modules.recording:
            self._modules.before_step()

    def _nan_on(self, dev: torch.device) -> torch.Tensor:
        if dev not in self._nan:
            self._nan[dev] = torch.full((), math.nan, device=dev)
        return self._nan[dev]


def _stacked(tensors: list) -> torch.Tensor:
    """``tensors`` (0-dim) as one 1-D tensor on the first one's device: one kernel where they all lie there (stack
    promotes the counts' and norms' dtypes to one float)."""
    dev = tensors[0].device
    if all(t.device == dev for t in tensors):
        return torch.stack(tensors)
    return torch.stack([t.to(dev, torch.float32) for t in tensors])
