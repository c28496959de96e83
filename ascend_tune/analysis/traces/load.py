"""How a trace file reads: JSON, gzipped or not, into its events with every ``ts`` / ``dur`` a number.

torch.profiler writes an object, ``{"traceEvents": [...], ...}``, with numeric ``ts``; torch_npu writes a bare list
of events whose ``ts`` is often a *string* of microseconds (its ``convert_ns2us_str``; Ascend/pytorch#133). Both
become a :class:`TraceFile` whose events have numeric ``ts`` and ``dur``, so no reader downstream sees the strings.
Every failure is one ``InputError`` whose message starts with the path and says what to do.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from typing import NamedTuple, Union

from ...errors import InputError

_GZIP_MAGIC = b"\x1f\x8b"  # the name may not say


class TraceFile(NamedTuple):
    """One trace file as read.

    path: the file; kind: ``torch`` (a ``traceEvents`` object) or ``torch_npu`` (a bare event list);
    events: the event objects, ``ts`` / ``dur`` numbers (an event whose ``ts`` was a string is a converted copy);
    header: the object's other keys (``distributedInfo``, ``deviceProperties``...), empty for a bare list;
    string_ts: how many events had their ``ts`` written as a string.
    """

    path: str
    kind: str
    events: tuple
    header: dict
    string_ts: int


def load_trace_file(path: Union[str, os.PathLike]) -> TraceFile:
    """Read one trace file (``.json`` or ``.json.gz``); raises ``InputError`` when it does not load."""
    path = os.fspath(path)
    data = _parse(path, _read_text(path))
    if isinstance(data, list):
        kind, records, header = "torch_npu", data, {}
    elif isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        kind, records = "torch", data["traceEvents"]
        header = {key: value for key, value in data.items() if key != "traceEvents"}
    else:
        raise InputError(
            f"{path}: not a Chrome trace (expected a list of events or an object with traceEvents); give a "
            "torch.profiler *.pt.trace.json or a torch_npu trace_view.json"
        )
    events, string_ts = _numeric(path, records)
    return TraceFile(path=path, kind=kind, events=events, header=header, string_ts=string_ts)


def _read_text(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        if raw[:2] == _GZIP_MAGIC:
            raw = gzip.decompress(raw)
        return raw.decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; pass a trace file or a profile folder") from None
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise InputError(
            f"{path}: not a readable trace ({type(exc).__name__}: {_first_line(exc)}); give an uncorrupted trace file"
        ) from None


def _parse(path: str, text: str):
    if not text.strip():
        raise InputError(f"{path}: not a readable trace, the file is empty: the profiler did not finish writing it; "
                         "profile again")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path}: not a readable trace (JSONDecodeError: {exc.msg} at line {exc.lineno}): it is probably "
            "truncated; let the profiler finish (leave its `with` block) and use the new file"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{path}: not a readable trace ({type(exc).__name__}: {_first_line(exc)})") from None


def _numeric(path: str, records: list) -> tuple:
    """The events with string ``ts`` / ``dur`` turned into floats, and how many ``ts`` were strings."""
    events = []
    string_ts = 0
    for event in records:
        if not isinstance(event, dict):
            raise InputError(f"{path}: not a Chrome trace (an event is a {type(event).__name__}, not an object)")
        ts, dur = event.get("ts"), event.get("dur")
        if isinstance(ts, str) or isinstance(dur, str):
            string_ts += isinstance(ts, str)
            event = dict(event)
            for key in ("ts", "dur"):
                if isinstance(event.get(key), str):
                    try:
                        event[key] = float(event[key])
                    except ValueError as exc:
                        raise InputError(
                            f"{path}: an event's {key} is not a number ({_first_line(exc)}); re-run the profiler"
                        ) from None
        events.append(event)
    return tuple(events), string_ts


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
