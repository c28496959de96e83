"""``read_trace(path)``: one trace file into a :class:`~.model.Trace`: its events given a role and nested, its steps
cut.

An event's role says what it is: a host op or annotation (cat ``cpu_op``, ``user_annotation``), a Python frame, a
runtime call (CUDA runtime, torch_npu's ``AscendCL@`` / CANN process) or a device task (CUDA kernels, torch_npu's
``Ascend Hardware``); events of no role (flows, counters, the profiler's own) are dropped as the file streams in.
"""

from __future__ import annotations

import contextlib
import functools
import gc
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
# rest of each event's args is dropped while the file streams in, and the events whose kept args are the same
# shapes alone share one dict (most ops repeat the shapes of the step before): a reader reads Event.args, never
# writes it.
KEPT_ARGS = ("Call stack", "Input Dims", "Task Type", "id", "Sequence number")
_KEPT_SET = frozenset(KEPT_ARGS)
_NO_ARGS: dict = {}


def read_trace(path: Union[str, os.PathLike]) -> Trace:
    """Parse one trace file (``.json`` or ``.json.gz``) into a :class:`Trace`; bad input raises ``InputError``.

    The file is streamed (``files.stream_trace_file``) and each event keeps only the args of :data:`KEPT_ARGS`, so
    memory follows the number of events, not the size of the text.
    """
    stream = stream_trace_file(path)
    path = stream.path
    with cyclic_gc_paused():
        events, process_names = _events_of(stream)
    header = stream.header
    kind = "torch_npu" if stream.kind == "torch_npu" else "torch.profiler"
    if not events:
        raise InputError(
            f"{path} has no complete ('ph': 'X') events: it is not a profiler trace, or the profiler stopped "
            "before the first step; profile at least one full step"
        )
    if stream.string_ts or any(name in ("CANN", "Ascend Hardware") for name in process_names.values()):
        kind = "torch_npu"

    events.sort(key=_start_order)
    eps_us = max(_MIN_EPS_US, 4 * math.ulp(max(abs(events[0].ts), abs(events[-1].end))))
    parents = _nest(events, eps_us)
    steps = _steps(events)
    has_device = any(e.role == "device" for e in events)
    if kind == "torch_npu":
        device = "npu"
    elif header.get("deviceProperties") or has_device:
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
        has_device_timeline=has_device,
        starts=tuple(e.ts for e in events),
        eps_us=eps_us,
    )


def _events_of(stream) -> tuple:
    """The stream's complete events that have a role, in file order, and the processes' names by pid.

    An event's role may depend on its process's name, known once the whole file is read; an event whose process
    was named (or renamed) after it was read gets its role again at the end.
    """
    process_names: dict = {}
    events: list = []
    seen_pids: set = set()
    renamed: set = set()  # pids named after some of their events were read
    intern = sys.intern
    ids: dict = {}  # pid / tid -> the one int object events of it point to
    shapes_only: dict = {}  # Input Dims text -> the one args dict of the events whose kept args are that alone
    for batch in stream.batches():
        for record in batch:
            phase = record.get("ph")
            if phase != "X":
                if phase == "M" and record.get("name") == "process_name":
                    pid, process = record.get("pid"), str((record.get("args") or {}).get("name", ""))
                    if pid in seen_pids and process != process_names.get(pid, ""):
                        renamed.add(pid)
                    process_names[pid] = process
                continue
            try:
                ts, dur = float(record["ts"]), float(record.get("dur", 0.0) or 0.0)
            except (KeyError, TypeError, ValueError):
                continue
            args = record.get("args")
            kept = _NO_ARGS
            if isinstance(args, dict) and not _KEPT_SET.isdisjoint(args):
                kept = {key: args[key] for key in KEPT_ARGS if key in args}
                if "Input Dims" in kept:  # nested lists cost ~10x their text; readers compare them as text
                    dims = kept["Input Dims"] = intern(str(kept["Input Dims"]))
                    if len(kept) == 1:
                        kept = shapes_only.setdefault(dims, kept)
            name, cat, pid, tid = record.get("name", ""), record.get("cat") or "", record.get("pid"), record.get("tid")
            name = intern(name if type(name) is str else str(name))
            cat = intern(cat if type(cat) is str else str(cat))
            if type(pid) is int:  # the decoder makes a new int for every event: one per process and thread instead
                pid = ids.setdefault(pid, pid)
            if type(tid) is int:
                tid = ids.setdefault(tid, tid)
            seen_pids.add(pid)
            role = _role(name, cat, "Task Type" in kept, process_names.get(pid, ""))
            events.append(_new_event(Event, (name, cat, role, ts, max(dur, 0.0), pid, tid, kept)))
    if renamed:
        events = [event._replace(role=_role(event.name, event.cat, "Task Type" in event.args,
                                            process_names.get(event.pid, "")))
                  if event.pid in renamed else event for event in events]
    return [event for event in events if event.role], process_names


# Event(...) runs namedtuple's Python-level __new__; tuple.__new__ builds the same Event in C, ~0.3 µs less for each
# of a large trace's hundreds of thousands of events.
_new_event = tuple.__new__


def _start_order(event: Event) -> tuple:
    return event.ts, -event.dur


@functools.lru_cache(maxsize=4096)  # a trace has a few hundred distinct (name, cat, process), read ~1e5 times each
def _role(name: str, cat: str, has_task_type: bool, process: str) -> Optional[Role]:
    if cat == "python_function":
        return "python"
    if cat in _DEVICE_CATS or process == "Ascend Hardware" or has_task_type:
        return "device"
    if cat in _RUNTIME_CATS or process == "CANN" or name.startswith(_RUNTIME_PREFIXES):
        return "runtime"
    if cat in _HOST_CATS or (not cat and process == "Python"):
        return "host"
    return None


@contextlib.contextmanager
def cyclic_gc_paused():
    """No cyclic garbage collection inside the block: a trace's ~1e5 events are containers that stay, so the
    collector would walk the growing heap again and again (half of the reading time) and find nothing, the events
    and their args holding no cycles. Around the work over a read trace too: the first collections after a read
    walk all of its events once more."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _nest(events: list, eps_us: float) -> list:
    """Innermost enclosing host/python/runtime event on the same thread, by a stack walk over the sorted events."""
    parents = [-1] * len(events)
    stacks: dict = {}  # tid -> the open events' (end + eps_us, index), outermost first
    for index, event in enumerate(events):
        if event.role == "device":
            continue
        end = event.ts + event.dur
        stack = stacks.get(event.tid)
        if stack is None:
            stack = stacks[event.tid] = []
        while stack and stack[-1][0] < end:
            stack.pop()
        if stack:
            parents[index] = stack[-1][1]
        stack.append((end + eps_us, index))
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
