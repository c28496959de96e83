"""A trace cut into steps: torch.profiler Chrome traces and torch_npu ``trace_view.json`` as one model.

Both formats are Chrome trace events (parsed by ``traces.files``, made into this model by ``traces.read``).
torch.profiler writes ``{"traceEvents": [...]}``; torch_npu writes a bare list, framework events with cat
``cpu_op``, CANN calls (``AscendCL@...``) in a process named ``CANN`` and device tasks in ``Ascend Hardware``. Host
events (ops, annotations, Python frames, runtime calls) are nested per thread into one tree, so a rule can walk
from an op up to the Python line that called it.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

# An op is a dispatcher call ("aten::add", "npu::npu_rms_norm", "c10d::allreduce_"); "autograd::engine::..." is a
# wrapper around backward ops and "profiler::" marks the profiler's own work.
_OP_NAME = re.compile(r"^(?!autograd::|profiler::)[A-Za-z_]\w*::")
# Rounding slack when deciding that one event encloses another: kineto writes ns as 3 decimals of µs; torch_npu's
# absolute µs timestamps (~1.7e15) keep only a quarter µs once read as floats, so the slack grows with them.
_MIN_EPS_US = 0.002

Role = str  # "host" | "python" | "runtime" | "device"
# where an event or a step ends (µs): one property both classes share
_END = property(lambda span: span.ts + span.dur, doc="ts + dur: where the span ends (µs).")


class Event(NamedTuple):
    """One complete ("X") trace event, times in microseconds."""

    name: str
    cat: str
    role: Role
    ts: float
    dur: float
    pid: Any
    tid: Any
    args: dict

    end = _END

    @property
    def is_op(self) -> bool:
        return self.role == "host" and is_op_name(self.name)


def is_op_name(name: str) -> bool:
    """A dispatcher op's name (``aten::add``), not a wrapper's (``autograd::...``) or the profiler's own."""
    return bool(_OP_NAME.match(name))


@dataclass(frozen=True)
class Step:
    """One ``ProfilerStep#N`` window (``number`` is None when the trace has no step markers)."""

    number: Optional[int]
    ts: float
    dur: float
    tid: Any

    end = _END


@dataclass(frozen=True)
class Trace:
    """A parsed trace: events sorted by start, their enclosing event, and the profiled steps."""

    path: str
    kind: str  # "torch.profiler" | "torch_npu"
    device: str  # "cpu" | "gpu" | "npu"
    events: tuple  # of Event, sorted by (ts, -dur)
    parents: tuple  # index of the innermost enclosing host/python/runtime event on the same thread, or -1
    steps: tuple  # of Step
    has_stack: bool
    has_shapes: bool
    has_device_timeline: bool  # CUDA kernels / Ascend Hardware tasks were traced
    starts: tuple = field(default=(), repr=False, compare=False)  # events' ts, for bisecting a step window
    eps_us: float = _MIN_EPS_US  # how far apart two timestamps may be and still be the same instant

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def in_step(self, step: Step) -> range:
        """Indices of the events that start inside ``step`` (any thread, any role)."""
        return range(bisect.bisect_left(self.starts, step.ts - self.eps_us), bisect.bisect_left(self.starts, step.end))

    def ancestors(self, index: int):
        """Indices of the events enclosing ``index``, innermost first."""
        parent = self.parents[index]
        while parent >= 0:
            yield parent
            parent = self.parents[parent]

    def host_ancestors(self, index: int):
        """The host events (ops and annotations, not Python frames) enclosing ``index``, innermost first."""
        return (p for p in self.ancestors(index) if self.events[p].role == "host")

    def op_parent(self, index: int) -> int:
        """The innermost op enclosing ``index`` (annotations and Python frames are looked through), or -1."""
        for parent in self.ancestors(index):
            if self.events[parent].is_op:
                return parent
        return -1

    def python_stack(self, index: int) -> tuple:
        """Python frames around ``index``, innermost first: ``python_function`` events or torch_npu's "Call stack"."""
        frames = [self.events[p].name for p in self.ancestors(index) if self.events[p].role == "python"]
        if frames:
            return tuple(frames)
        for candidate in (index, *self.ancestors(index)):
            stack = self.events[candidate].args.get("Call stack")
            if isinstance(stack, str) and stack:
                return tuple(frame.strip() for frame in stack.split(";") if frame.strip())
        return ()
