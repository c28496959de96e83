"""TrainingMonitor: two lines around an unchanged training loop give the loss / steps-per-second log.

How a step is seen, with no change to the loop:
- a *step* is an ``optimizer.step()`` (torch's step post-hook); with no optimizer, each backward is a step;
- its *loss* is the sum of the scalar tensors back-propagated since the previous step: with the usual
  ``(loss / accum).backward()`` that is the mean micro-batch loss, the objective whose gradient the step applied
  (``accumulate="mean"`` divides by the number of backwards, for scripts that back-propagate undivided losses);
  backwards inside ``step()`` are closure evaluations (LBFGS) and the first one is the step's loss;
- ``scaler.scale(loss).backward()`` is seen through ``GradScaler.scale``, whose input is the loss; a step that
  GradScaler skips (inf/nan gradients) is counted as a skipped step, never merged into the next one.

A step is *closed* when it ends and *committed* (numbered, logged) at the next event of the loop (a batch, a
backward, ``mon.step``, the end of the block). That one-event delay lets an explicit ``mon.step(loss)`` adopt a step
the hooks already closed, so mixing both styles never counts a step twice.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from typing import Any, Optional

import torch

from . import capture, device, metrics
from .callbacks import Callback
from .errors import ConfigError, OutputError, check_option_names

OUTPUT_FILES = ("log.txt", "metrics.jsonl", "summary.json")
logger = logging.getLogger("ascend_tune")


class TrainingMonitor:
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
        quiet: do not echo log lines through the ``ascend_tune`` logger.
        profile: profiler traces on a schedule (``True``, a dict or a ``ProfileConfig``; ``ASCEND_TUNE_PROFILE``).
        precision: precision dumps / overflow check at chosen steps (a dict or ``PrecisionConfig``;
            ``ASCEND_TUNE_DUMP``).
        seed: seed python, numpy and torch (an int) before the first step.
        tune: device-driven tuning (fused optimizer swap, compile mode): ``True``, ``False`` or a dict / ``TuneConfig``.
        shapes: the dynamic-shape detector (``True``, a dict; ``ASCEND_TUNE_SHAPES=1``).
        callbacks: extra :class:`~ascend_tune.callbacks.Callback` objects driven by the step clock.
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
        callbacks: Optional[Iterable] = None,
        **unknown: Any,
    ):
        _check_options(unknown)
        _check_model(model)
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise ConfigError(
                f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}; "
                "pass the optimizer whose step() ends a training step, or None"
            )
        if train_loader is not None and not isinstance(train_loader, Iterable):
            raise ConfigError(f"train_loader must be iterable, got {type(train_loader).__name__}")
        if not isinstance(log_dir, (str, os.PathLike)) or not str(log_dir):
            raise ConfigError("log_dir must be a folder path such as 'exp/train'")
        _check_int("log_every", log_every, 1)
        _check_int("warmup_steps", warmup_steps, 0)
        _check_int("start_step", start_step, 0)
        if samples_per_step is not None:
            _check_int("samples_per_step", samples_per_step, 1)
        if rank is not None:
            _check_int("rank", rank, 0)
        if accumulate not in ("sum", "mean"):
            raise ConfigError(f"accumulate must be 'sum' or 'mean', got {accumulate!r}")
        if scaler is not None and not callable(getattr(scaler, "scale", None)):
            raise ConfigError(f"scaler must be a GradScaler, got {type(scaler).__name__}")
        self.model = model
        self.optimizer = optimizer
        self.train_loader = train_loader
        self.log_dir = os.fspath(log_dir)
        self.log_every = log_every
        self.warmup_steps = warmup_steps
        self.start_step = start_step
        self.samples_per_step = samples_per_step
        self.scaler = scaler
        self.accumulate = accumulate
        self.quiet = quiet
        self.features = {"profile": profile, "precision": precision, "seed": seed, "tune": tune, "shapes": shapes}
        self.callbacks = list(callbacks or [])
        for cb in self.callbacks:
            if not isinstance(cb, Callback):
                raise ConfigError(f"callbacks must be ascend_tune.callbacks.Callback objects, got {type(cb).__name__}")
        self.rank = rank if rank is not None else _env_rank()
        self.world_size = _world_size()
        self.device: Optional[device.DeviceInfo] = None
        self.epoch = 0
        self._stack: Optional[contextlib.ExitStack] = None

    # --- the block ------------------------------------------------------------------------------------------

    def __enter__(self) -> TrainingMonitor:
        if self._stack is not None:
            raise ConfigError("this TrainingMonitor is already active; create one monitor per training run")
        self.device = device.detect_device()
        stack = contextlib.ExitStack()
        try:
            self._reset_state()
            if self.rank == 0 or self.world_size > 1:
                self._open_outputs(stack)
            capture.patch_backward(stack, self._on_backward, self._on_backward_done)
            capture.patch_grad_scaler(stack, self._on_scale, self._on_scaler_step, extra=self.scaler)
            if self.optimizer is not None:
                capture.hook_optimizer(stack, self.optimizer, self._on_step_pre, self._on_step_post)
            self._callbacks = self._build_features() + self.callbacks
            for cb in self._callbacks:
                cb.on_enter(self, stack)
            if self.train_loader is not None:
                if capture.wrap_loader(stack, self.train_loader, self._on_pass, self._on_batch):
                    self._samples_since = 0
                else:
                    logger.warning(
                        "ascend_tune: train_loader of type %s cannot be wrapped in place; iterate "
                        "`mon.loader(train_loader)` to mark batches (steps are still counted)",
                        type(self.train_loader).__name__,
                    )
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        for cb in self._callbacks:
            cb.on_step_begin(self, self.start_step)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        stack, self._stack = self._stack, None
        if stack is None:
            return False
        try:
            self._commit_pending()
            if self.clock.pending_steps:
                self._log_window()
            self._drain(force=True)
            for cb in self._callbacks:
                cb.on_exit(self, exc_type)
            # the only collective the monitor makes, once, at exit; skipped when the block raised, since the
            # other ranks may never reach it
            across = self._gather_ranks() if exc_type is None else None
            if self.rank == 0:
                self._write_summary(exc_type, across)
        finally:
            stack.close()
        return False  # never swallow the loop's exception

    # --- explicit use -----------------------------------------------------------------------------------------

    def step(self, loss: Optional[torch.Tensor] = None) -> None:
        """End a step explicitly (``loss``: this step's loss; else what backward saw since the last step).

        From the first call on, optimizer hooks no longer end steps; a step they already ended is adopted.
        """
        self._require_active("step")
        self._explicit = True
        if loss is not None and not isinstance(loss, torch.Tensor):
            loss = torch.tensor(float(loss))
        if loss is not None:
            with capture.internal():
                loss = self._unscaled(loss).detach()
        if self._closed is not None:
            if loss is not None:
                self._closed["loss"] = loss
            self._commit_pending()
            return
        self._commit_pending()
        if loss is not None:
            self._micro, self._micro_n = loss, 1
        self._close(skipped=False)
        self._commit_pending()

    def loader(self, loader: Iterable) -> _MarkedLoader:
        """Iterate ``loader`` with its batches marked (for loaders not passed to the constructor)."""
        self._require_active("loader")
        if self._samples_since is None:
            self._samples_since = 0
        return _MarkedLoader(loader, self._on_pass, self._on_batch)

    # --- events from the capture ----------------------------------------------------------------------------

    def _on_scale(self, scaled: torch.Tensor, loss: torch.Tensor) -> None:
        self._scaled = (scaled, loss)

    def _unscaled(self, tensor: torch.Tensor) -> torch.Tensor:
        if self._scaled is not None and tensor is self._scaled[0]:
            tensor = self._scaled[1]
            self._scaled = None  # drop the graph the scaled tensor holds
        return tensor

    def _on_backward(self, tensor: torch.Tensor) -> None:
        with capture.internal():
            loss = self._unscaled(tensor).detach()
        if self._in_step:
            if self._closure_loss is None:  # LBFGS-style closure: the first evaluation is the step's loss
                self._closure_loss = loss
            return
        self._commit_pending()
        if self._micro is None:
            self._micro = loss
        else:
            with capture.internal():
                self._micro = self._micro + loss
        self._micro_n += 1

    def _on_backward_done(self) -> None:
        # with no optimizer a backward is a step; it ends once its gradients exist, so a dump of the step has them
        if self.optimizer is None and not self._explicit and not self._in_step:
            self._close(skipped=False)

    def _on_step_pre(self) -> None:
        self._commit_pending()
        self._in_step = True
        self._closure_loss = None

    def _on_step_post(self) -> None:
        self._in_step = False
        self._post_count += 1
        if self._micro is None and self._closure_loss is not None:
            self._micro, self._micro_n = self._closure_loss, 1
        self._closure_loss = None
        if not self._explicit:
            self._close(skipped=False)

    def _on_scaler_step(self, optimizer: Any, run: Any) -> Any:
        before = self._post_count
        result = run()
        if optimizer is self.optimizer and self._post_count == before and not self._explicit:
            self._close(skipped=True)  # GradScaler found inf/nan gradients and skipped optimizer.step()
        return result

    def _on_pass(self, epoch: int) -> None:
        self.epoch = epoch

    def _on_batch(self, batch: Any) -> None:
        self._commit_pending()
        if self._samples_since is not None:
            n = _batch_size(batch)
            self._samples_since = None if n is None else self._samples_since + n

    # --- the step clock ----------------------------------------------------------------------------------------

    def _reset_state(self) -> None:
        self.clock = metrics.StepClock(self.start_step)
        self.totals = metrics.RunTotals(self.start_step, self.warmup_steps)
        self._micro: Optional[torch.Tensor] = None
        self._micro_n = 0
        self._in_step = False
        self._closure_loss: Optional[torch.Tensor] = None
        self._post_count = 0
        self._explicit = False
        self._closed: Optional[dict] = None
        self._scaled: Optional[tuple] = None
        self._samples_since: Optional[int] = None
        self._reads: list = []
        self._sinks: list = []
        self._jsonl_sinks: list = []
        self._entered_at = time.time()

    def _close(self, skipped: bool) -> None:
        self._commit_pending()  # a step closed earlier is never overwritten
        loss = self._micro
        if loss is not None and self.accumulate == "mean" and self._micro_n > 1:
            with capture.internal():
                loss = loss / self._micro_n
        samples = self.samples_per_step if self.samples_per_step is not None else self._samples_since
        self._closed = {"loss": loss, "samples": samples, "skipped": skipped,
                        "at": time.perf_counter(), "wall": time.time()}
        self._micro, self._micro_n = None, 0
        if self._samples_since is not None:
            self._samples_since = 0
        step = self.clock.next_step
        for cb in self._callbacks:
            cb.on_step_end(self, step)
        for cb in self._callbacks:
            cb.on_step_begin(self, step + 1)

    def _commit_pending(self) -> None:
        closed, self._closed = self._closed, None
        if closed is None:
            return
        self._drain(force=True)  # a read started at the previous log step is due now
        entry = self.clock.commit(**closed)
        if (entry.step + 1) % self.log_every == 0:
            self._log_window()

    def _log_window(self) -> None:
        entries, seconds, samples = self.clock.close_window()
        with capture.internal():
            read = metrics.read_back(entries, lag=True)
        self._reads.append((read, seconds, samples, self.epoch))
        self._drain(force=False)

    def _drain(self, force: bool) -> None:
        while self._reads and self._reads[0][0].ready(force):
            read, seconds, samples, epoch = self._reads.pop(0)
            with capture.internal():
                values = read.values()
            window = metrics.make_window(read.entries, seconds, samples, values)
            self.totals.add(window)
            if self._sinks:
                record = metrics.window_record(
                    window,
                    epoch=epoch,
                    rank=self.rank,
                    world_size=self.world_size,
                    warmup=window.first_step < self.start_step + self.warmup_steps,
                    memory_mib=device.peak_memory_mib(self.device.kind) if self.device else None,
                )
                for sink in self._sinks:
                    sink.write(window, record)

    # --- outputs ---------------------------------------------------------------------------------------------------

    def _open_outputs(self, stack: contextlib.ExitStack) -> None:
        """Rank 0: log.txt, metrics.jsonl (and summary.json at exit); with several ranks, every rank also keeps
        ``rank{R}/metrics.jsonl``."""
        resume = self.start_step > 0
        paths = []
        try:
            os.makedirs(self.log_dir, exist_ok=True)
            if self.rank == 0:
                _set_aside(self.log_dir, ("summary.json",) if resume else OUTPUT_FILES)
                text = metrics.TextLogSink(os.path.join(self.log_dir, "log.txt"), append=resume, echo=not self.quiet)
                stack.callback(text.close)
                self._sinks.append(text)
                paths.append(os.path.join(self.log_dir, "metrics.jsonl"))
            if self.world_size > 1:
                rank_dir = os.path.join(self.log_dir, f"rank{self.rank}")
                os.makedirs(rank_dir, exist_ok=True)
                if not resume:
                    _set_aside(rank_dir, ("metrics.jsonl",))
                paths.append(os.path.join(rank_dir, "metrics.jsonl"))
            for path in paths:
                jsonl = metrics.JsonlSink(path, append=resume)
                stack.callback(jsonl.close)
                self._sinks.append(jsonl)
                self._jsonl_sinks.append(jsonl)
        except OSError as exc:
            raise OutputError(
                f"cannot write to log_dir {self.log_dir!r} ({exc.strerror or exc}); pass a writable folder"
            ) from None
        if self.rank == 0 and not self.quiet:
            _echo_to_console(stack)

    def _gather_ranks(self) -> Optional[dict]:
        dist = torch.distributed
        if self.world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
            return None
        mine = self.totals.summary()
        rate = mine["steps_per_sec"] or {}
        entry = {"rank": self.rank, "steps": mine["steps"], "median_steps_per_sec": rate.get("median"),
                 "overall_steps_per_sec": rate.get("overall")}
        gathered: list = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, entry)
        return metrics.across_ranks(gathered)

    def _write_summary(self, exc_type: Any, across: Optional[dict]) -> None:
        payload = self.totals.summary()
        payload.update(
            log_every=self.log_every,
            accumulate=self.accumulate,
            rank=self.rank,
            world_size=self.world_size,
            device=self.device.as_dict() if self.device else None,
            wall_seconds=time.time() - self._entered_at,
            interrupted_by=exc_type.__name__ if exc_type is not None else None,
            ranks=across,
        )
        for cb in self._callbacks:
            extra = cb.summary()
            if extra is not None:
                payload[cb.name] = extra
        metrics.write_json_atomic(os.path.join(self.log_dir, "summary.json"), payload)

    def _build_features(self) -> list:
        """The callbacks of the feature options, each built by its own module (imported only when used)."""
        built = []
        for option, value in self.features.items():
            if value is not None and option not in _FEATURES:
                raise ConfigError(f"option {option!r} is not available in this version of ascend_tune")
        for option, (module_name, factory) in _FEATURES.items():
            module = importlib.import_module(module_name)
            cb = getattr(module, factory)(self.features[option], self)
            if cb is not None:
                built.append(cb)
        return built

    def record_event(self, kind: str, **fields: Any) -> None:
        """Add an event line (``{"event": kind, ...}``) to metrics.jsonl, e.g. which steps were traced and where."""
        record = {"event": kind, "time": time.time(), "rank": self.rank, **fields}
        for sink in self._jsonl_sinks:
            sink.write_record(record)

    def warn(self, message: str) -> None:
        """Warn through the ``ascend_tune`` logger and record the warning in metrics.jsonl."""
        logger.warning("ascend_tune: %s", message)
        self.record_event("warning", message=message)

    def _require_active(self, what: str) -> None:
        if self._stack is None:
            raise ConfigError(
                f"mon.{what}() needs an active monitor: call it inside `with TrainingMonitor(...) as mon:`"
            )


class _MarkedLoader:
    """What ``mon.loader(dl)`` returns: iterates ``dl`` with each batch marked as a step boundary."""

    def __init__(self, loader: Iterable, on_pass: Any, on_batch: Any):
        self._loader = loader
        self._on_pass = on_pass
        self._on_batch = on_batch
        self._epochs = capture.EpochTracker()

    def __iter__(self) -> Iterator:
        self._on_pass(self._epochs.begin_pass(self._loader))
        return capture.iterate_marked(iter(self._loader), self._on_batch)

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]


# --- checks and small facts ---------------------------------------------------------------------------------------

_OPTIONS = (
    "model", "optimizer", "train_loader", "log_dir", "log_every", "warmup_steps", "start_step",
    "samples_per_step", "scaler", "accumulate", "rank", "quiet", "profile", "precision", "seed", "tune", "shapes",
    "callbacks",
)

# feature option -> (module, factory); factory(value, monitor) returns a Callback or None (the feature is off).
# Each factory reads its own environment switch (ASCEND_TUNE_PROFILE, ...) when the option is not given.
_FEATURES: dict = {
    "profile": ("ascend_tune.profiling", "build_callback"),
    "precision": ("ascend_tune.precision.callback", "build_callback"),
    "seed": ("ascend_tune.precision.seed", "build_callback"),
    "tune": ("ascend_tune.tuning", "build_callback"),
    "shapes": ("ascend_tune.tuning.shapes", "build_shapes_callback"),
}


def _check_options(unknown: dict) -> None:
    check_option_names(unknown, _OPTIONS, "TrainingMonitor")


def _check_model(model: Any) -> None:
    models = model if isinstance(model, (list, tuple)) else [model]
    for m in models:
        if m is not None and not isinstance(m, torch.nn.Module):
            raise ConfigError(
                f"model must be a torch.nn.Module (or a list of them), got {type(m).__name__}; "
                "pass the module you train"
            )


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _env_rank() -> int:
    if "RANK" in os.environ:
        try:
            return int(os.environ["RANK"])
        except ValueError:
            raise ConfigError(
                f"RANK={os.environ['RANK']!r} is not an integer; fix the launcher's environment"
            ) from None
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return 0


def _world_size() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def _batch_size(batch: Any) -> Optional[int]:
    """Samples in a batch: the first dimension of the batch tensor, or of the first tensor it holds."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            if isinstance(item, torch.Tensor) and item.dim() > 0:
                return int(item.shape[0])
    return None


def _set_aside(folder: str, names: tuple) -> Optional[str]:
    """Move earlier outputs into ``previous-<timestamp>/`` beside them, so a new run never overwrites them."""
    present = [n for n in names if os.path.exists(os.path.join(folder, n))]
    if not present:
        return None
    base = os.path.join(folder, "previous-" + time.strftime("%Y%m%d-%H%M%S"))
    target, n = base, 1
    while os.path.exists(target):
        target, n = f"{base}-{n}", n + 1
    os.makedirs(target)
    for name in present:
        shutil.move(os.path.join(folder, name), os.path.join(target, name))
    logger.info("ascend_tune: earlier %s moved to %s", ", ".join(present), target)
    return target


def _echo_to_console(stack: contextlib.ExitStack) -> None:
    """Show log lines on the console as the seed did, unless the application configured logging itself."""
    if logger.hasHandlers():
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", metrics.TIME_FORMAT))
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    stack.callback(logger.setLevel, old_level)
    stack.callback(logger.removeHandler, handler)
