"""The step clock and its maths, apart from where the numbers are written (:mod:`.sinks`).

Steps/sec of a log line = steps since the previous line / wall seconds since the previous line; samples/sec the
same with the samples the loader handed out. Step losses stay on the device as 0-dim tensors until a log step,
where they are read back in one transfer; on an accelerator that read is a non-blocking copy into pinned memory
that is picked up at the next step, so even a log step does not wait for the device.

The summary's statistics (median / mean / p10 / p90 steps/sec) are over log windows that contain no warm-up step:
``first_step >= start_step + warmup_steps``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch

from . import device
from .analysis.logs.rates import RateStats, WarmUp
from .formats.trace_names import read_back_name


@dataclass
class StepEntry:
    """One optimizer step as the clock saw it; ``loss`` stays a device tensor until read back."""

    step: int
    loss: Optional[torch.Tensor]
    samples: Optional[int]
    skipped: bool
    at: float  # time.perf_counter() when the step ended
    wall: float  # time.time() when the step ended


@dataclass(frozen=True)
class Window:
    """The steps between two log lines, with their read-back losses."""

    first_step: int
    last_step: int
    seconds: float
    samples: Optional[int]
    losses: tuple  # float or None per step, in step order
    skipped: int
    end_time: float  # time.time() at the last step

    @property
    def steps(self) -> int:
        return len(self.losses)

    @property
    def steps_per_sec(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else math.inf

    @property
    def samples_per_sec(self) -> Optional[float]:
        if self.samples is None or self.seconds <= 0:
            return None
        return self.samples / self.seconds

    @property
    def loss(self) -> float:
        """Mean step loss of the window (NaN when a step's loss is NaN, or when no step had a loss)."""
        known = [v for v in self.losses if v is not None]
        return sum(known) / len(known) if known else math.nan

    @property
    def nonfinite(self) -> int:
        return sum(1 for v in self.losses if v is not None and not math.isfinite(v))


class _PendingRead:
    """Losses of one window on their way to the host; ``ready()`` never blocks unless forced.

    Its waits run inside a profiler annotation (:mod:`~ascend_tune.formats.trace_names`), so a trace shows them
    as the monitor's own read-back, one per log line, and the advisor does not report them as host syncs to fix.
    """

    def __init__(self, entries: list, tensors: list, host: Optional[torch.Tensor], event: Any):
        self.entries = entries
        self._tensors = tensors
        self._host = host
        self._event = event

    def ready(self, force: bool) -> bool:
        if self._event is None:
            return True
        if force or self._event.query():
            with torch.profiler.record_function(read_back_name(len(self.entries))):
                self._event.synchronize()
            return True
        return False

    def values(self) -> list:
        with torch.profiler.record_function(read_back_name(len(self.entries))):
            return self._values()

    def _values(self) -> list:
        if self._host is not None:
            flat = self._host.numpy().tolist()
        elif len(self._tensors) == 1:  # log_every=1: one scalar, no stacking
            flat = [self._tensors[0].tolist()]
        elif self._tensors:
            flat = torch.stack(self._tensors).float().tolist()
        else:
            flat = []
        it = iter(flat)
        return [None if e.loss is None else float(next(it)) for e in self.entries]


def read_back(entries: list, lag: bool) -> _PendingRead:
    """Start reading the step losses of ``entries``: one stacked transfer, non-blocking on an accelerator."""
    tensors = [e.loss for e in entries if e.loss is not None]
    if not tensors:
        return _PendingRead(entries, [], None, None)
    dev = tensors[0].device
    if not lag or dev.type == "cpu":
        if len(tensors) > 1:
            tensors = [t.to(dev).reshape(()) for t in tensors]
        return _PendingRead(entries, tensors, None, None)
    tensors = [t.to(dev).reshape(()) for t in tensors]
    stacked = torch.stack(tensors).float()
    host = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
    host.copy_(stacked, non_blocking=True)
    event = device.new_event(dev.type)
    if event is None:  # no event API for this device: fall back to a plain read at the next step
        return _PendingRead(entries, [stacked], None, None)
    event.record()
    return _PendingRead(entries, [], host, event)


class StepClock:
    """Host-side timing of log windows. No device calls: it only counts steps, samples and wall seconds."""

    def __init__(self, start_step: int = 0):
        self.next_step = start_step
        self.started = time.perf_counter()
        self._window_start = self.started
        self._entries: list = []
        self._samples: Optional[int] = 0

    def commit(self, closed: Any) -> StepEntry:
        """Count one closed step (a :class:`~ascend_tune.steps.ClosedStep`); steps come in order."""
        entry = StepEntry(closed.step, closed.loss, closed.samples, closed.skipped, closed.at, closed.wall)
        self.next_step = closed.step + 1
        self._entries.append(entry)
        if closed.samples is None or self._samples is None:
            self._samples = None
        else:
            self._samples += closed.samples
        return entry

    @property
    def pending_steps(self) -> int:
        return len(self._entries)

    def close_window(self) -> tuple:
        """End the current window at its last step: (entries, seconds, samples) for a log line."""
        end = self._entries[-1].at
        out = (self._entries, end - self._window_start, self._samples)
        self._entries, self._window_start, self._samples = [], end, 0
        return out


@dataclass
class RunTotals:
    """What summary.json reports, grown one window at a time."""

    start_step: int
    warmup_steps: int
    windows: list = field(default_factory=list)

    @property
    def warmup(self) -> WarmUp:
        """The run's warm-up, in optimizer steps (the rule of analysis.logs.rates)."""
        return WarmUp(self.start_step, self.warmup_steps)

    def add(self, window: Window) -> None:
        self.windows.append(window)

    def summary(self) -> dict:
        """The summary's numbers; rates only from windows past warm-up."""
        keep = self.warmup.steady([w.first_step for w in self.windows])
        steady = [w for w, steady_window in zip(self.windows, keep) if steady_window]
        losses = [v for w in self.windows for v in w.losses]
        out: dict = {
            "steps": sum(w.steps for w in self.windows),
            "first_step": self.windows[0].first_step if self.windows else None,
            "last_step": self.windows[-1].last_step if self.windows else None,
            "start_step": self.start_step,
            "warmup_steps": self.warmup_steps,
            "steady_steps": sum(w.steps for w in steady),
            "nonfinite_steps": sum(w.nonfinite for w in self.windows),
            "skipped_steps": sum(w.skipped for w in self.windows),
            "steps_without_loss": sum(1 for v in losses if v is None),
            "final_loss": next((v for v in reversed(losses) if v is not None), None),
            "steps_per_sec": _rate_stats([w.steps_per_sec for w in steady], steady, "steps"),
            "samples_per_sec": None,
        }
        if steady and all(w.samples is not None for w in steady):
            out["samples_per_sec"] = _rate_stats([w.samples_per_sec for w in steady], steady, "samples")
        if not steady and self.windows:
            out["note"] = (
                f"all {out['steps']} steps fell in the warm-up ({self.warmup_steps} steps); "
                "run longer or lower warmup_steps for throughput statistics"
            )
        return out


def _rate_stats(rates: list, windows: list, unit: str) -> Optional[dict]:
    """summary.json's statistics of one rate: analysis.logs.rates, the definition `ascend-tune perf` uses too."""
    amounts = [w.steps if unit == "steps" else (w.samples or 0) for w in windows]
    stats = RateStats.of(rates, amounts, [w.seconds for w in windows])
    return None if stats is None else stats.as_dict()


def across_ranks(per_rank: list) -> dict:
    """Min / median / max of the ranks' median steps/sec, and which rank is slowest (a straggler hint)."""
    known = [r for r in per_rank if r.get("median_steps_per_sec") is not None]
    rates = np.array([r["median_steps_per_sec"] for r in known], dtype=float)
    out: dict = {"per_rank": per_rank, "steps_per_sec": None, "slowest_rank": None}
    if rates.size:
        out["steps_per_sec"] = {"min": float(rates.min()), "median": float(np.median(rates)), "max": float(rates.max())}
        out["slowest_rank"] = known[int(rates.argmin())]["rank"]
    return out


def make_window(entries: list, seconds: float, samples: Optional[int], losses: list) -> Window:
    """The Window of ``entries`` once their losses are on the host."""
    return Window(
        first_step=entries[0].step,
        last_step=entries[-1].step,
        seconds=seconds,
        samples=samples,
        losses=tuple(losses),
        skipped=sum(1 for e in entries if e.skipped),
        end_time=entries[-1].wall,
    )
