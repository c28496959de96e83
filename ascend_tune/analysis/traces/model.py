"""A trace cut into steps: torch.profiler Chrome traces and torch_npu ``trace_view.json`` as one model.

Both formats are Chrome trace events (read by ``traces.load``). torch.profiler writes ``{"traceEvents": [...]}``;
torch_npu writes a bare list, framework events with cat ``cpu_op``, CANN calls (``AscendCL@...``) in a process named
``CANN`` and device tasks in ``Ascend Hardware``. Host events (ops, annotations, Python frames, runtime calls) are
nested per thread into one tree, so a rule can walk from an op up to the Python line that called it.
"""

from __future__ import annotations

import bisect
import math
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Union

from ...errors import InputError
from .load import stream_trace_file

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")  # the marker prof.step() records around each step
# An op is a dispatcher call ("aten::add", "npu::npu_rms_norm", "c10d::allreduce_"); "autograd::engine::..." is a
# wrapper around backward ops and "profiler::" marks the profiler's own work.
_OP_NAME = re.compile(r"^(?!autograd::|profiler::)[A-Za-z_]\w*::")
_HOST_CATS = frozenset({"cpu_op", "user_annotation", "operator", "Operator"})
_RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime"})
_DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_RUNTIME_PREFIXES = ("AscendCL@", "Node@", "HostToDevice", "aclnn")
# Rounding slack when deciding that one event encloses another: kineto writes ns as 3 decimals of µs; torch_npu's
# absolute µs timestamps (~1.7e15) keep only a quarter µs once read as floats, so the slack grows with them.
_MIN_EPS_US = 0.002

# The args a reader uses (stacks, shapes, device tasks, CANN ids, the forward op a backward op belongs to); the
# rest of each event's args is dropped while the file streams in.
KEPT_ARGS = ("Call stack", "Input Dims", "Task Type", "id", "Sequence number")
_NO_ARGS: dict = {}

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
        return self.role == "host" and bool(_OP_NAME.match(self.name))


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


def read_trace(path: Union[str, os.PathLike]) -> Trace:
    """Parse one trace file (``.json`` or ``.json.gz``) into a :class:`Trace`; bad input raises ``InputError``.

    The file is streamed (``load.stream_trace_file``) and each event keeps only the args of :data:`KEPT_ARGS`, so
    memory follows the number of events, not the size of the text.
    """
    stream = stream_trace_file(path)
    path = stream.path
    process_names: dict = {}
    raw = []
    for record in stream:
        phase = record.get("ph")
        if phase == "M":
            if record.get("name") == "process_name":
                process_names[record.get("pid")] = str((record.get("args") or {}).get("name", ""))
            continue
        if phase != "X":
            continue
        try:
            ts, dur = float(record["ts"]), float(record.get("dur", 0.0) or 0.0)
        except (KeyError, TypeError, ValueError):
            continue
        args = record.get("args")
        kept = _NO_ARGS
        if isinstance(args, dict):
            kept = {key: args[key] for key in KEPT_ARGS if key in args} or _NO_ARGS
            if "Input Dims" in kept:  # nested lists cost ~10x their text; readers compare them as text
                kept["Input Dims"] = sys.intern(str(kept["Input Dims"]))
        raw.append((sys.intern(str(record.get("name", ""))), sys.intern(str(record.get("cat") or "")), ts,
                    max(dur, 0.0), record.get("pid"), record.get("tid"), kept))
    header = stream.header
    kind = "torch_npu" if stream.kind == "torch_npu" else "torch.profiler"
    events = []
    for name, cat, ts, dur, pid, tid, args in raw:
        role = _role(name, cat, args, process_names.get(pid, ""))
        if role:
            events.append(Event(name, cat, role, ts, dur, pid, tid, args))
    del raw
    if not events:
        raise InputError(
            f"{path} has no complete ('ph': 'X') events: it is not a profiler trace, or the profiler stopped "
            "before the first step; profile at least one full step"
        )
    if stream.string_ts or any(name in ("CANN", "Ascend Hardware") for name in process_names.values()):
        kind = "torch_npu"

    events.sort(key=lambda e: (e.ts, -e.dur))
    eps_us = max(_MIN_EPS_US, 4 * math.ulp(max(abs(events[0].ts), abs(events[-1].end))))
    parents = _nest(events, eps_us)
    steps = _steps(events)
    if kind == "torch_npu":
        device = "npu"
    elif header.get("deviceProperties") or any(e.role == "device" for e in events):
        device = "gpu"
    else:
        device = "cpu"
    return Trace(
        path=path,
        kind=kind,
        device=device,
        events=tuple(events),
        parents=tuple(parents),
        steps=steps,
        has_stack=bool(header.get("with_stack")) or any(e.role == "python" or "Call stack" in e.args for e in events),
        has_shapes=bool(header.get("record_shapes")) or any("Input Dims" in e.args for e in events if e.role == "host"),
        has_device_timeline=any(e.role == "device" for e in events),
        starts=tuple(e.ts for e in events),
        eps_us=eps_us,
    )


def _role(name: str, cat: str, args: dict, process: str) -> Optional[Role]:
    if cat == "python_function":
        return "python"
    if cat in _DEVICE_CATS or process == "Ascend Hardware" or "Task Type" in args:
        return "device"
    if cat in _RUNTIME_CATS or process == "CANN" or name.startswith(_RUNTIME_PREFIXES):
        return "runtime"
    if cat in _HOST_CATS or (not cat and process == "Python"):
        return "host"
    return None


def _nest(events: list, eps_us: float) -> list:
    """Innermost enclosing host/python/runtime event on the same thread, by a stack walk over the sorted events."""
    parents = [-1] * len(events)
    stacks: dict = {}
    for index, event in enumerate(events):
        if event.role == "device":
            continue
        stack = stacks.setdefault(event.tid, [])
        while stack and events[stack[-1]].end + eps_us < event.end:
            stack.pop()
        if stack:
            parents[index] = stack[-1]
        stack.append(index)
    return parents


def _steps(events: list) -> tuple:
    steps = {}
    for event in events:
        match = STEP_NAME.match(event.name) if event.role == "host" else None
        if match and int(match.group(1)) not in steps:
            steps[int(match.group(1))] = Step(int(match.group(1)), event.ts, event.dur, event.tid)
    if steps:
        return tuple(steps[number] for number in sorted(steps))
    host = [e for e in events if e.role == "host"] or events
    start, end = min(e.ts for e in host), max(e.end for e in host)
    return (Step(None, start, end - start, host[0].tid),)
