"""The step clock and its maths, apart from where the numbers are written (:mod:`.sinks`).

Steps/sec of a log line = steps since the previous line / wall seconds since the previous line; samples/sec the
same with the samples the loader handed out. Step losses stay on the device as 0-dim tensors until a log step,
where they are read back in one transfer; on an accelerator that read is a non-blocking copy into pinned memory
that is picked up at the next step, so even a log step does not wait for the device.

The summary's statistics (median / mean / p10 / p90 steps/sec) are over log windows that contain no warm-up step:
``first_step >= start_step + warmup_steps``.
"""

from __future__ import annotations

import functools
import math
import operator
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

import torch

from .. import device
from ..analysis.logs.ranks import across_ranks
from ..analysis.logs.rates import RateStats, WarmUp
from ..formats.trace_names import read_back_name


class Window(NamedTuple):
    """The steps between two log lines, with their read-back losses (made by :func:`make_window`).

    ``loss`` is the mean step loss of the window (NaN when a step's loss is NaN, or when no step had a loss),
    ``nonfinite`` the steps whose loss is NaN or infinite; ``steps_per_sec`` = steps / seconds (inf for no time),
    ``samples_per_sec`` = samples / seconds (None when not counted). A tuple with its figures computed once, not a
    dataclass with properties: one is made and read by every sink per log line.
    """

    first_step: int
    last_step: int
    seconds: float
    samples: Optional[int]
    losses: tuple  # float or None per step, in step order
    skipped: int
    end_time: float  # time.time() at the last step
    loss: float
    nonfinite: int
    steps_per_sec: float
    samples_per_sec: Optional[float]

    @property
    def steps(self) -> int:
        return len(self.losses)


class _PendingRead:
    """Losses of one window on their way to the host; ``ready()`` never blocks unless forced.

    Its waits run inside a profiler annotation (:mod:`~ascend_tune.formats.trace_names`), so a trace shows them
    as the monitor's own read-back, one per log line, and the advisor does not report them as host syncs to fix.
    """

    __slots__ = ("entries", "_tensors", "_host", "event", "extra", "extra_values", "_each")

    def __init__(self, entries: list, tensors: list, host: Optional[torch.Tensor], event: Any, extra: int = 0,
                 each: bool = False):
        self.entries = entries
        self._tensors = tensors
        self._host = host
        self.event = event  # None: on the host already (ready)
        self.extra = extra  # values riding along after the losses (read_back's ``extra``)
        self.extra_values: list = []
        # each: ``tensors`` lie on the host, read one by one where they lie (the losses, then the riders' tensor
        # when ``extra``); else at most one tensor, the window's values flattened
        self._each = each

    def ready(self, force: bool) -> bool:
        if self.event is None:
            return True
        if force or self.event.query():
            with torch.profiler.record_function(read_back_name(len(self.entries))):
                self.event.synchronize()
            return True
        return False

    def values(self) -> list:
        if self._host is None and (not self._tensors or self._tensors[0].is_cpu) and not (
                _PROFILER_ENABLED is None or _PROFILER_ENABLED()):
            return self._values()  # host losses and no torch profiler: the annotation would only cost (~6 us)
        with torch.profiler.record_function(read_back_name(len(self.entries))):
            return self._values()

    def _values(self) -> list:
        if self._each:
            tensors = self._tensors
            if self.extra:
                riders, tensors = tensors[-1], tensors[:-1]
                # one float value (a gradient norm at log_every=1) inline: no frame of ours
                one = not riders.dim() and riders.is_floating_point()
                self.extra_values = [riders.item()] if one else _floats(riders)
            flat = list(map(torch.Tensor.item, tensors))
            if len(flat) == len(self.entries):  # every step has its loss: the values in order, as they are
                return flat
        elif self.extra:
            flat = self._host.tolist() if self._host is not None else self._tensors[0].tolist()
            self.extra_values = flat[len(flat) - self.extra:]
            flat = flat[:len(flat) - self.extra]
        elif self._host is not None:
            flat = self._host.numpy().tolist()
        elif self._tensors:  # the window's losses stacked: one read
            value = self._tensors[0].tolist()
            flat = value if isinstance(value, list) else [value]
        else:
            flat = []
        it = iter(flat)
        return [None if e.loss is None else float(next(it)) for e in self.entries]


