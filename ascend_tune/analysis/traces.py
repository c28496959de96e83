"""Profiler traces on disk: find them, read their steps, ranks and sizes, and repair torch_npu's string timestamps.

Two layouts are found under a folder, at any depth:
- torch.profiler's ``tensorboard_trace_handler`` files, ``*.pt.trace.json`` or ``*.pt.trace.json.gz``: a JSON object
  with ``traceEvents`` and numeric ``ts``;
- torch_npu's ``*_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json``: a bare JSON list of events whose ``ts`` is a
  *string* of microseconds (torch_npu's ``convert_ns2us_str``; Ascend/pytorch#133). Perfetto rejects those, so
  ``normalise`` writes a copy, ``trace_view.perfetto.json``, with every ``ts`` (and ``dur``) a number.

Standard library only: ``ascend-tune trace`` never imports torch.
"""

from __future__ import annotations

import fnmatch
import gzip
import json
import os
import re
import zlib
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import InputError, OutputError

TORCH_PATTERNS = ("*.pt.trace.json", "*.pt.trace.json.gz")
NPU_TRACE_NAME = "trace_view.json"
NORMALISED_SUFFIX = ".perfetto.json"

_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_RANK_FOLDER = re.compile(r"^rank(\d+)$")
_NPU_INFO = re.compile(r"^profiler_info_(\d+)\.json$")


@dataclass(frozen=True)
class TraceInfo:
    """One trace that loaded.

    path: the file; kind: ``torch`` (``traceEvents`` object) or ``torch_npu`` (bare event list); rank: from the
    trace's ``distributedInfo``, a ``rank{R}`` folder or torch_npu's ``profiler_info_{R}.json`` (None if unknown);
    steps: the ``ProfilerStep#N`` numbers it holds, sorted; size_bytes: on disk; events: how many;
    string_ts: events whose ``ts`` is a string; normalised: the numeric-``ts`` copy written, if any.
    """

    path: str
    kind: str
    rank: Optional[int]
    steps: tuple
    size_bytes: int
    events: int
    string_ts: int
    normalised: Optional[str] = None

    @property
    def step_ranges(self) -> list:
        """The steps as ``(first, last)`` runs of consecutive numbers."""
        runs: list = []
        for n in self.steps:
            if runs and n == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], n)
            else:
                runs.append((n, n))
        return runs


@dataclass(frozen=True)
class TraceProblem:
    """A trace file that did not load, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class TraceListing:
    """What ``scan_traces`` found under ``root``: traces that loaded (by path) and files that did not."""

    root: str
    traces: tuple
    problems: tuple


def find_traces(root: str) -> list:
    """Paths of the trace files under ``root`` (or ``[root]`` when it is a trace file), sorted."""
    if os.path.isfile(root):
        return [root]
    if not os.path.isdir(root):
        raise InputError(
            f"{root}: no such file or folder; pass a trace file or a profile folder (e.g. exp/train/profile)"
        )
    found = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            if name == NPU_TRACE_NAME or any(fnmatch.fnmatch(name, p) for p in TORCH_PATTERNS):
                found.append(os.path.join(folder, name))
    return sorted(found)


def load_events(path: str) -> tuple:
    """``(kind, events, meta)`` of a Chrome trace file, gzip or not; raises InputError when it does not load."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        if raw[:2] == b"\x1f\x8b":  # gzip's magic number: the name may not say
            raw = gzip.decompress(raw)
        data = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; pass a trace file or a profile folder") from None
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a readable trace ({type(exc).__name__}: {_first_line(exc)})") from None
    if isinstance(data, list):
        return "torch_npu", data, {}
    if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        return "torch", data["traceEvents"], data
    raise InputError(f"{path}: not a Chrome trace (expected a list of events or an object with traceEvents)")


def normalise_events(events: list) -> list:
    """The events with numeric ``ts`` / ``dur`` (string microseconds become floats); raises ValueError if one isn't."""
    out = []
    for event in events:
        if isinstance(event, dict) and (isinstance(event.get("ts"), str) or isinstance(event.get("dur"), str)):
            event = dict(event)
            for key in ("ts", "dur"):
                if isinstance(event.get(key), str):
                    event[key] = float(event[key])
        out.append(event)
    return out


def scan_traces(root: str, normalise: bool = True, out_dir: Optional[str] = None) -> TraceListing:
    """Load every trace under ``root``; with ``normalise``, write a numeric-``ts`` copy of string-``ts`` traces.

    Parameters:
        root: a profile folder (searched at any depth) or one trace file.
        normalise: write ``<name>.perfetto.json`` beside each trace that has string ``ts``.
        out_dir: write those copies here instead (the folders below ``root`` are kept).
    """
    paths = find_traces(root)
    traces, problems = [], []
    for path in paths:
        try:
            traces.append(_read(path, root, normalise, out_dir))
        except InputError as exc:
            problems.append(TraceProblem(path, str(exc).removeprefix(f"{path}: ")))
    return TraceListing(root=root, traces=tuple(traces), problems=tuple(problems))


def _read(path: str, root: str, normalise: bool, out_dir: Optional[str]) -> TraceInfo:
    kind, events, meta = load_events(path)
    steps = set()
    string_ts = 0
    for event in events:
        if not isinstance(event, dict):
            raise InputError(f"{path}: not a Chrome trace (an event is a {type(event).__name__}, not an object)")
        match = _STEP_NAME.match(str(event.get("name", "")))
        if match and event.get("ph") == "X":
            steps.add(int(match.group(1)))
        if isinstance(event.get("ts"), str):
            string_ts += 1
    written = None
    if normalise and string_ts:
        try:
            fixed = normalise_events(events)
        except ValueError as exc:
            raise InputError(f"{path}: an event's ts is not a number ({_first_line(exc)})") from None
        written = _normalised_path(path, root, out_dir)
        _write_json(written, fixed if kind == "torch_npu" else {**meta, "traceEvents": fixed})
    return TraceInfo(
        path=path,
        kind=kind,
        rank=_rank(path, meta),
        steps=tuple(sorted(steps)),
        size_bytes=os.path.getsize(path),
        events=len(events),
        string_ts=string_ts,
        normalised=written,
    )


def _rank(path: str, meta: dict) -> Optional[int]:
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    folder = os.path.dirname(os.path.abspath(path))
    for part in reversed(folder.split(os.sep)):
        match = _RANK_FOLDER.match(part)
        if match:
            return int(match.group(1))
    # torch_npu: <run>_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json beside <run>_ascend_pt/profiler_info_{R}.json
    run_dir = os.path.dirname(folder)
    if run_dir.endswith("_ascend_pt") and os.path.isdir(run_dir):
        for name in os.listdir(run_dir):
            match = _NPU_INFO.match(name)
            if match:
                return int(match.group(1))
    return None


def _normalised_path(path: str, root: str, out_dir: Optional[str]) -> str:
    name = os.path.basename(path)
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    name += NORMALISED_SUFFIX
    if out_dir is None:
        return os.path.join(os.path.dirname(path), name)
    base = root if os.path.isdir(root) else os.path.dirname(root)
    relative = os.path.relpath(os.path.dirname(os.path.abspath(path)), os.path.abspath(base))
    return os.path.normpath(os.path.join(out_dir, relative, name))


def _write_json(path: str, data: Any) -> None:
    tmp = path + ".tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write {path} ({exc.strerror or exc}); pass a writable --out folder") from None


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
