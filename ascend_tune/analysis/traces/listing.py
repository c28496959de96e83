"""``ascend-tune trace``'s listing: every trace under a folder with its steps, rank and size, and a numeric copy of
torch_npu's string-``ts`` traces.

Perfetto rejects a ``trace_view.json`` whose ``ts`` are strings (torch_npu's ``convert_ns2us_str``;
Ascend/pytorch#133), so ``scan_traces`` writes a copy, ``trace_view.perfetto.json``, with every ``ts`` (and
``dur``) a number. Traces are found by ``traces.find`` and read by ``traces.files``; standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from ...errors import InputError
from ...formats.writing import make_folder, write_json_atomic
from .files import TraceFile, load_trace_file
from .find import find_traces, trace_rank
from .read import STEP_NAME

NORMALISED_SUFFIX = ".perfetto.json"



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
    loaded = load_trace_file(path)
    steps = set()
    for event in loaded.events:
        match = STEP_NAME.match(str(event.get("name", "")))
        if match and event.get("ph") == "X":
            steps.add(int(match.group(1)))
    written = None
    if normalise and loaded.string_ts:
        written = _normalised_path(path, root, out_dir)
        _write_normalised(written, loaded)
    return TraceInfo(
        path=path,
        kind=loaded.kind,
        rank=trace_rank(path, loaded.header),
        steps=tuple(sorted(steps)),
        size_bytes=os.path.getsize(path),
        events=len(loaded.events),
        string_ts=loaded.string_ts,
        normalised=written,
    )



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


def _write_normalised(path: str, loaded: TraceFile) -> None:
    """The loaded (numeric-``ts``) events in the trace's own layout: a bare list, or the object with its header."""
    events = list(loaded.events)
    make_folder(os.path.dirname(path) or ".")
    write_json_atomic(path, events if loaded.kind == "torch_npu" else {**loaded.header, "traceEvents": events})