def _floats(tensor: torch.Tensor) -> list:
    """A rider's values on the host as floats, flattened (what a read of them promoted with float losses gives)."""
    values = [tensor.item()] if not tensor.dim() else tensor.reshape(-1).tolist()
    return values if tensor.is_floating_point() else list(map(float, values))


# whether torch's profiler is recording (a torch without it: taken as recording)
_PROFILER_ENABLED = getattr(torch._C._autograd, "_profiler_enabled", None)
_LOSS = operator.attrgetter("loss")
_NOT_NONE = functools.partial(operator.is_not, None)
_IS_CPU = operator.attrgetter("is_cpu")
_PLAIN = {torch.Tensor}


def read_back(entries: list, lag: bool, extra: Optional[torch.Tensor] = None) -> _PendingRead:
    """Start reading the step losses of ``entries``: one stacked transfer, non-blocking on an accelerator; on the
    host each is read where it lies (a value's read costs ~0.25 us, a stack ~2 us and ~0.5 us a value, a cat
    more: nothing is gathered there).

    ``extra``: device values the features read with these losses (a feature's per-step gradient norms), flattened
    into the same transfer; they come back as the read's ``extra_values``.
    """
    tensors = list(filter(_NOT_NONE, map(_LOSS, entries)))  # no frame of ours: once a log line
    if extra is not None:
        return _read_with_extra(entries, tensors, extra, lag)
    if not tensors:
        return _PendingRead(entries, [], None, None)
    if _on_host(tensors):
        return _PendingRead(entries, tensors, None, None, each=True)
    stacked = _stacked(tensors)
    if not lag:
        return _PendingRead(entries, [stacked], None, None)
    host = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
    host.copy_(stacked, non_blocking=True)
    event = device.new_event(stacked.device.type)
    if event is None:  # no event API for this device: fall back to a plain read at the next step
        return _PendingRead(entries, [stacked], None, None)
    event.record()
    return _PendingRead(entries, [], host, event)


def _on_host(tensors: list) -> bool:
    """Whether the losses are plain host tensors (read one by one: exact, each in its own dtype, as ``.item()``
    gives it; a tensor subclass, a DTensor's, is read by the stacked path)."""
    return not tensors or {type(t) for t in tensors} == _PLAIN and all(map(_IS_CPU, tensors))  # no generator


def _read_with_extra(entries: list, tensors: list, extra: torch.Tensor, lag: bool) -> _PendingRead:
    dev = extra.device
    if dev.type == "cpu" and type(extra) is torch.Tensor and _on_host(tensors):
        # on the host: each read where it lies, exact in its own dtype (what a float64 gather would keep)
        return _PendingRead(entries, [*tensors, extra], None, None, extra.numel(), each=True)
    dtype = torch.float64 if dev.type == "cpu" else torch.float32  # a float64 loss on the host stays exact
    flat = extra.detach().reshape(-1).to(dtype)
    if tensors:
        flat = torch.cat([torch.stack([t.detach().to(dev).reshape(()) for t in tensors]).to(dtype), flat])
    if not lag or flat.is_cpu:
        return _PendingRead(entries, [flat], None, None, extra.numel())
    host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
    host.copy_(flat, non_blocking=True)
    event = device.new_event(dev.type)
    if event is None:
        return _PendingRead(entries, [flat], None, None, extra.numel())
    event.record()
    return _PendingRead(entries, [], host, event, extra.numel())


