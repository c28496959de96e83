"""How a trace file reads: JSON, gzipped or not, into its events with every ``ts`` / ``dur`` a number.

torch.profiler writes an object, ``{"traceEvents": [...], ...}``, with numeric ``ts``; torch_npu writes a bare list
of events whose ``ts`` is often a *string* of microseconds (its ``convert_ns2us_str``; Ascend/pytorch#133). Both
become a :class:`TraceFile` whose events have numeric ``ts`` and ``dur``, so no reader downstream sees the strings.
Every failure is one ``InputError`` whose message starts with the path and says what to do.

:func:`stream_trace_file` reads the same files a run of events at a time (a 1 MB window of text decoded with the C
JSON scanner), so a 1 GB trace never sits in memory as text plus a full tree of dicts: ``read_trace`` keeps only
what it needs of each event.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Iterator
from typing import Any, Callable, NamedTuple, Union

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


_CHUNK = 1 << 20  # characters read at a time: the decoded events of one window are the reader's transient memory
_DECODER = json.JSONDecoder()
_SPACE = " \t\r\n"
# Where one event may end and the next begin. A cut there is only a guess (the same text can sit inside an event's
# args); json.loads of "[" + text up to the cut + "]" succeeds only when every event before it is whole, so a wrong
# guess fails and that event is read on its own.
_BOUNDARY = re.compile(r"\}\s*,\s*(?=\{)")
_TAIL = 1 << 16  # how far back from the window's end a boundary is looked for


class TraceStream:
    """One trace file read event by event: iterate it once for the event dicts (``ts`` / ``dur`` numbers).

    kind: ``torch`` or ``torch_npu`` (known once iteration starts); header: the object's other keys (complete
    once iteration ends); string_ts: how many events had a string ``ts``. Failures are the ``InputError`` of
    :func:`load_trace_file`.
    """

    def __init__(self, path: Union[str, os.PathLike]):
        self.path = os.fspath(path)
        self.kind = ""
        self.header: dict = {}
        self.string_ts = 0
        self._fh = None
        self._loads = fast_json_loads()
        self._buf = ""
        self._pos = 0
        self._eof = False

    def __iter__(self) -> Iterator[dict]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list]:
        """The events in the runs they were decoded in (lists of event dicts, ``ts`` / ``dur`` numbers): a reader
        that loops over these pays no generator step per event."""
        try:
            self._fh = _open_text(self.path)
            yield from self._events()
        except FileNotFoundError:
            raise InputError(f"{self.path}: no such file; pass a trace file or a profile folder") from None
        except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
            raise InputError(f"{self.path}: not a readable trace ({type(exc).__name__}: {_first_line(exc)}); "
                             "give an uncorrupted trace file") from None
        finally:
            if self._fh is not None:
                self._fh.close()

    def _events(self) -> Iterator[dict]:
        first = self._peek()
        if first == "":
            raise InputError(f"{self.path}: not a readable trace, the file is empty: the profiler did not finish "
                             "writing it; profile again")
        if first == "[":
            self.kind = "torch_npu"
            yield from self._array()
            return
        if first != "{":
            self._value()  # a JSON error, or a value that is no trace
            self._not_chrome()
        self._pos += 1
        found = False
        while True:
            if self._peek() == "}":
                break
            key = self._value()
            if self._peek() != ":":
                self._truncated("expected ':'")
            self._pos += 1
            if key == "traceEvents" and self._peek() == "[":
                self.kind, found = "torch", True
                yield from self._array()
            else:
                self.header[key] = self._value()
            following = self._peek()
            if following == ",":
                self._pos += 1
            elif following != "}":
                self._truncated("expected ',' or '}'")
        if not found:
            self._not_chrome()

    def _array(self) -> Iterator[list]:
        self._pos += 1  # the '['
        if self._peek() == "]":
            self._pos += 1
            return
        while True:
            batch = self._batch()
            if batch:
                yield self._checked(batch)
                continue
            yield self._checked([self._value()])
            following = self._peek()
            self._pos += 1
            if following == "]":
                return
            if following != ",":
                self._truncated("expected ',' or ']'")

    def _batch(self) -> list:
        """The whole events from the cursor to the last boundary in the window, decoded at once (C speed), and the
        cursor moved past them; [] when there is no such run of events."""
        buf, pos = self._buf, self._pos
        last = None
        for match in _BOUNDARY.finditer(buf, max(pos, len(buf) - _TAIL)):
            last = match
        if last is None or last.start() <= pos:
            return []
        records = self._decoded("[" + buf[pos:last.start() + 1] + "]")
        if records is None:
            return []
        self._pos = last.end()
        return records

    def _decoded(self, text: str):
        """``text`` decoded (orjson where installed), None when it is not JSON."""
        while True:
            try:
                return self._loads(text)
            except ValueError:
                if self._loads is json.loads:
                    return None
                # orjson refuses some JSON the standard library reads (NaN, a lone surrogate, a float past the
                # double range) and fails on a wrong cut alike: the standard library reads the rest of the file
                self._loads = json.loads

    def _checked(self, records: list) -> list:
        """``records`` with every ``ts`` / ``dur`` a number; one that is not an event object raises."""
        for record in records:
            if not isinstance(record, dict):
                raise InputError(f"{self.path}: not a Chrome trace (an event is a {type(record).__name__}, not an "
                                 "object)")
            ts = record.get("ts")
            if isinstance(ts, str) or isinstance(record.get("dur"), str):
                self.string_ts += isinstance(ts, str)
                self._numeric(record)
        return records

    def _numeric(self, event: dict) -> None:
        for key in ("ts", "dur"):
            if isinstance(event.get(key), str):
                try:
                    event[key] = float(event[key])
                except ValueError as exc:
                    raise InputError(f"{self.path}: an event's {key} is not a number ({_first_line(exc)}); "
                                     "re-run the profiler") from None

    def _peek(self) -> str:
        """The next character that is not white space ('' at the end), without consuming it."""
        while True:
            buf, pos = self._buf, self._pos
            while pos < len(buf) and buf[pos] in _SPACE:
                pos += 1
            self._pos = pos
            if pos < len(buf) or not self._more():
                return buf[pos] if pos < len(buf) else ""

    def _value(self):
        """Decode the JSON value at the cursor, reading more text while it runs past the window."""
        self._peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                if self._more():
                    continue
                self._truncated(exc.msg)
            # a number or a literal cut by the window's edge decodes short: make sure the text goes on after it
            if end < len(self._buf) or self._eof or not self._more():
                self._pos = end
                return value

    def _more(self) -> bool:
        if self._eof:
            return False
        chunk = self._fh.read(_CHUNK)
        if not chunk:
            self._eof = True
            return False
        self._buf = self._buf[self._pos:] + chunk
        self._pos = 0
        return True

    def _truncated(self, why: str):
        raise InputError(
            f"{self.path}: not a readable trace (JSONDecodeError: {why}): it is probably truncated; let the "
            "profiler finish (leave its `with` block) and use the new file"
        )

    def _not_chrome(self):
        raise InputError(
            f"{self.path}: not a Chrome trace (expected a list of events or an object with traceEvents); give a "
            "torch.profiler *.pt.trace.json or a torch_npu trace_view.json"
        )


def fast_json_loads() -> Callable[[str], Any]:
    """``orjson.loads`` where the ``orjson`` extra is installed, else ``json.loads``.

    orjson decodes a run of trace events ~1.5x as fast as the standard library's C scanner (the decoding is a third
    of compare-trace's time) and gives the same values for all a profiler writes; the one difference it does not
    raise on, an integer past 64 bits read as a float, no profiler writes (its ids and sizes are C integers).
    """
    try:
        import orjson
    except ImportError:
        return json.loads
    return orjson.loads


def stream_trace_file(path: Union[str, os.PathLike]) -> TraceStream:
    """A trace file to read one event at a time (see :class:`TraceStream`)."""
    return TraceStream(path)


def _open_text(path: str):
    fh = open(path, "rb")
    if fh.read(2) == _GZIP_MAGIC:
        fh.close()
        return gzip.open(path, "rt", encoding="utf-8")
    fh.close()
    return open(path, encoding="utf-8")
