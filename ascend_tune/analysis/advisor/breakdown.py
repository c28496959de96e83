"""Where a profiled step's time goes: a per-step breakdown and the top ops by self time.

The breakdown sweeps the step window once. Every instant is given to the highest-priority kind of event running
then, on any host thread: a host sync (``.item()``, stream synchronize), the DataLoader, the optimizer, backward
(``autograd::engine::evaluate_function``), any other op (forward and the rest); the remainder is Python and idle
time. So the parts add up to the step's wall time even when the autograd thread runs beside the main thread (CUDA).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Optional

from ..traces.model import Step, Trace
from ..traces.vocabulary import (
    BACKWARD,
    DATA,
    HOST_SYNC,
    OPTIMIZER,
    SYNC_OPS,
    SYNCHRONIZE,
    is_backward,
    is_dataloader,
    is_optimizer,
)

BREAKDOWN = (HOST_SYNC, DATA, OPTIMIZER, BACKWARD, "forward & other ops", "python & idle")
_DEVICE_READ = re.compile(r"Memcpy|" + SYNCHRONIZE.pattern, re.IGNORECASE)


def device_reads(trace: Trace) -> Optional[set]:
    """The host ops that reach the device: those with a runtime copy or synchronize inside them (``aten::item`` of a
    device tensor: ``_local_scalar_dense`` -> ``cudaMemcpyAsync`` / ``aclrtMemcpy``). ``.item()`` of a host tensor
    (an index drawn on the CPU, a step counter) has none and waits for nothing. None when the trace has no runtime
    layer to tell by (a CPU trace, or one recorded without device activities): there every such op counts."""
    if trace.device == "cpu":
        return None
    reads: set = set()
    runtime = False
    for index, event in enumerate(trace.events):
        if event.role == "runtime":
            runtime = True
            if _DEVICE_READ.search(event.name):
                reads.update(trace.host_ancestors(index))
    return reads if runtime else None


def is_sync(trace: Trace, index: int) -> bool:
    """A host op that reads a device value back, or a runtime call that waits for the device."""
    event = trace.events[index]
    if event.role == "host":
        return event.name in SYNC_OPS
    return event.role == "runtime" and bool(SYNCHRONIZE.search(event.name))


@dataclass(frozen=True)
class StepTime:
    """One step's wall time split into ``BREAKDOWN`` parts (ms), and the device's busy time where traced."""

    step: Optional[int]
    total_ms: float
    parts: tuple  # ms per BREAKDOWN entry, same order
    device_busy_ms: Optional[float] = None

    def part(self, name: str) -> float:
        return self.parts[BREAKDOWN.index(name)]


@dataclass(frozen=True)
class OpTime:
    """An op's self time (its duration minus the ops it called), averaged over the profiled steps."""

    name: str
    calls_per_step: float
    self_ms_per_step: float
    share_of_step: float


def step_times(trace: Trace) -> tuple:
    """The breakdown of every profiled step of ``trace``."""
    return tuple(_step_time(trace, step) for step in trace.steps)


def _category(trace: Trace, index: int) -> Optional[int]:
    event = trace.events[index]
    if is_sync(trace, index):
        return 0
    if event.role != "host":
        return None
    if is_dataloader(event.name):
        return 1
    if is_optimizer(event.name):
        return 2
    if is_backward(event.name):
        return 3
    if event.is_op and trace.op_parent(index) < 0:
        return 4
    return None


def _step_time(trace: Trace, step: Step) -> StepTime:
    edges = []
    for index in trace.in_step(step):
        event = trace.events[index]
        category = _category(trace, index)
        if category is not None:
            start, end = max(event.ts, step.ts), min(event.end, step.end)
            if end > start:
                edges.append((start, 1, category))
                edges.append((end, -1, category))
    edges.sort()
    parts = [0.0] * len(BREAKDOWN)
    running = [0] * (len(BREAKDOWN) - 1)
    last = step.ts
    for time, delta, category in edges:
        active = next((c for c, count in enumerate(running) if count > 0), None)
        if active is not None:
            parts[active] += time - last
        running[category] += delta
        last = time
    parts[-1] = max(step.dur - sum(parts[:-1]), 0.0)
    busy = device_busy_us(trace, step)
    return StepTime(
        step=step.number,
        total_ms=step.dur / 1e3,
        parts=tuple(p / 1e3 for p in parts),
        device_busy_ms=None if busy is None else busy / 1e3,
    )


def device_busy_us(trace: Trace, step: Step) -> Optional[float]:
    """How long the device ran something during ``step`` (the union of its tasks), None without a device timeline."""
    if not trace.has_device_timeline:
        return None
    intervals = sorted(
        (max(e.ts, step.ts), min(e.end, step.end))
        for e in (trace.events[i] for i in trace.in_step(step))
        if e.role == "device"
    )
    total, end = 0.0, float("-inf")
    for start, stop in intervals:
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def top_ops(trace: Trace, limit: int = 10) -> tuple:
    """The ``limit`` ops with the most self time inside the profiled steps."""
    child_time: dict = defaultdict(float)
    for index, parent in enumerate(trace.parents):
        if parent >= 0 and trace.events[index].role == "host":
            child_time[parent] += trace.events[index].dur
    calls: dict = defaultdict(int)
    self_us: dict = defaultdict(float)
    for step in trace.steps:
        for index in trace.in_step(step):
            event = trace.events[index]
            if event.is_op:
                calls[event.name] += 1
                self_us[event.name] += max(event.dur - child_time.get(index, 0.0), 0.0)
    steps = len(trace.steps)
    mean_step_us = statistics.fmean(s.dur for s in trace.steps) or 1.0
    ranked = sorted(self_us, key=self_us.get, reverse=True)[:limit]
    return tuple(
        OpTime(
            name=name,
            calls_per_step=calls[name] / steps,
            self_ms_per_step=self_us[name] / steps / 1e3,
            share_of_step=self_us[name] / steps / mean_step_us,
        )
        for name in ranked
    )