def _stacked(tensors: list) -> torch.Tensor:
    """The step losses as one float 1-d tensor on the first one's device, in one ``stack`` when they are alike
    (0-dim on one device, the usual case); else each moved and made 0-dim first."""
    try:
        stacked = torch.stack(tensors)
        if stacked.numel() == len(tensors):
            return stacked.float().reshape(-1)
    except RuntimeError:  # shapes or devices differ
        pass
    dev = tensors[0].device
    return torch.stack([t.to(dev).reshape(()) for t in tensors]).float()


class StepClock:
    """Host-side timing of log windows. No device calls: it only counts steps, samples and wall seconds.

    Its entries are the :class:`~ascend_tune.runtime.steps.ClosedStep` objects themselves (``step``, ``loss`` still on
    the device, ``samples``, ``skipped``, ``at`` = ``time.perf_counter()`` and ``wall`` = ``time.time()`` at its end).
    """

    __slots__ = ("_window_start", "_entries", "commit")  # slots: the step path reads them where they lie

    def __init__(self) -> None:
        self._window_start = time.perf_counter()
        self._entries: list = []
        # commit(closed): count one closed step (a ClosedStep, kept as it is); steps come in order (numbered by the
        # StepTracker, the one step counter). The list's own append: once a step, it runs no Python of ours
        self.commit = self._entries.append

    @property
    def pending_steps(self) -> int:
        return len(self._entries)

    def close_window(self) -> tuple:
        """End the current window at its last step: (entries, seconds, samples) for a log line (samples: None when
        a step's are not known)."""
        entries = self._entries[:]
        self._entries.clear()  # the same list: commit is its append
        end = entries[-1].at
        samples: Optional[int] = 0
        for entry in entries:
            if entry.samples is None:
                samples = None
                break
            samples += entry.samples
        out = (entries, end - self._window_start, samples)
        self._window_start = end
        return out


@dataclass
class RunTotals:
    """What summary.json reports, grown one window at a time (``windows``: each written window, appended)."""

    start_step: int
    warmup_steps: int
    windows: list = field(default_factory=list)
    warmup: WarmUp = field(init=False)  # the run's warm-up, in optimizer steps (the rule of analysis.logs.rates)

    def __post_init__(self) -> None:
        self.warmup = WarmUp(self.start_step, self.warmup_steps)

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


def gather_ranks(totals: RunTotals, rank: int, world_size: int) -> Optional[dict]:
    """:func:`across_ranks` of every rank's figures, gathered in one ``all_gather_object``; None with one rank."""
    dist = torch.distributed
    if world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
        return None
    mine = totals.summary()
    rate = mine["steps_per_sec"] or {}
    entry = {"rank": rank, "steps": mine["steps"], "median_steps_per_sec": rate.get("median"),
             "overall_steps_per_sec": rate.get("overall")}
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, entry)
    return across_ranks(gathered)


def make_window(entries: list, seconds: float, samples: Optional[int], losses: list) -> Window:
    """The Window of ``entries`` once their losses are on the host."""
    timed = seconds > 0
    sps = None if samples is None or not timed else samples / seconds
    if len(entries) == 1:  # log_every=1
        e, value = entries[0], losses[0]
        rate = 1 / seconds if timed else math.inf
        if value is None:
            return Window(e.step, e.step, seconds, samples, (None,), int(e.skipped), e.wall, math.nan, 0, rate, sps)
        return Window(e.step, e.step, seconds, samples, (value,), int(e.skipped), e.wall, value,
                      0 if math.isfinite(value) else 1, rate, sps)
    known = [v for v in losses if v is not None]
    return Window(
        entries[0].step,
        entries[-1].step,
        seconds,
        samples,
        tuple(losses),
        sum(1 for e in entries if e.skipped),
        entries[-1].wall,
        sum(known) / len(known) if known else math.nan,
        sum(1 for v in known if not math.isfinite(v)),
        len(entries) / seconds if timed else math.inf,
        sps,
    )
