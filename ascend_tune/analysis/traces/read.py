"""``read_trace(path)``: one trace file into a :class:`~.model.Trace`: its events given a role and nested, its steps
cut.

An event's role says what it is: a host op or annotation (cat ``cpu_op``, ``user_annotation``), a Python frame, a
runtime call (CUDA runtime, torch_npu's ``AscendCL@`` / CANN process) or a device task (CUDA kernels, torch_npu's
``Ascend Hardware``); events of no role (flows, counters, the profiler's own) are dropped as the file streams in.
"""

from __future__ import annotations

import math
import os
import re
import sys
from typing import Optional, Union

from ...errors import InputError
from .files import stream_trace_file
from .model import _MIN_EPS_US, Event, Role, Step, Trace

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")  # the marker prof.step() records around each step
_HOST_CATS = frozenset({"cpu_op", "user_annotation", "operator", "Operator"})
_RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime"})
_DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_RUNTIME_PREFIXES = ("AscendCL@", "Node@", "HostToDevice", "aclnn")
# The args a reader uses (stacks, shapes, device tasks, CANN ids, the forward op a backward op belongs to); the
# rest of each event's args is dropped while the file streams in.
KEPT_ARGS = ("Call stack", "Input Dims", "Task Type", "id", "Sequence number")
_NO_ARGS: dict = {}


def read_trace(path: Union[str, os.PathLike]) -> Trace:
    """Parse one trace file (``.json`` or ``.json.gz``) into a :class:`Trace`; bad input raises ``InputError``.

    The file is streamed (``files.stream_trace_file``) and each event keeps only the args of :data:`KEPT_ARGS`, so
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
