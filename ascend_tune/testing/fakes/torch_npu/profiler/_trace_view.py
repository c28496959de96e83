"""Turn a torch CPU trace into the framework part of torch_npu's ``trace_view.json``.

torch_npu writes a JSON *array* of Chrome trace events (no ``traceEvents`` wrapper) whose ``ts`` are strings of
microseconds with three decimals (``"1718000000123.456"``) and whose ``dur`` are numbers; host ops have cat
``cpu_op`` (``ProfilerStep#N`` included), on a process named ``Python``.
"""

from __future__ import annotations

import os
from typing import Any

from ._constant import convert_ns2us_str

# The torch op arguments torch_npu also writes; torch's own bookkeeping keys (External id, Ev Idx, ...) are not.
_KEPT_ARGS = ("Sequence number", "Fwd thread id", "Input Dims", "Input type", "Call stack", "Module Hierarchy")


def framework_events(torch_trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The host op events of a torch Chrome trace, in torch_npu's format (``ts`` absolute, in µs, as a string)."""
    base_ns = int(torch_trace.get("baseTimeNanoseconds", 0))
    events = []
    for event in torch_trace.get("traceEvents", []):
        if event.get("ph") != "X" or event.get("cat") not in ("cpu_op", "user_annotation"):
            continue
        start_ns = base_ns + round(float(event["ts"]) * 1000)
        args = {key: event["args"][key] for key in _KEPT_ARGS if key in event.get("args", {})}
        events.append(
            {
                "ph": "X",
                "name": event["name"],
                "pid": os.getpid(),
                "tid": event["tid"],
                "ts": start_ns,
                "dur": round(float(event["dur"]), 3),
                "cat": "cpu_op",
                "args": args,
            }
        )
    events.sort(key=lambda e: e["ts"])
    for event in events:
        event["ts"] = convert_ns2us_str(event["ts"])
    return events


def metadata_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The process and thread name events torch_npu puts after the host ops."""
    pid = os.getpid()
    meta: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": 0}},
    ]
    for tid in sorted({e["tid"] for e in events}):
        meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"Thread {tid}"}})
        meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    return meta
