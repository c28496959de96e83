"""StepProfiler: a profiler over training steps, started at the run's first step and stepped once per step.

How steps line up with the log:
- the profiler steps once per training step and its step counter starts at the run's first step (``start_step``),
  so ``ProfilerStep#N`` in a trace is step N of ``log.txt``, also after a resume;
- the schedule counts from the first step this process runs: ``skip_first`` skips the first steps after a resume
  too, when caches and allocators are cold again.

Each finished cycle goes through the backend's ``tensorboard_trace_handler`` into ``out_dir/rank{R}``: one
``*.pt.trace.json(.gz)`` file from torch, one ``*_ascend_pt`` folder from torch_npu; :mod:`.retention` decides
what stays on disk and when tracing stops. A trace that cannot be written (a full disk, a deleted folder; torch
raises for a gzip trace and only leaves a ``*.tmp`` file for a plain one) is removed, not left half-written, and
tracing stops: one warning through the run's outputs. ``step_profiler`` is the hand-written loop's entry point.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Optional, Union

from ..contract.outputs import Outputs
from ..errors import ConfigError
from ..formats.run_dir import PROFILE_DIR, rank_dir_name
from . import backends
from .config import ProfileConfig
from .retention import TraceRetention

logger = logging.getLogger("ascend_tune")
_RECORDING = ("RECORD", "RECORD_AND_SAVE")  # action names shared by torch's and torch_npu's ProfilerAction enums


class NullProfiler:
    """Profiling off: a context whose ``step()`` does nothing."""

    backend = None
    traces: tuple = ()

    def __enter__(self) -> NullProfiler:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def step(self) -> None:
        """Nothing to do."""


class StepProfiler:
    """A profiler over training steps: enter it, call ``step()`` after each step, leave it.

    Parameters:
        config: the ProfileConfig.
        out_dir: the folder holding the ``rank{R}`` folders (``config.out_dir`` wins when set).
        rank: this process's global rank.
        start_step: the number of the first step (``ProfilerStep#start_step``); the schedule starts there.
        device_kind: ``cpu`` | ``cuda`` | ``npu``; None asks the device layer.
        on_event: called ``(kind, fields)`` for each trace written or removed (the monitor's metrics.jsonl).
        warn: called with a warning's text (default: the ``ascend_tune`` logger).
        outputs: the run's outputs (default: its own, warning through ``warn``); a trace that cannot be written
            fails the ``rank{R}`` folder there.
    """

    def __init__(
        self,
        config: ProfileConfig,
        out_dir: Union[str, os.PathLike] = PROFILE_DIR,
        *,
        rank: int = 0,
        start_step: int = 0,
        device_kind: Optional[str] = None,
        on_event: Optional[Callable[[str, dict], None]] = None,
        warn: Optional[Callable[[str], None]] = None,
        outputs: Optional[Outputs] = None,
    ):
        self.config = config
        self.out_dir = config.out_dir or os.fspath(out_dir)
        self.rank = rank
        self.rank_dir = os.path.join(self.out_dir, rank_dir_name(rank))
        self.start_step = start_step
        self.device_kind = device_kind
        self.backend: Optional[str] = None
        self._on_event = on_event
        self._warn = warn or (lambda message: logger.warning("ascend_tune: %s", message))
        self._outputs = outputs or Outputs(self._warn)
        self.retention = TraceRetention(config, self.rank_dir, rank, self._warn, self._event)
        self._prof: Any = None
        self._cycle_steps: list = []

    @property
    def traces(self) -> list:
        """This run's traces kept on disk (:class:`~.retention.TraceRecord`), oldest first."""
        return self.retention.traces

    @property
    def removed(self) -> list:
        """This run's traces that ``keep_last`` deleted."""
        return self.retention.removed

    @property
    def stopped_by_budget(self) -> bool:
        """Whether ``max_trace_mb`` stopped tracing before the schedule's end."""
        return self.retention.stopped_by_budget

    def __enter__(self) -> StepProfiler:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.stop()
        return False

    def start(self) -> None:
        """Build the backend's profiler and start it at ``start_step``."""
        if self._prof is not None:
            return
        self.retention.open()
        kind = self.device_kind
        if kind is None:
            from ..device import detect_device

            kind = detect_device().kind
        prof, self.backend = backends.build(self, kind)
        # The profiler numbers ProfilerStep#N from step_num; the schedule itself is shifted to match (wrap_schedule).
        prof.step_num = self.start_step
        prof.start()
        self._prof = prof
        self._event(
            "profile_start",
            backend=self.backend,
            out_dir=self.rank_dir,
            schedule={k: getattr(self.config, k) for k in ("wait", "warmup", "active", "repeat", "skip_first")},
            planned=[list(r) for r in self.config.traced_steps(self.start_step)],
        )

    @property
    def running(self) -> bool:
        """True from ``start()`` until ``stop()``, or until the schedule has nothing left to record."""
        return self._prof is not None

    def step(self) -> None:
        """The step ``ProfilerStep#N`` stands for has ended; the next one begins."""
        prof = self._prof
        if prof is None:
            return
        if prof.current_action.name in _RECORDING:
            self._cycle_steps.append(prof.step_num)
        prof.step()
        if self.retention.halted or (self.config.repeat and self.retention.written >= self.config.repeat):
            self.stop()  # the remaining steps cost nothing, not even a ProfilerStep range

    def stop(self) -> None:
        """Stop the profiler; a cycle still recording is saved as an incomplete trace."""
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.stop()

    def summary(self) -> dict:
        """What summary.json reports: the backend, the folder and the traces kept."""
        return {
            "backend": self.backend,
            "out_dir": self.rank_dir,
            "traces": [t.as_dict() for t in self.traces],
            "removed": len(self.removed),
            "stopped_by_budget": self.stopped_by_budget,
        }

    # --- handed to the backend profiler (backends.py) -------------------------------------------------------------

    def wrap_schedule(self, inner: Callable[[int], Any], none: Any) -> Callable[[int], Any]:
        """The backend's schedule, counted from ``start_step`` and switched off once tracing halts.

        A plain function, not an object: torch_npu writes the schedule's ``__dict__`` into its profiler_info.json.
        """
        offset = self.start_step
        retention = self.retention

        def schedule(step_num: int) -> Any:
            if retention.halted:
                return none
            # The profiler asks for step 0 once before step_num is set to start_step: answer for start_step.
            return inner(max(step_num - offset, 0))

        return schedule

    def wrap_trace_handler(self, backend_handler: Callable[[Any], None]) -> Callable[[Any], None]:
        """The backend's trace handler, then the bookkeeping of what it wrote; a failure halts tracing."""

        def on_trace_ready(prof: Any) -> None:
            steps, self._cycle_steps = self._cycle_steps, []
            if self.retention.halted and self.retention.stopped_by_budget:
                return  # a cycle begun before the budget check (wait=0, warmup=0): keep the disk promise
            with self._outputs:  # a SIGTERM waits until the trace is whole
                try:
                    backend_handler(prof)
                    failure = self.retention.unfinished()
                except Exception as exc:  # a trace that cannot be written must not end the training run
                    failure = exc
                if failure is None:
                    self.retention.collect(steps)
                    return
                self.retention.halted = True
                self.retention.discard_new()  # no half-written trace stays
                if isinstance(failure, OSError):
                    self._outputs.fail(self.rank_dir, failure, what="profiler tracing")
                else:
                    self._warn(f"profiler trace could not be written to {self.rank_dir} ({failure}); tracing stops")

        return on_trace_ready

    def _event(self, kind: str, **fields: Any) -> None:
        if self._on_event is not None:
            self._on_event(kind, fields)


def step_profiler(
    value: Any,
    out_dir: Union[str, os.PathLike] = PROFILE_DIR,
    *,
    rank: Optional[int] = None,
    start_step: int = 0,
) -> Union[StepProfiler, NullProfiler]:
    """A profiler context for a hand-written loop: call ``prof.step()`` after each training step.

    Parameters:
        value: anything ``ProfileConfig.from_any`` takes; None / False give a NullProfiler.
        out_dir: the folder holding ``rank{R}`` (``out_dir`` in the config wins).
        rank: this process's global rank; else ``RANK`` (0 when unset).
        start_step: the first step's number, to continue a resumed run.
    """
    config = ProfileConfig.from_any(value)
    if config is None:
        return NullProfiler()
    if rank is None:
        try:
            rank = int(os.environ.get("RANK", "0"))
        except ValueError:
            raise ConfigError(f"RANK={os.environ['RANK']!r} is not an integer; pass rank=") from None
    return StepProfiler(config, out_dir, rank=rank, start_step=start_step)
