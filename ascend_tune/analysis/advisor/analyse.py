"""The advisor's model: ma-advisor-style findings for each trace, gathered into one :class:`AdviceReport`.

``advise_traces(path)`` finds every trace under ``path`` (``traces.find``), runs the rules of ``rules.RULES`` on
each, adds a per-step time breakdown and the top ops by self time, and, for torch_npu ``*_ascend_pt`` folders,
Ascend's own ``msprof-analyze advisor`` when it is installed. Nothing here renders or writes a page:
``render.render_markdown`` / ``render.write_html`` do that with the report.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Optional, Union

from ...errors import InputError
from ..traces.find import TRACE_PATTERNS, find_traces
from ..traces.model import Trace
from ..traces.read import read_trace
from .breakdown import BREAKDOWN, step_times, top_ops
from .findings import SEVERITIES, Finding
from .msprof import ascend_pt_folders, run_msprof_advisor
from .rules import RULES

__all__ = ["AdviceReport", "Finding", "TraceAdvice", "advise_traces", "analyse_trace"]

PathLike = Union[str, os.PathLike]


@dataclass(frozen=True)
class TraceAdvice:
    """Everything the advisor says about one trace file."""

    path: str
    kind: str  # "torch.profiler" | "torch_npu"
    device: str  # "cpu" | "gpu" | "npu"
    has_stack: bool
    has_shapes: bool
    steps: tuple  # of steps.StepTime
    top_ops: tuple  # of steps.OpTime
    findings: tuple  # of Finding, most severe first
    notes: tuple = ()  # what the trace lacks for a full analysis

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


@dataclass(frozen=True)
class AdviceReport:
    """The advisor's answer for a set of traces; ``exit_code`` is 1 when any finding is a warning or worse."""

    traces: tuple  # of TraceAdvice
    msprof: tuple = ()  # of msprof.MsprofRun
    html_path: Optional[str] = None  # advice.html, once render.write_html has written it

    @property
    def findings(self) -> tuple:
        return tuple(f for t in self.traces for f in t.findings)

    @property
    def exit_code(self) -> int:
        return 1 if any(SEVERITIES.index(f.severity) >= 1 for f in self.findings) else 0

    def to_dict(self) -> dict:
        """The same as :meth:`as_dict` (0.1.0's name, kept for scripts that call it)."""
        return self.as_dict()

    def as_dict(self) -> dict:
        """A JSON-ready dict (``--json``): step parts by name, findings as plain fields."""
        return {
            "exit_code": self.exit_code,
            "html": self.html_path,
            "traces": [
                {
                    "path": t.path,
                    "kind": t.kind,
                    "device": t.device,
                    "has_stack": t.has_stack,
                    "has_shapes": t.has_shapes,
                    "notes": list(t.notes),
                    "steps": [
                        {"step": s.step, "total_ms": s.total_ms, "device_busy_ms": s.device_busy_ms,
                         "parts_ms": dict(zip(BREAKDOWN, s.parts))}
                        for s in t.steps
                    ],
                    "top_ops": [asdict(o) for o in t.top_ops],
                    "findings": [asdict(f) for f in t.findings],
                }
                for t in self.traces
            ],
            "msprof_analyze": [asdict(m) for m in self.msprof],
        }


def analyse_trace(trace: Trace) -> TraceAdvice:
    """Run every rule on one parsed trace and add its step breakdown and top ops.

    trace: from ``traces.read.read_trace``.
    """
    findings = [finding for rule in RULES for finding in rule(trace)]
    findings.sort(key=lambda f: SEVERITIES.index(f.severity), reverse=True)
    return TraceAdvice(
        path=trace.path,
        kind=trace.kind,
        device=trace.device,
        has_stack=trace.has_stack,
        has_shapes=trace.has_shapes,
        steps=step_times(trace),
        top_ops=top_ops(trace),
        findings=tuple(findings),
        notes=_notes(trace),
    )


def _notes(trace: Trace) -> tuple:
    notes = []
    if trace.steps[0].number is None:
        notes.append("no ProfilerStep#N markers: the whole trace counts as one step (call prof.step() every step)")
    if not trace.has_stack:
        notes.append("no Python stack (with_stack=False): host syncs are located by their enclosing ops only")
    if not trace.has_shapes:
        notes.append("no input shapes (record_shapes=False): the dynamic-shape rule did not run")
    elif len(trace.steps) < 3:
        notes.append(f"{len(trace.steps)} profiled step(s): the dynamic-shape rule needs at least 3")
    return tuple(notes)


def advise_traces(
    paths_or_dir: Union[PathLike, Sequence[PathLike]], out_dir: Optional[PathLike] = None
) -> AdviceReport:
    """Advice for every trace in ``paths_or_dir``; writes no page (``render.write_html`` does, given the report).

    paths_or_dir: a trace file (``.json``/``.json.gz``), a folder searched for ``*.pt.trace.json[.gz]`` and
        ``trace_view.json``, or a list of those. Bad input, or no trace at all, raises ``InputError``.
    out_dir: msprof-analyze writes its files under ``out_dir/msprof-analyze/<folder>``; None runs it in a
        temporary folder.
    """
    paths = find_traces(paths_or_dir)
    if not paths:
        given = [paths_or_dir] if isinstance(paths_or_dir, (str, os.PathLike)) else list(paths_or_dir)
        if not given:
            raise InputError("no trace given: name a trace file or a folder of traces")
        raise InputError(
            f"no {', '.join(TRACE_PATTERNS)} under {', '.join(os.fspath(p) for p in given)}: point at a "
            "torch.profiler or torch_npu profiler output folder, or at one trace file"
        )
    report = AdviceReport(traces=tuple(analyse_trace(read_trace(path)) for path in paths))
    folders = ascend_pt_folders(paths)
    if folders:
        report = replace(report, msprof=tuple(
            run_msprof_advisor(
                folder, None if out_dir is None else os.path.join(out_dir, "msprof-analyze", os.path.basename(folder))
            )
            for folder in folders
        ))
    return report
