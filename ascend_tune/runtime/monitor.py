"""TrainingMonitor: two lines around an unchanged training loop give the loss / steps-per-second log.

The monitor only composes and owns lifetimes (one ExitStack): the capture (:mod:`.capture`: backward patch,
optimizer hooks, GradScaler, loader wrap) feeds events to a :class:`~.steps.StepTracker`, whose closed steps drive
the features' callbacks and the step clock (:mod:`.step_clock`), whose log windows go to the sinks (:mod:`.sinks`).
How a step and its loss are seen is documented in :mod:`.steps`. Features are built and entered in the order of
:data:`ascend_tune.contract.callbacks.FEATURES` (decided there, and why), then the user's own callbacks; each
factory reads its own ``ASCEND_TUNE_*`` switch when its option is not given.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable
from types import MappingProxyType
from typing import Any, Optional

import torch

from .. import device
from ..contract.callbacks import FEATURES, CallbackSet, build_features
from ..contract.context import RunContext, detect_rank, detect_world_size
from ..contract.events import RunEvents
from ..contract.outputs import Outputs
from ..errors import ConfigError
from ..formats.run_dir import RunDir
from ..recording.frames import INTERNAL, internal
from . import capture, compiled, sinks, step_clock
from .host_times import HostTimes
from .log_windows import LogWindows
from .optimizer_watch import OptimizerWatch, model_name
from .options import MonitorOptions, check_objects
from .sigterm import SigtermHandler
from .steps import OPTIMIZER, WATCH, ClosedStep

logger = logging.getLogger("ascend_tune")

_OPEN: list = []  # the open blocks; the launcher's (gives_way) closes when the script opens its own


class TrainingMonitor(compiled.StepFields):
    """Instrument a training loop: ``with TrainingMonitor(model, optimizer, train_loader, log_dir=...):``.

    Parameters:
        model: the ``nn.Module`` being trained (or a list of them, or None).
        optimizer: the ``torch.optim.Optimizer`` whose ``step()`` ends a step; None makes each backward a step.
        train_loader: the loader the loop iterates; its instance is wrapped for the block to mark batches.
        log_dir: where ``log.txt``, ``metrics.jsonl`` and ``summary.json`` go (rank 0 only).
        log_every: write a line every k steps; the line shows the mean step loss over those k steps.
        warmup_steps: steps logged but left out of the summary's throughput statistics.
        start_step: the first step's number, to continue a resumed run (its log is appended to).
        samples_per_step: samples per optimizer step; else counted from the batches the loader hands out.
        scaler: a ``GradScaler`` whose class overrides ``scale``/``step`` (torch's own is seen without it).
        accumulate: ``"sum"`` (default) or ``"mean"`` of the losses back-propagated within one step.
        rank: this process's global rank; else ``RANK`` or ``torch.distributed``.
        quiet: print no log lines on stderr (rank 0 prints them otherwise, whatever ``logging`` is set to).
        profile: profiler traces on a schedule (``True``, a dict or a ``ProfileConfig``; ``ASCEND_TUNE_PROFILE``).
        precision: precision dumps / overflow check / replay at chosen steps (a dict or ``PrecisionConfig``, or a
            list of them: several tasks in one run; ``ASCEND_TUNE_DUMP``).
        seed: seed python, numpy and torch (an int) before the first step.
        tune: device-driven tuning (fused optimizer swap, compile mode): ``True``, ``False`` or a dict / ``TuneConfig``.
        shapes: the dynamic-shape detector (``True``, a dict; ``ASCEND_TUNE_SHAPES=1``).
        health: gradient norms, module statistics, spikes (``True``, a dict; ``ASCEND_TUNE_HEALTH=1``).
        tensorboard: also write loss / steps-per-sec / samples-per-sec scalars under ``<log_dir>/tensorboard``
            (``ASCEND_TUNE_TENSORBOARD=1``; needs the ``tensorboard`` extra).
        callbacks: extra :class:`~ascend_tune.contract.callbacks.Callback` objects driven by the step clock.
    """

    def __init__(
        self,
        model: Any = None,
        optimizer: Optional[torch.optim.Optimizer] = None,
        train_loader: Optional[Iterable] = None,
        log_dir: str = "exp/train",
        *,
        log_every: int = 1,
        warmup_steps: int = 10,
        start_step: int = 0,
        samples_per_step: Optional[int] = None,
        scaler: Any = None,
        accumulate: str = "sum",
        rank: Optional[int] = None,
        quiet: bool = False,
        profile: Any = None,
        precision: Any = None,
        seed: Optional[int] = None,
        tune: Any = None,
        shapes: Any = None,
        health: Any = None,
        tensorboard: Optional[bool] = None,
        callbacks: Optional[Iterable] = None,
        **unknown: Any,
    ):
        self.callbacks = list(callbacks or [])
        # the registry's features: those named above, and any other's as a keyword
        named = dict(profile=profile, precision=precision, seed=seed, tune=tune, shapes=shapes, health=health)
        self.features = {option: named.get(option, unknown.pop(option, None)) for option in FEATURES}
        check_objects(unknown, model, optimizer, train_loader, scaler, self.callbacks)
        options = MonitorOptions(log_dir=log_dir, log_every=log_every, warmup_steps=warmup_steps,
                                 start_step=start_step, samples_per_step=samples_per_step, accumulate=accumulate,
                                 rank=rank, tensorboard=tensorboard)
        self.model = model
        self.optimizer = optimizer
        self.train_loader = train_loader
        self.log_dir = os.fspath(options.log_dir)
        self.log_every = log_every
        self.warmup_steps = warmup_steps
        self.start_step = start_step
        self.samples_per_step = samples_per_step
        self.scaler = scaler
        self.accumulate = accumulate
        self.quiet = quiet
        self.tensorboard = tensorboard
        self.rank = rank if rank is not None else detect_rank()
        self.world_size = detect_world_size()
        self.device: Optional[device.DeviceInfo] = None
        self.epoch = 0
        self._stack: Optional[contextlib.ExitStack] = None
        self.gives_way, self.models_seen, self.forward_seen = False, [], None  # the launcher's: launch.process

    # --- the block ------------------------------------------------------------------------------------------

    def __enter__(self) -> TrainingMonitor:
        if self._stack is not None:
            raise ConfigError("this TrainingMonitor is already active; create one monitor per training run")
        for other in [m for m in _OPEN if m.gives_way]:
            other.close("TrainingMonitor", gather=False)  # the script's own block monitors it from here on
        self.device = device.detect_device()
        stack = contextlib.ExitStack()
        try:
            self._reset_state()
            if self.rank == 0 or self.world_size > 1:
                self._open_outputs(stack)
            # the backward patch; the batch and commit hooks: their compiled twins where the step path is built
            self._batch_hook, self._iterate = compiled.hook_steps(stack, self)
            capture.patch_grad_scaler(stack, self._on_scale, self._on_scaler_step, extra=self.scaler)
            if self.optimizer is not None:
                capture.hook_optimizer(stack, self.optimizer, self._tracker.step_pre_hook,
                                       self._tracker.optimizer_post)
            else:  # the optimizer that steps the model's parameters, also one created inside the block
                self._watch = OptimizerWatch(self._tracker, self._models, self._events.warn)
                self._watch.install(stack)
            self._ctx = self._context({})
            built = build_features(self.features, self._ctx)
            self._ctx = self._context({cb.name: cb for cb in built})
            self._callbacks = CallbackSet(built, self.callbacks, self._events.warn)
            self._callbacks.enter(self._ctx, stack)
            if self.train_loader is not None:
                if capture.wrap_loader(stack, self.train_loader, self._on_pass, self._batch_hook,
                                       indices=self._batches, iterate=self._iterate):
                    self._tracker.count_batches()
                else:
                    logger.warning(
                        "ascend_tune: train_loader of type %s cannot be wrapped in place; iterate "
                        "`mon.loader(train_loader)` to mark batches (steps are still counted)",
                        type(self.train_loader).__name__,
                    )
            SigtermHandler(lambda: self.close("SIGTERM", None), self._outputs).install(stack)
            self._stack = stack
            _OPEN.append(self)
            stack.callback(_OPEN.remove, self)
            self._callbacks.step_begin(self._ctx, self.start_step)
        except BaseException:
            self._stack = None
            stack.close()
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self.close(exc_type.__name__ if exc_type is not None else None, exc_type)
        if exc_type is None and self._callbacks.user_error is not None:
            raise self._callbacks.user_error  # a user's callback failed at the end: theirs to see
        return False  # never swallow the loop's exception

    @property
    def next_step(self) -> int:
        """The number the next step ends as (``start_step`` until the block's first step ends)."""
        return self._tracker.next_step

    def adopt_loader(self, loader: Iterable) -> bool:
        """Mark ``loader``'s batches from its next pass on (the launcher found it mid-pass); False if it cannot be."""
        self._require_active("adopt_loader")
        on_pass = lambda epoch: (self._tracker.count_batches(), self._on_pass(epoch))  # noqa: E731
        return capture.wrap_loader(self._stack, loader, on_pass, self._batch_hook, begun=True, indices=self._batches,
                                   iterate=self._iterate)

    def close(self, interrupted_by: Optional[str] = None, exc_type: Any = None, gather: bool = True) -> None:
        """The block's end (``__exit__``, SIGTERM, the launcher); never raises. ``gather=False``: no ranks' summary."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        with self._outputs:  # a SIGTERM now waits until summary.json is written
            self._events.contained("the step log", self._flush_steps)
            self._callbacks.exit(self._ctx, exc_type)
            # the monitor's only collective, once; skipped when the block raised or was interrupted, since the
            # other ranks may never reach it
            across = None if interrupted_by or not gather else self._events.contained(
                "the ranks' summary", step_clock.gather_ranks, self.totals, self.rank, self.world_size)
            self._finished = True
            # closed before summary.json is written, so that what failed while closing (tuning.json's last
            # update, a log file deleted under the run) is in its outputs_failed
            self._events.contained("the block's end", stack.close)
            if self.rank == 0:
                self._events.contained("summary.json", self._write_summary, interrupted_by, across)

    def _flush_steps(self) -> None:
        if self._watch is not None:
            self._watch.at_exit()
        self._tracker.commit()
        with internal():
            if self.clock.pending_steps and not self._log_broken:
                self._windows.close(self.clock, self.epoch, self._callbacks, self._ctx)
            self._windows.drain(True, self._callbacks, self._ctx)

    # --- explicit use -----------------------------------------------------------------------------------------

    def step(self, loss: Optional[torch.Tensor] = None) -> None:
        """End a step explicitly (``loss``: this step's loss; else what backward saw since the last step).

        From the first call on, optimizer hooks no longer end steps; a step they already ended is adopted.
        """
        self._require_active("step")
        if loss is not None and not isinstance(loss, torch.Tensor):
            loss = torch.tensor(float(loss))
        if loss is not None:
            with internal():
                loss = self._unscaled(loss).detach()
        self._tracker.explicit_step(loss)

    def loader(self, loader: Iterable) -> capture.MarkedLoader:
        """Iterate ``loader`` with its batches marked (for loaders not passed to the constructor)."""
        self._require_active("loader")
        self._tracker.count_batches()
        return capture.MarkedLoader(loader, self._on_pass, self._batch_hook, self._iterate)

    def record_event(self, kind: str, **fields: Any) -> None:
        """Add an event line (``{"event": kind, ...}``) to metrics.jsonl, e.g. which steps were traced and where."""
        self._events.record_event(kind, **fields)

    def warn(self, message: str) -> None:
        """Warn through the ``ascend_tune`` logger and record the warning in metrics.jsonl."""
        self._events.warn(message)

    # --- events from the capture ----------------------------------------------------------------------------

    # Each hook contains what our own code raises: the loop never sees an exception of ours. Where the step path
    # is compiled (.compiled), C twins of _on_backward / _on_batch / _on_commit take the usual cases.

    def _on_scale(self, scaled: torch.Tensor, loss: torch.Tensor) -> None:
        self._scaled = (scaled, loss)

    def _unscaled(self, tensor: torch.Tensor) -> torch.Tensor:
        if self._scaled is not None and tensor is self._scaled[0]:
            tensor = self._scaled[1]
            self._scaled = None  # drop the graph the scaled tensor holds
        return tensor

    def _on_backward(self, tensor: torch.Tensor) -> bool:
        try:
            loss = tensor if self._scaled is None else self._unscaled(tensor)
            if torch._C._len_torch_function_stack():  # a function mode (a dump, the detector) would see the detach
                with internal():
                    loss = loss.detach()
            else:
                loss = loss.detach()
            if self._watch is not None:
                self._watch.before_backward(tensor)
            return self._tracker.backward(loss) or self._watch is not None  # whether its end is wanted
        except Exception as exc:
            self._events.failed("the loss capture", exc)
            return False

    def _on_backward_done(self) -> None:
        try:
            self._tracker.backward_done()
            if self._watch is not None:
                self._watch.after_backward()
        except Exception as exc:
            self._events.failed("the step capture", exc)

    def _on_scaler_step(self, optimizer: Any, run: Any) -> Any:
        steps_model = self._watch.steps_model(optimizer) if self._watch is not None else None
        return self._tracker.scaler_step(run, optimizer, steps_model)

    def _on_pass(self, epoch: int) -> None:
        self.epoch = epoch
        try:
            if self._watch is not None:
                self._watch.new_pass()
        except Exception as exc:
            self._events.failed("the step capture", exc)

    def _on_batch(self, batch: Any, waited: float) -> None:
        try:
            self._host.data += waited
            if self._watch is not None:
                self._watch.before_batch()
            first = batch[0] if type(batch) in (list, tuple) and batch else None  # the default collate's, inline
            n = first.size(0) if type(first) is torch.Tensor and first.dim() else capture.batch_size(batch)
            self._tracker.batch(n)
        except Exception as exc:
            self._events.failed("the batch count", exc)

    # --- the step clock ----------------------------------------------------------------------------------------

    def _reset_state(self) -> None:
        self.run_dir = RunDir(self.log_dir)
        self.clock = step_clock.StepClock()
        self.totals = step_clock.RunTotals(self.start_step, self.warmup_steps)
        self._tracker = compiled.tracker_class()(
            self.start_step, self._on_step_end, self._on_commit,
            source=OPTIMIZER if self.optimizer is not None else WATCH, optimizer=self.optimizer,
            accumulate=self.accumulate, samples_per_step=self.samples_per_step,
            name_of=lambda optimizer, index: model_name(optimizer, index, self._models + tuple(self.models_seen)),
        )
        self._watch: Optional[OptimizerWatch] = None
        self._batches = capture.BatchIndices()
        self._scaled: Optional[tuple] = None
        self._host = HostTimes()
        self._windows = LogWindows(self.totals, self._host, self.rank, self.world_size, self.device)
        self._events = RunEvents(self.rank)
        self._outputs = Outputs(warn=self._events.warn)
        self._callbacks = CallbackSet([], [], self._events.warn)
        self._finished = False  # the block has ended: hooks still reached (a SIGTERM mid-step) do nothing
        self._log_broken = False
        self._entered_at = time.time()

    @property
    def _models(self) -> tuple:
        models = self.model if isinstance(self.model, (list, tuple)) else [self.model]
        return tuple(m for m in models if isinstance(m, torch.nn.Module))

    def _context(self, features: dict) -> RunContext:
        return RunContext(run_dir=self.run_dir, rank=self.rank, world_size=self.world_size, start_step=self.start_step,
                          device=self.device, models=self._models, forward_seen=self.forward_seen,
                          optimizer=self.optimizer, events=self._events, features=MappingProxyType(features),
                          outputs=self._outputs, batches=self._batches, loader=self.train_loader, scaler=self.scaler)

    def _on_step_end(self, step: int) -> None:
        if self._finished or not self._callbacks.stepping:
            self._tracker.on_end = None  # nothing listens to steps from now on: the tracker stops calling
            return
        with self._outputs:  # a SIGTERM waits until a dump or trace being written is whole
            self._callbacks.between(self._ctx, step)

    def _on_commit(self, closed: ClosedStep) -> None:  # its C twin: step_path.c's Hooks_on_commit
        if self._finished or self._log_broken:
            return
        try:
            self.clock.commit(closed)
            if (closed.step + 1) % self.log_every == 0 or self._windows.pending:
                self._log_due(closed)
        except Exception as exc:
            self._commit_failed(exc)

    def _log_due(self, closed: ClosedStep) -> None:  # a step's line is due, or the read of the previous one
        with self._outputs, INTERNAL:  # a SIGTERM waits for the lines; our reads are our own (no dump sees them)
            if self._windows.pending:  # a read started at the previous log step is due now
                self._windows.drain(True, self._callbacks, self._ctx)
            if (closed.step + 1) % self.log_every == 0:
                self._windows.close(self.clock, self.epoch, self._callbacks, self._ctx)

    def _commit_failed(self, exc: Exception) -> None:
        self._log_broken = True  # the step log stops; the features and the loop go on
        self._events.failed("the step log", exc)

    # --- outputs ---------------------------------------------------------------------------------------------------

    def _open_outputs(self, stack: contextlib.ExitStack) -> None:
        opened = sinks.open_step_sinks(
            self.run_dir, self.rank, self.world_size, resume=self.start_step > 0, echo=not self.quiet,
            tensorboard=self.tensorboard, events=self._events, outputs=self._outputs,
        )
        for sink in opened:
            stack.callback(sink.close)
        self._windows.sinks.extend(opened)
        if self.rank == 0 and not self.quiet:
            sinks.echo_to_console(stack)

    def _write_summary(self, interrupted_by: Optional[str], across: Optional[dict]) -> None:
        payload = self.totals.summary()
        payload.update(
            log_every=self.log_every, accumulate=self.accumulate, rank=self.rank, world_size=self.world_size,
            device=self.device.as_dict() if self.device else None, wall_seconds=time.time() - self._entered_at,
            interrupted_by=interrupted_by, ranks=across,
            steps_from=self._tracker.steps_from(passed=self.optimizer is not None),
            features_failed=self._callbacks.dropped,
        )
        payload.update(self._callbacks.summaries())
        payload["outputs_failed"] = self._outputs.summary()  # last: what the summaries' own writes lost too
        self._outputs.write_json(self.run_dir.summary_json, payload)

    def _require_active(self, what: str) -> None:
        if self._stack is None:
            raise ConfigError(f"mon.{what}() needs an active monitor: call it inside `with TrainingMonitor(...):`")
